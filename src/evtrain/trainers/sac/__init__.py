"""Soft actor-critic (Haarnoja et al. 2018), for continuous and discrete actions.

:mod:`~evtrain.trainers.sac.trainer` wires the off-policy loop to SAC's networks
(:mod:`~evtrain.trainers.sac.actor`: the squashed Gaussian policy);
:mod:`~evtrain.trainers.sac.update` holds the losses and one gradient step;
:mod:`~evtrain.trainers.sac.discrete` the discrete-action variant (Christodoulou 2019), its
export views in :mod:`~evtrain.trainers.sac.discrete_policy`;
:mod:`~evtrain.trainers.sac.twin_q` the two critics; :mod:`~evtrain.trainers.sac.memory`
the recurrent networks and sequence replay (:mod:`~evtrain.trainers.sac.recurrent_update`:
their update); :mod:`~evtrain.trainers.sac.rewards` the reward
providers evaluated on replay minibatches.  ``evtrain.trainers.sac.SACTrainer`` is the
documented path of the trainer.
"""

from __future__ import annotations

from evtrain.trainers.loops.off_policy import space_shape
from evtrain.trainers.sac.actor import SACPolicy, SquashedGaussianActor, squashed_sample
from evtrain.trainers.sac.trainer import UPDATE_STATS, SACTrainer

__all__ = [
    "UPDATE_STATS",
    "SACPolicy",
    "SACTrainer",
    "SquashedGaussianActor",
    "space_shape",
    "squashed_sample",
]
