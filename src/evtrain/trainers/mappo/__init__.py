"""MAPPO (Yu et al. 2022), ML-Agents' ``trainer_type: mappo``: PPO with a critic of the group.

:mod:`~evtrain.trainers.mappo.trainer` wires the group loop to MAPPO's returns and value loss;
:mod:`~evtrain.trainers.mappo.critic` is the centralised critic.  Rollouts of agent slots, the
update and its minibatches are the group loop's (:mod:`evtrain.trainers.loops.group_rollout`,
:mod:`evtrain.trainers.loops.group_update`).  ``evtrain.trainers.mappo.MAPPOTrainer`` is the
documented path of the trainer.
"""

from __future__ import annotations

from evtrain.trainers.mappo.trainer import MAPPOTrainer

__all__ = ["MAPPOTrainer"]
