"""ML-Agents options evtrain does not implement: one table, by section.

ML-Agents users bring their configs, so a key of this table is no typo and gets its own
message instead of "unknown key": an option evtrain does not support (yet) stops the run with
``"<path>: ML-Agents option <key> is not supported by evtrain yet; remove it"``; a Unity-only
option (evtrain trains Gymnasium environments, not Unity players) is dropped before structuring
with one warning each, and the run proceeds.
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


_NOT_YET = Kind.UNSUPPORTED
_UNITY = Kind.UNITY_ONLY

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
        {"load_model": _NOT_YET, "train_model": _NOT_YET},
    ),
    "TrainerSettings": (
        "behaviors.<name> / default_settings",
        {
            "init_path": _NOT_YET,
            "threaded": _NOT_YET,
            "self_play": _NOT_YET,
            "behavioral_cloning": _NOT_YET,
            "even_checkpoints": _NOT_YET,
        },
    ),
    "NetworkSettings": (
        "behaviors.<name>.network_settings",
        {
            "memory": _NOT_YET,
            "vis_encode_type": _NOT_YET,
            "goal_conditioning_type": _NOT_YET,
            "deterministic": _NOT_YET,
        },
    ),
    "RewardSignals": (
        "behaviors.<name>.reward_signals",
        {"gail": _NOT_YET},
    ),
    "RewardSignalSettings": (
        "behaviors.<name>.reward_signals.extrinsic",
        {"network_settings": _NOT_YET},
    ),
    "PPOSettings": ("behaviors.<name>.hyperparameters (ppo)", {"shared_critic": _NOT_YET}),
    "SACSettings": (
        "behaviors.<name>.hyperparameters (sac)",
        {"reward_signal_steps_per_update": _NOT_YET},
    ),
}
"""Every ML-Agents option evtrain knows and does not implement, by the options class (and YAML
section) ML-Agents reads it in.  A plugin's settings class that subclasses one of these
inherits its row."""


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


def drop_unity_only(data: Any) -> Any:
    """``data`` without its Unity-only options, each logged once as ignored."""
    if not isinstance(data, dict):
        return data
    data = dict(data)
    for cls_name in ("RunOptions", "EnvironmentSettings"):
        section, keys = ML_AGENTS_OPTIONS[cls_name]
        part = data if not section else data.get(section)
        if not isinstance(part, dict):
            continue
        kept = {k: v for k, v in part.items() if keys.get(k) is not Kind.UNITY_ONLY}
        for key in sorted(set(part) - set(kept)):
            path = f"{section}.{key}" if section else key
            logger.warning("%s: Unity-only ML-Agents option: ignored", path)
        if section:
            data[section] = kept
        else:
            data = kept
    return data
