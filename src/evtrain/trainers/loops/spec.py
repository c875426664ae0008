"""The :class:`~evtrain.trainers.algorithm.AlgorithmSpec` a loop builds its algorithm from: its
trainer's behavior, settings, spaces, device and world, and the trainer's own random
generators and non-finite guard (shared objects, never copies)."""

from __future__ import annotations

from typing import Any

import attrs

from evtrain.trainers.algorithm import AlgorithmSpec
from evtrain.trainers.base import Trainer


def spec_for(
    trainer: Trainer, hyperparameters: Any = None, *, group_size: int = 1
) -> AlgorithmSpec:
    """What ``trainer``'s algorithm is built from: its settings (with ``hyperparameters``
    instead of the settings' own, when given: e.g. a rounded ``buffer_size``), spaces, device
    and world, and its random generators and non-finite guard (the trainer's own objects,
    shared)."""
    settings = trainer.settings
    if hyperparameters is not None and hyperparameters is not settings.hyperparameters:
        settings = attrs.evolve(settings, hyperparameters=hyperparameters)
    return AlgorithmSpec(
        behavior_name=trainer.behavior_name,
        settings=settings,
        observation_space=trainer.envs.single_observation_space,
        action_space=trainer.envs.single_action_space,
        num_envs=trainer.num_envs,
        device=trainer.device,
        world=trainer.world,
        init_generator=trainer.init_generator,
        generator=trainer.generator,
        rng=trainer.rng,
        finite=trainer.finite,
        group_size=group_size,
    )
