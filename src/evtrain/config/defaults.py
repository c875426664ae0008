"""``default_settings``: merged under every behavior (ML-Agents' semantics), its problems
reported once.

A bad key of ``default_settings`` is merged under every behavior and so fails there too; it is
reported where it is written, under ``default_settings``, not again for each behavior that
inherits it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from evtrain.config.problems import Problem


def merge_default_settings(data: Any) -> Any:
    """Deep-merge ``default_settings`` under each behavior (ML-Agents' semantics).

    A behavior that names another ``trainer_type`` does not inherit default hyperparameters:
    they belong to the default's trainer.
    """
    if not isinstance(data, dict) or not isinstance(data.get("default_settings"), dict):
        return data
    default = data["default_settings"]
    behaviors = data.get("behaviors")
    if not isinstance(behaviors, dict):
        return data
    merged = {}
    for name, settings in behaviors.items():
        if not isinstance(settings, dict):
            merged[name] = settings
            continue
        base = dict(default)
        own_type = settings.get("trainer_type", default.get("trainer_type", "ppo"))
        if own_type != default.get("trainer_type", "ppo"):
            base.pop("hyperparameters", None)
        merged[name] = _deep_merge(base, settings)
    return {**data, "behaviors": merged}


def drop_inherited(problems: Sequence[Problem], data: Any) -> list[Problem]:
    """``problems`` without a behavior's copy of a ``default_settings`` problem (``data`` is
    the options before :func:`merge_default_settings`).  A behavior that sets the same key
    itself keeps its own problem."""
    behaviors = data.get("behaviors") if isinstance(data, dict) else None
    if not isinstance(behaviors, dict):
        return list(problems)
    own = {str(name): settings for name, settings in behaviors.items()}
    written = {p for p in problems if p.path[:1] == ("default_settings",)}
    kept = []
    for problem in problems:
        if problem.path[:1] == ("behaviors",) and len(problem.path) > 2:
            name, keys = problem.path[1], problem.path[2:]
            inherited = Problem(("default_settings", *keys), problem.message) in written
            if inherited and not _sets(own.get(name), keys):
                continue
        kept.append(problem)
    return kept


def _sets(settings: Any, keys: Sequence[str]) -> bool:
    for key in keys:
        if not isinstance(settings, dict) or key not in settings:
            return False
        settings = settings[key]
    return True


def _deep_merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in over.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _deep_merge(out[key], value)
        else:
            out[key] = value
    return out
