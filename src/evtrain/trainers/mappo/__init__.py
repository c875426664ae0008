"""MAPPO (Yu et al. 2022), ML-Agents' ``trainer_type: mappo``: PPO with a critic of the group.

:mod:`~evtrain.trainers.mappo.trainer` holds the algorithm
(:class:`~evtrain.trainers.mappo.trainer.MAPPO`: its valuing, GAE per agent and value loss) and
the trainer, the on-policy loop in group mode that has it; :mod:`~evtrain.trainers.mappo.critic`
is the centralised critic.  Rollouts of agent slots are the loop's
(:mod:`evtrain.trainers.loops.group_rollout`); the policy update MAPPO shares with POCA is
:class:`~evtrain.trainers.loops.group_update.GroupPPO`.
``evtrain.trainers.mappo.MAPPOTrainer`` is the documented path of the trainer.
"""

from __future__ import annotations

from evtrain.trainers.mappo.trainer import MAPPOTrainer

__all__ = ["MAPPOTrainer"]
