"""Proximal policy optimisation (Schulman et al. 2017).

:mod:`~evtrain.trainers.ppo.algorithm` is PPO behind the on-policy protocol (its networks,
optimizer, reward providers, the epochs and minibatches of its update);
:mod:`~evtrain.trainers.ppo.update` is the paper's loss and one gradient step, top to bottom;
:mod:`~evtrain.trainers.ppo.gradients` writes the gradients out by hand for small networks;
:mod:`~evtrain.trainers.ppo.trainer` is the on-policy loop that has PPO.  Rollouts and GAE are
the loop's (:mod:`evtrain.trainers.loops`).
``evtrain.trainers.ppo.PPOTrainer`` is the documented path of the trainer.
"""

from __future__ import annotations

from evtrain.trainers.ppo.trainer import (
    BETA_FLOOR,
    EPSILON_FLOOR,
    PPOTrainer,
    clipped_surrogate_loss,
)

__all__ = ["BETA_FLOOR", "EPSILON_FLOOR", "PPOTrainer", "clipped_surrogate_loss"]
