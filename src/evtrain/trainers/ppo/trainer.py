"""Proximal Policy Optimization (Schulman et al. 2017) on a Gymnasium vector environment.

One :meth:`PPOTrainer.advance` is one iteration of the paper's Algorithm 1: run the policy for
``buffer_size / num_envs`` steps in each environment, compute advantages with GAE, then
optimise the clipped surrogate objective for ``num_epoch`` epochs of ``batch_size``
minibatches.  Implementation choices follow "The 37 implementation details of PPO" (Huang et
al. 2022) as SB3 and cleanrl do: orthogonal init, Adam with ``eps=1e-5``, per-minibatch
advantage normalisation, global gradient clipping, time-limit bootstrapping.

The trainer is the on-policy loop (:mod:`evtrain.trainers.loops.on_policy`: rollouts, GAE,
bookkeeping, threading, checkpoints) that has PPO (:class:`~evtrain.trainers.ppo.algorithm.PPO`:
the networks, the optimizer, the reward providers and the update).

With ``threaded: true`` (:mod:`evtrain.trainers.threaded`) the update of one rollout runs on
the update thread while the next rollout is collected, acting with a copy of the agent from
before that update; the next rollout's values, advantages and update wait for it.

With intrinsic reward providers (``reward_signals.gail``, ``curiosity``, ``rnd``; see
:mod:`evtrain.trainers.rewards.build`) the critic has one value head per provider, as in
ML-Agents: each provider's rewards get GAE with its own ``gamma`` and value head, the advantage
is their sum, and the providers' models train on the update's minibatches.  With
``behavioral_cloning`` the policy also learns the demonstrations' actions after each update
(:mod:`evtrain.trainers.rewards.behavioral_cloning`).  Without them the update is the
extrinsic-only one, step for step.

With ``network_settings.memory`` the policy and the critic are recurrent
(:class:`~evtrain.trainers.networks.recurrent.RecurrentActorCritic`): the rollout carries
their memories and the update trains on sequences (:mod:`evtrain.trainers.loops.recurrent_rollout`).
Without it, nothing here changes.
"""

from __future__ import annotations

from evtrain.trainers.loops.on_policy import OnPolicyTrainer
from evtrain.trainers.loops.schedules import BETA_FLOOR, EPSILON_FLOOR
from evtrain.trainers.ppo.algorithm import PPO
from evtrain.trainers.ppo.update import clipped_surrogate_loss
from evtrain.trainers.settings import PPOSettings

__all__ = ["BETA_FLOOR", "EPSILON_FLOOR", "PPOTrainer", "clipped_surrogate_loss"]


class PPOTrainer(OnPolicyTrainer):
    """PPO for ``Discrete`` and ``Box`` action spaces: the on-policy loop
    (:mod:`~evtrain.trainers.loops.on_policy`) with PPO (:mod:`~evtrain.trainers.ppo.algorithm`).

    Its networks are in :mod:`evtrain.trainers.networks.policies`.
    """

    settings_type = PPOSettings
    algorithm_type = PPO
    algorithm: PPO
