"""Trainer types by name: their hyperparameter settings class, and the trainer class.

Settings classes are needed to validate a config (no torch import); trainer classes only when
a run starts, so built-in trainers are named by ``module:Class`` and imported on first use.
Trainer plugins (the ``evtrain.trainer`` entry-point group) add entries here.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

import attrs

from evtrain.trainers.settings import PPOSettings, SACSettings

if TYPE_CHECKING:
    from evtrain.trainers.base import Trainer


@attrs.frozen(kw_only=True)
class TrainerType:
    """One registered trainer type."""

    name: str
    settings: type[Any]
    """The attrs class of its ``hyperparameters``."""
    trainer: str | type[Trainer]
    """The trainer class, or ``module:Class`` to import when a run needs it."""
    source: str = "evtrain"
    """Who registered it: ``evtrain`` or a plugin's distribution."""

    def load(self) -> type[Trainer]:
        """The trainer class (imported on first use)."""
        if isinstance(self.trainer, str):
            module, _, name = self.trainer.partition(":")
            cls: type[Trainer] = getattr(importlib.import_module(module), name)
            return cls
        return self.trainer


TRAINER_TYPES: dict[str, TrainerType] = {
    "ppo": TrainerType(name="ppo", settings=PPOSettings, trainer="evtrain.trainers.ppo:PPOTrainer"),
    "sac": TrainerType(name="sac", settings=SACSettings, trainer="evtrain.trainers.sac:SACTrainer"),
}
"""Every trainer type a config may name in ``trainer_type``."""


def trainer_type(name: str) -> TrainerType:
    """The registered type ``name``.

    :raises ValueError: listing the available types and where each came from.
    """
    try:
        return TRAINER_TYPES[name]
    except KeyError:
        available = ", ".join(f"{t.name} ({t.source})" for t in TRAINER_TYPES.values())
        raise ValueError(
            f"expected a registered trainer type, got {name!r}; available: {available}"
        ) from None
