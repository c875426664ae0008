"""What a sweep leaves: a table of its trials on the console, and ``best.yaml``, the best
trial's config, ready for ``evtrain learn``."""

from __future__ import annotations

import shlex
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from evtrain.atomic import atomic_write
from evtrain.sweep.space import trial_data
from evtrain.sweep.study import ERROR, INTERRUPTED, STEPS

if TYPE_CHECKING:
    import optuna

BEST = "best.yaml"
"""The best trial's config, in the study's folder."""


def short_names(paths: Sequence[str]) -> dict[str, str]:
    """Each key path by its last key, or by as many of its last keys as tell it from the
    others (``learning_rate``; ``Walker.hyperparameters.learning_rate`` beside another
    behavior's)."""
    names: dict[str, str] = {}
    for path in paths:
        keys = path.split(".")
        for size in range(1, len(keys) + 1):
            name = ".".join(keys[-size:])
            if sum(1 for other in paths if other == name or other.endswith("." + name)) == 1:
                break
        names[path] = name
    return names


def _value(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def table(trials: Sequence[optuna.trial.FrozenTrial], paths: Sequence[str]) -> list[str]:
    """The lines of the trials' table: number, state, value, steps, then each parameter."""
    names = short_names(paths)
    header = ["trial", "state", "value", "steps", *names.values()]
    rows = [header]
    for t in sorted(trials, key=lambda t: t.number):
        state = "INTERRUPTED" if t.user_attrs.get(INTERRUPTED) else t.state.name
        value = t.value
        if value is None and t.intermediate_values:  # pruned: its last reported value
            value = t.intermediate_values[max(t.intermediate_values)]
        steps = t.user_attrs.get(STEPS)
        cells = [
            str(t.number),
            state,
            "" if value is None else _value(value),
            "" if steps is None else f"{steps:,}",
            *(_value(t.params[p]) if p in t.params else "" for p in paths),
        ]
        rows.append(cells)
    widths = [max(len(r[i]) for r in rows) for i in range(len(header))]
    lines = ["  ".join(c.rjust(w) for c, w in zip(r, widths, strict=True)) for r in rows]
    errors = [f"trial {t.number}: {t.user_attrs[ERROR]}" for t in trials if ERROR in t.user_attrs]
    return lines + errors


def best_run_id(study: str, best: optuna.trial.FrozenTrial) -> str:
    """The run id ``best.yaml`` trains under: ``<study>-best-trial-0007``, after the study and
    its best trial, so that training it collides neither with another run of the results
    folder nor with the best of another study."""
    return f"{study}-best-trial-{best.number:04d}"


def write_best(
    folder: Path, data: Mapping[str, Any], best: optuna.trial.FrozenTrial, stat: str, study: str
) -> Path:
    """``<folder>/best.yaml``: the config with the best trial's values, no ``sweep`` section
    and ``checkpoint_settings.run_id`` :func:`best_run_id`, headed by a comment naming the
    trial, its score and the command that trains it; written atomically."""
    config = trial_data(data, best.params)
    checkpoints = config.setdefault("checkpoint_settings", {})
    checkpoints["run_id"] = best_run_id(study, best)
    path = folder / BEST
    header = (
        f"# The best trial of the sweep in {folder}: trial {best.number} "
        f"({stat} {best.value}).\n# {learn_line(path)}\n"
    )
    text = header + yaml.safe_dump(config, sort_keys=False)
    atomic_write(path, lambda stream: stream.write(text.encode()))
    return path


def learn_line(path: Path) -> str:
    """The command that trains ``best.yaml`` at ``path``."""
    return shlex.join(["evtrain", "learn", str(path)])
