"""The search space: the key paths of the ``sweep:`` section, a trial's values for them, and
the config a trial trains with.

A key path names an option as the YAML nests it: ``behaviors.Pendulum.hyperparameters.
learning_rate`` is ``data["behaviors"]["Pendulum"]["hyperparameters"]["learning_rate"]``.
Mappings on the way that the config leaves out are created (a config without
``hyperparameters`` still sweeps one), except a behavior: one the config does not name
would be a new behavior with default settings, almost surely a typo, so it is refused.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from evtrain.config.problems import short_repr
from evtrain.config.sweep import Parameter, SweepSettings
from evtrain.errors import ConfigError

if TYPE_CHECKING:
    import optuna


def path_problem(data: Mapping[str, Any], path: str) -> str | None:
    """What is wrong with ``path`` as a key path into ``data``, or ``None``."""
    keys = path.split(".")
    where = f"sweep.parameters.{path}"
    if "" in keys:
        return f"{where}: expected a key path such as behaviors.<name>.hyperparameters.batch_size"
    if keys[0] == "sweep":
        return f"{where}: a sweep cannot vary its own sweep section"
    if keys[0] == "behaviors":
        behaviors = data.get("behaviors")
        names = sorted(behaviors) if isinstance(behaviors, dict) else []
        if len(keys) < 3 or keys[1] not in names:
            known = ", ".join(names) or "none"
            return (
                f"{where}: expected behaviors.<name>.<option> naming a behavior of the config "
                f"(behaviors: {known})"
            )
    part: Any = data
    for depth, key in enumerate(keys[:-1]):
        part = part.get(key, {}) if isinstance(part, dict) else part
        if not isinstance(part, dict):
            above = ".".join(keys[: depth + 1])
            return f"{where}: {above} is {short_repr(part)} in the config, not a mapping of options"
    return None


def set_path(data: dict[str, Any], path: str, value: Any) -> None:
    """Set the option at ``path`` in ``data`` (in place), creating missing mappings."""
    keys = path.split(".")
    part = data
    for key in keys[:-1]:
        part = part.setdefault(key, {})
    part[keys[-1]] = value


def trial_data(data: Mapping[str, Any], values: Mapping[str, Any]) -> dict[str, Any]:
    """The config a trial trains with: ``data`` without its ``sweep`` section, ``values`` set
    at their key paths (``data`` itself is left as it is)."""
    trial = copy.deepcopy(dict(data))
    trial.pop("sweep", None)
    for path, value in values.items():
        set_path(trial, path, value)
    return trial


def suggest(trial: optuna.Trial, path: str, parameter: Parameter) -> Any:
    """The trial's value of the parameter at ``path`` (Optuna's name for it is the path)."""
    low, high = parameter.low, parameter.high
    if parameter.type == "choice":
        assert parameter.choices is not None  # checked by the settings
        return trial.suggest_categorical(path, parameter.choices)
    assert low is not None and high is not None  # checked by the settings
    if parameter.type == "int":
        step = int(parameter.step or 1)
        return trial.suggest_int(path, int(low), int(high), step=step, log=parameter.log)
    log = parameter.log or parameter.type == "log_uniform"
    return trial.suggest_float(path, low, high, step=None if log else parameter.step, log=log)


def corners(settings: SweepSettings) -> list[dict[str, Any]]:
    """Values of every parameter at its low end, and at its high end (the first and the last
    choice): two configs that :func:`check_space` structures before any trial runs."""
    lows: dict[str, Any] = {}
    highs: dict[str, Any] = {}
    for path, p in settings.parameters.items():
        if p.type == "choice":
            assert p.choices is not None
            lows[path], highs[path] = p.choices[0], p.choices[-1]
        elif p.type == "int":
            lows[path], highs[path] = int(p.low or 0), int(p.high or 0)
        else:
            lows[path], highs[path] = p.low, p.high
    return [lows, highs]


def check_space(data: Mapping[str, Any], settings: SweepSettings) -> None:
    """Refuse a space whose key paths do not lead into the config, or whose ends make a config
    that does not structure (an unknown option, a value out of its range), before any trial.

    :raises ConfigError: naming each key path, what is wrong, and how to fix it.
    """
    from evtrain.run.options import options_from_data

    problems = [p for path in settings.parameters if (p := path_problem(data, path)) is not None]
    if problems:
        raise ConfigError(problems)
    for values in corners(settings):
        try:
            options_from_data(trial_data(data, values))
        except ConfigError as error:
            shown = ", ".join(f"{path}={short_repr(v)}" for path, v in values.items())
            raise ConfigError(
                [
                    f"sweep.parameters: the config with {shown} is not valid; fix the key paths "
                    "or the ranges:",
                    *error.problems,
                ]
            ) from None
