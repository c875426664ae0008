"""MA-POCA (Cohen et al. 2021), ML-Agents' ``trainer_type: poca``.

:mod:`~evtrain.trainers.poca.trainer` holds the algorithm
(:class:`~evtrain.trainers.poca.trainer.POCA`: its valuing, lambda-returns and critic loss) and
the trainer, the on-policy loop in group mode that has it; :mod:`~evtrain.trainers.poca.critic`
is the attention critic (value and counterfactual baselines).  Rollouts of agent slots are the
loop's (:mod:`evtrain.trainers.loops.group_rollout`); the policy update POCA shares with MAPPO
is :class:`~evtrain.trainers.loops.group_update.GroupPPO`.
``evtrain.trainers.poca.POCATrainer`` is the documented path of the trainer.
"""

from __future__ import annotations

from evtrain.trainers.poca.trainer import POCATrainer

__all__ = ["POCATrainer"]
