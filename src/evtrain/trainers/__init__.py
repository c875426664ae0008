"""Trainers: PPO and SAC on Gymnasium vector environments, reporting through a StatsReporter.

The settings classes import nothing heavy, so options can be validated without torch; the
trainers themselves (and torch) are imported on first attribute access.  Trainer types by
name live in :mod:`evtrain.trainers.registry`.
"""

from __future__ import annotations

import importlib
from typing import Any

from evtrain.trainers.settings import (
    MemorySettings,
    NetworkSettings,
    PPOSettings,
    RewardProviders,
    RewardProviderSettings,
    SACSettings,
    TrainerSettings,
)

_LAZY = {
    "Trainer": "evtrain.trainers.base",
    "make_vector_env": "evtrain.trainers.envs",
    "compute_gae": "evtrain.trainers.loops.gae",
    "PPOTrainer": "evtrain.trainers.ppo",
    "clipped_surrogate_loss": "evtrain.trainers.ppo",
    "SACTrainer": "evtrain.trainers.sac",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'evtrain.trainers' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)


__all__ = [
    "MemorySettings",
    "NetworkSettings",
    "PPOSettings",
    "PPOTrainer",
    "RewardProviderSettings",
    "RewardProviders",
    "SACSettings",
    "SACTrainer",
    "Trainer",
    "TrainerSettings",
    "clipped_surrogate_loss",
    "compute_gae",
    "make_vector_env",
]
