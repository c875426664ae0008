"""ML-Agents options evtrain does not implement: one table, by section.

ML-Agents users bring their configs, so a key of this table is no typo and gets its own
message instead of "unknown key": an option evtrain does not support (yet) stops the run with
``"<path>: ML-Agents option <key> is not supported by evtrain yet; remove it"``; a Unity-only
option (evtrain trains Gymnasium environments, not Unity players) is dropped before structuring
with one warning each, and the run proceeds; a deprecated option (``load_model``,
``train_model``) is translated before structuring, as ML-Agents does.  ML-Agents options evtrain
accepts without effect are warned about after structuring (:func:`warn_without_effect`).
"""

from __future__ import annotations

import enum
import logging
from typing import Any

logger = logging.getLogger("evtrain")


class Kind(enum.Enum):
    """What evtrain does with an ML-Agents option it does not implement."""

    UNSUPPORTED = "unsupported"
    """An error: evtrain cannot train as the option asks."""
    UNITY_ONLY = "unity-only"
    """Ignored with a warning: it configures the Unity player, which evtrain does not run."""
    DEPRECATED = "deprecated"
    """Deprecated by ML-Agents itself: translated to its replacement
    (:func:`translate_deprecated`)."""


_NOT_YET = Kind.UNSUPPORTED
_UNITY = Kind.UNITY_ONLY
_DEPRECATED = Kind.DEPRECATED

ML_AGENTS_OPTIONS: dict[str, tuple[str, dict[str, Kind]]] = {
    # evtrain options class: (the YAML section, {ML-Agents key: kind})
    "RunOptions": ("", {"engine_settings": _UNITY}),
    "EnvironmentSettings": (
        "env_settings",
        {
            key: _UNITY
            for key in (
                "env_path",
                "env_args",
                "base_port",
                "num_areas",
                "timeout_wait",
                "max_lifetime_restarts",
                "restarts_rate_limit_n",
                "restarts_rate_limit_period_s",
            )
        },
    ),
    "CheckpointSettings": (
        "checkpoint_settings",
        {"load_model": _DEPRECATED, "train_model": _DEPRECATED},
    ),
    "TrainerSettings": (
        "behaviors.<name> / default_settings",
        {"self_play": _UNITY, "behavioral_cloning": _NOT_YET},
    ),
    "NetworkSettings": (
        "behaviors.<name>.network_settings",
        {"memory": _NOT_YET, "vis_encode_type": _NOT_YET},
    ),
    "RewardSignals": (
        "behaviors.<name>.reward_signals",
        {"gail": _NOT_YET},
    ),
    "RewardSignalSettings": (
        "behaviors.<name>.reward_signals.extrinsic",
        {"network_settings": _NOT_YET},
    ),
}
"""Every ML-Agents option evtrain knows and does not implement (or translates), by the options
class (and YAML section) ML-Agents reads it in.  A plugin's settings class that subclasses one
of these inherits its row."""


def kind_of(cls: type[Any], key: str) -> Kind | None:
    """How ``key`` of options class ``cls`` (or of a class it derives from) is treated, or
    ``None`` when it is no ML-Agents option of this table."""
    for base in cls.__mro__:
        row = ML_AGENTS_OPTIONS.get(base.__name__)
        if row is not None and key in row[1]:
            return row[1][key]
    return None


def unsupported(key: str) -> str:
    """What is wrong with ML-Agents option ``key``, which evtrain does not implement."""
    return f"ML-Agents option {key} is not supported by evtrain yet; remove it"


_WHY_UNITY_ONLY = {"self_play": "it needs Unity's multi-agent team environments"}
"""Why an option is Unity-only, where its section does not say it (a Unity player's settings)."""


def drop_unity_only(data: Any) -> Any:
    """``data`` without its Unity-only options, each logged once as ignored (an option of
    ``default_settings`` once there, not again for each behavior that would inherit it)."""
    if not isinstance(data, dict):
        return data
    data = _drop(data, "", ML_AGENTS_OPTIONS["RunOptions"][1])
    for section in ("env_settings", "default_settings"):
        cls_name = "EnvironmentSettings" if section == "env_settings" else "TrainerSettings"
        if isinstance(data.get(section), dict):
            data[section] = _drop(data[section], section, ML_AGENTS_OPTIONS[cls_name][1])
    behaviors = data.get("behaviors")
    if isinstance(behaviors, dict):
        keys = ML_AGENTS_OPTIONS["TrainerSettings"][1]
        data["behaviors"] = {
            name: _drop(part, f"behaviors.{name}", keys) if isinstance(part, dict) else part
            for name, part in behaviors.items()
        }
    return data


def _drop(part: dict[str, Any], section: str, keys: dict[str, Kind]) -> dict[str, Any]:
    kept = {k: v for k, v in part.items() if keys.get(k) is not Kind.UNITY_ONLY}
    for key in sorted(set(part) - set(kept)):
        path = f"{section}.{key}" if section else key
        why = _WHY_UNITY_ONLY.get(key)
        logger.warning(
            "%s: Unity-only ML-Agents option%s: ignored", path, f" ({why})" if why else ""
        )
    return kept


def translate_deprecated(data: Any) -> Any:
    """``data`` with ML-Agents' deprecated ``checkpoint_settings`` options replaced, as
    ML-Agents' ``mlagents-learn`` treats them: ``load_model: true`` means ``resume: true``
    (with a warning); ``train_model: true`` changes nothing, training being the default (with
    a warning); either one ``false`` is ML-Agents' default and is dropped silently (every
    configuration ML-Agents writes holds both).

    :raises ConfigError: one of them is no boolean.
    """
    if not isinstance(data, dict) or not isinstance(data.get("checkpoint_settings"), dict):
        return data
    from evtrain.errors import ConfigError

    section = dict(data["checkpoint_settings"])
    for key in ("load_model", "train_model"):
        if key in section and not isinstance(section[key], bool):
            raise ConfigError(
                [f"checkpoint_settings.{key}: expected true or false, got {section[key]!r}"]
            )
    if section.pop("load_model", False):
        logger.warning(
            "checkpoint_settings.load_model: deprecated by ML-Agents; resuming the run "
            "(use resume: true)"
        )
        section["resume"] = True
    if section.pop("train_model", False):
        logger.warning(
            "checkpoint_settings.train_model: deprecated by ML-Agents; training is the "
            "default (inference: true runs the policy without training)"
        )
    return {**data, "checkpoint_settings": section}


def warn_without_effect(behaviors: dict[str, Any]) -> None:
    """Warn once per behavior about ML-Agents options that are accepted, set to other than
    their default, and do nothing in evtrain."""
    from evtrain.trainers.settings import SACSettings

    for name, settings in behaviors.items():
        network = settings.network_settings
        where = f"behaviors.{name}"
        if network.deterministic:
            logger.warning(
                "%s.network_settings.deterministic: true has no effect in evtrain: the "
                "exported ONNX policy always takes the most likely action; training and "
                "--inference sample actions",
                where,
            )
        if network.goal_conditioning_type != "hyper":
            logger.warning(
                "%s.network_settings.goal_conditioning_type: %s has no effect in evtrain: "
                "Gymnasium environments have no goal observations",
                where,
                network.goal_conditioning_type,
            )
        hp = settings.hyperparameters
        if isinstance(hp, SACSettings) and hp.reward_signal_steps_per_update != hp.steps_per_update:
            logger.warning(
                "%s.hyperparameters.reward_signal_steps_per_update: %s has no effect in "
                "evtrain: its SAC has the extrinsic reward signal only, which has no model "
                "to update",
                where,
                hp.reward_signal_steps_per_update,
            )
