"""Trainer types by name: their hyperparameter settings class, and the trainer class.

Settings classes are needed to validate a config (no torch import); trainer classes only when
a run starts, so built-in trainers are named by ``module:Class`` and imported on first use.

Trainer plugins (the ``evtrain.trainer`` entry-point group, and ``--plugins`` modules) add types
for one run: :func:`merge_trainer_types` merges them with the built-ins, and
:func:`use_trainer_types` makes that mapping the one config structuring and the runner see.
A plugin may not silently replace a type: a clash is an error unless ``plugins.trainer_types``
names the source that wins.
"""

from __future__ import annotations

import contextlib
import contextvars
import importlib
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

import attrs

from evtrain.trainers.settings import MAPPOSettings, POCASettings, PPOSettings, SACSettings

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
    "poca": TrainerType(
        name="poca", settings=POCASettings, trainer="evtrain.trainers.poca:POCATrainer"
    ),
    "mappo": TrainerType(
        name="mappo", settings=MAPPOSettings, trainer="evtrain.trainers.mappo:MAPPOTrainer"
    ),
}
"""Every trainer type a config may name in ``trainer_type``."""


_ACTIVE: contextvars.ContextVar[Mapping[str, TrainerType]] = contextvars.ContextVar(
    "evtrain_trainer_types", default=TRAINER_TYPES
)


def chosen_trainer_types() -> Mapping[str, TrainerType] | None:
    """The types a :func:`use_trainer_types` block around the caller set, or ``None`` outside
    any (the built-in ones are in effect then)."""
    types = _ACTIVE.get()
    return None if types is TRAINER_TYPES else types


@contextlib.contextmanager
def use_trainer_types(types: Mapping[str, TrainerType]) -> Iterator[None]:
    """Make ``types`` the trainer types :func:`trainer_type` resolves, for this block."""
    token = _ACTIVE.set(types)
    try:
        yield
    finally:
        _ACTIVE.reset(token)


def merge_trainer_types(
    plugin_types: list[TrainerType], prefer: Mapping[str, str]
) -> dict[str, TrainerType]:
    """Built-ins plus ``plugin_types``; a name provided twice must be settled by ``prefer``
    (type name → the source that wins, ``evtrain`` for the built-in).

    :raises PluginError: a clash ``prefer`` does not settle.
    """
    from evtrain.errors import PluginError

    by_name: dict[str, list[TrainerType]] = {}
    for candidate in [*TRAINER_TYPES.values(), *plugin_types]:
        by_name.setdefault(candidate.name, []).append(candidate)
    merged: dict[str, TrainerType] = {}
    for name, candidates in by_name.items():
        if len(candidates) == 1:
            merged[name] = candidates[0]
            continue
        sources = [c.source for c in candidates]
        chosen = [c for c in candidates if c.source == prefer.get(name)]
        if len(chosen) != 1:
            raise PluginError(
                f"trainer type {name!r} is provided by {' and by '.join(sources)}; say which "
                f"one to use with plugins.trainer_types: {{{name}: <one of {sources}>}}"
            )
        merged[name] = chosen[0]
    return merged


def trainer_type(name: str) -> TrainerType:
    """The type ``name`` among the active trainer types.

    :raises ValueError: listing the available types and where each came from.
    """
    try:
        return _ACTIVE.get()[name]
    except KeyError:
        available = ", ".join(f"{t.name} ({t.source})" for t in _ACTIVE.get().values())
        raise ValueError(
            f"expected a registered trainer type, got {name!r}; available: {available}"
        ) from None
