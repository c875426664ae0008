"""Why a checkpoint does not fit the networks a run builds, said in the options' own words.

``--resume``, ``--initialize-from`` and ``init_path`` load a checkpoint into networks built from
this run's options; when those were built from other settings, torch's ``load_state_dict``
raises an 80-line list of tensor names and shapes.  What the user changed is a key of the
config, so :func:`misfit` names the keys whose values differ between this run's options and the
``configuration.yaml`` of the run the checkpoint comes from (``network_settings.hidden_units:
64 -> 128``).

A resumed run rewrites its own ``configuration.yaml`` before its behaviors are built, so
:func:`saved_configurations` reads the ones the checkpoints come from first, for the duration of
the run (as :func:`~evtrain.trainers.registry.use_trainer_types` scopes the trainer types).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from contextvars import ContextVar
from pathlib import Path
from typing import Any

from evtrain.config.options import RunOptions
from evtrain.config.problems import shorten
from evtrain.errors import CheckpointError, ConfigError

CONFIGURATION = "configuration.yaml"

_SAVED: ContextVar[Mapping[Path, Mapping[str, Any]]] = ContextVar("evtrain_saved_configurations")
"""A run folder's ``configuration.yaml`` data as it was before this run started."""

SHAPING = ("trainer_type", "network_settings", "reward_signals", "behavioral_cloning")
"""A behavior's settings that decide the shapes of what its checkpoint holds."""
SHAPING_HYPERPARAMETERS = ("shared_critic",)
"""A behavior's ``hyperparameters`` that decide them too (PPO's value heads on the policy's
body, or a critic of their own)."""
SHAPING_ENV = ("env_id", "env_kwargs")
"""``env_settings`` that decide the observation and action shapes."""


@contextlib.contextmanager
def saved_configurations(options: RunOptions) -> Iterator[None]:
    """Keep the ``configuration.yaml`` of this run (when resumed) and of the run
    ``--initialize-from`` names, as they are now, for :func:`misfit`."""
    cs = options.checkpoint_settings
    folders = [cs.write_path] if cs.resume else []
    if cs.maybe_init_path is not None:
        folders.append(cs.maybe_init_path)
    saved = {folder: data for folder in folders if (data := _read(folder)) is not None}
    token = _SAVED.set(saved)
    try:
        yield
    finally:
        _SAVED.reset(token)


def _read(folder: Path) -> Mapping[str, Any] | None:
    from evtrain.run.options import read_config

    try:
        return read_config(folder / CONFIGURATION) if (folder / CONFIGURATION).is_file() else None
    except ConfigError:
        return None


def misfit(options: RunOptions, name: str, checkpoint: Path, error: Exception) -> CheckpointError:
    """The error for ``checkpoint`` failing to load into behavior ``name`` (with ``error``):
    one line naming the settings that differ from the run the checkpoint comes from."""
    # results/<run>/<behavior>/checkpoint.pt, or a behavior folder's file given as init_path
    saved = {folder.resolve(): data for folder, data in _SAVED.get({}).items()}
    source: Path | None = None
    data: Mapping[str, Any] | None = None
    for folder in (checkpoint.parent.parent, checkpoint.parent):
        data = saved.get(folder.resolve()) or _read(folder)
        if data is not None:
            source = folder
            break
    head = f"{checkpoint} does not fit behavior {name!r} of this run"
    fix = (
        "train with the settings it was saved with, or start without --resume, "
        "--initialize-from and init_path"
    )
    if data is None or source is None:
        return CheckpointError(f"{head} ({_torch_says(error)}); {fix}")
    changes = differences(data, options.as_dict(), name)
    if not changes:
        return CheckpointError(
            f"{head}, though its settings equal those of {source / CONFIGURATION} "
            f"({_torch_says(error)}); {fix}"
        )
    return CheckpointError(
        f"{head}: its networks were built with other settings ({source / CONFIGURATION} -> "
        f"this run): {'; '.join(changes)}; {fix}"
    )


def differences(saved: Mapping[str, Any], current: Mapping[str, Any], name: str) -> list[str]:
    """``key: old -> new`` for each setting in :data:`SHAPING`,
    :data:`SHAPING_HYPERPARAMETERS` of behavior ``name`` and :data:`SHAPING_ENV` that differs
    between ``saved`` and ``current`` options data."""
    changes: list[str] = []
    behavior = ("behaviors", name)
    for path, keys in (
        (behavior, SHAPING),
        ((*behavior, "hyperparameters"), SHAPING_HYPERPARAMETERS),
        (("env_settings",), SHAPING_ENV),
    ):
        section, now = _mapping(saved, *path), _mapping(current, *path)
        prefix = ".".join(path)
        for key in keys:
            _diff(section.get(key), now.get(key), f"{prefix}.{key}", changes)
    return changes


def _mapping(data: Mapping[str, Any], *keys: str) -> Mapping[str, Any]:
    for key in keys:
        inner = data.get(key) if isinstance(data, Mapping) else None
        data = inner if isinstance(inner, Mapping) else {}
    return data


def _diff(old: Any, new: Any, key: str, out: list[str]) -> None:
    if isinstance(old, Mapping) and isinstance(new, Mapping):
        for inner in sorted(set(old) | set(new), key=str):
            _diff(old.get(inner), new.get(inner), f"{key}.{inner}", out)
    elif old != new:
        out.append(f"{key}: {shorten(_show(old), 60)} -> {shorten(_show(new), 60)}")


def _show(value: Any) -> str:
    return "(none)" if value is None else str(value)


def _torch_says(error: Exception) -> str:
    """The first line of torch's complaint, and its first mismatch, cut short."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    return shorten(" ".join(lines[:2]) or type(error).__name__, 200)
