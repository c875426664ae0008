"""Soft actor-critic (Haarnoja et al. 2018), for continuous and discrete actions.

:mod:`~evtrain.trainers.sac.trainer` is the off-policy loop with SAC's algorithm
(:mod:`~evtrain.trainers.sac.algorithm`, an
:class:`~evtrain.trainers.algorithm.OffPolicyAlgorithm`), whose networks and optimizers are
built in :mod:`~evtrain.trainers.sac.networks` (:mod:`~evtrain.trainers.sac.actor`: the
squashed Gaussian policy); :mod:`~evtrain.trainers.sac.update` holds the losses and one
gradient step; :mod:`~evtrain.trainers.sac.discrete` the discrete-action variant
(Christodoulou 2019), its export views in :mod:`~evtrain.trainers.sac.discrete_policy`;
:mod:`~evtrain.trainers.sac.twin_q` the two critics; :mod:`~evtrain.trainers.sac.memory` the
recurrent networks (:mod:`~evtrain.trainers.sac.recurrent_update`: their update on sequences);
:mod:`~evtrain.trainers.sac.reward_providers` the reward providers evaluated on replay
minibatches.  ``evtrain.trainers.sac.SACTrainer`` is the documented path of the trainer.
"""

from __future__ import annotations

from evtrain.trainers.loops.off_policy import space_shape
from evtrain.trainers.sac.actor import SACPolicy, SquashedGaussianActor, squashed_sample
from evtrain.trainers.sac.algorithm import SAC
from evtrain.trainers.sac.trainer import SACTrainer
from evtrain.trainers.sac.update import UPDATE_STATS

__all__ = [
    "SAC",
    "UPDATE_STATS",
    "SACPolicy",
    "SACTrainer",
    "SquashedGaussianActor",
    "space_shape",
    "squashed_sample",
]
