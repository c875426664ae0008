"""MA-POCA (Cohen et al. 2021), ML-Agents' ``trainer_type: poca``.

:mod:`~evtrain.trainers.poca.trainer` wires the group loop to POCA's returns and critic loss;
:mod:`~evtrain.trainers.poca.critic` is the attention critic (value and counterfactual
baselines).  Rollouts of agent slots, the update and its minibatches are the group loop's
(:mod:`evtrain.trainers.loops.group_rollout`, :mod:`evtrain.trainers.loops.group_update`).
``evtrain.trainers.poca.POCATrainer`` is the documented path of the trainer.
"""

from __future__ import annotations

from evtrain.trainers.poca.trainer import POCATrainer

__all__ = ["POCATrainer"]
