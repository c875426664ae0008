"""ML-Agents options evtrain does not implement: one table, by section.

ML-Agents users bring their configs, so a key of this table is no typo and gets its own
message instead of "unknown key": an option evtrain does not support (yet) stops the run with
``"<path>: ML-Agents option <key> is not supported by evtrain yet; remove it"``; a deprecated
option (``load_model``,
``train_model``, a behavior's ``framework``) is translated before structuring, as ML-Agents
does.  ML-Agents options evtrain
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
    DEPRECATED = "deprecated"
    """Deprecated by ML-Agents itself: translated to its replacement
    (:func:`translate_deprecated`)."""


_NOT_YET = Kind.UNSUPPORTED
_DEPRECATED = Kind.DEPRECATED

ML_AGENTS_OPTIONS: dict[str, tuple[str, dict[str, Kind]]] = {
    # evtrain options class: (the YAML section, {ML-Agents key: kind})
    "CheckpointSettings": (
        "checkpoint_settings",
        {"load_model": _DEPRECATED, "train_model": _DEPRECATED},
    ),
    "TrainerSettings": (
        "behaviors.<name> / default_settings",
        {"framework": _DEPRECATED, "output_path": _DEPRECATED},
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


def translate_deprecated(data: Any) -> Any:
    """``data`` with ML-Agents' deprecated options replaced, as ML-Agents' ``mlagents-learn``
    treats them: a behavior's (or ``default_settings``') ``framework`` is dropped with a
    warning (ML-Agents trains with PyTorch only since it removed TensorFlow); in
    ``checkpoint_settings``, ``load_model: true`` means ``resume: true`` (with a warning),
    ``train_model: true`` changes nothing, training being the default (with a warning), and
    either one ``false`` is ML-Agents' default and is dropped silently (every configuration
    ML-Agents writes holds both).

    :raises ConfigError: ``load_model`` or ``train_model`` is no boolean.
    """
    if not isinstance(data, dict):
        return data
    data = _name_lessons(_drop_framework(upgrade_old_trainer_config(data)))
    if not isinstance(data.get("checkpoint_settings"), dict):
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


_WHY_DROPPED = {
    "framework": "deprecated by ML-Agents, which trains with PyTorch only (as evtrain does)",
    "output_path": "written by older ML-Agents releases; evtrain writes a behavior's files "
    "under checkpoint_settings.results_dir/run_id",
}
"""Deprecated behavior keys that are dropped, and why."""


def _drop_framework(data: dict[str, Any]) -> dict[str, Any]:
    def dropped(part: Any, where: str) -> Any:
        if not isinstance(part, dict) or not part.keys() & _WHY_DROPPED.keys():
            return part
        for key in sorted(part.keys() & _WHY_DROPPED.keys()):
            logger.warning("%s.%s: %s: ignored", where, key, _WHY_DROPPED[key])
        return {k: v for k, v in part.items() if k not in _WHY_DROPPED}

    data = dict(data)
    if "default_settings" in data:
        data["default_settings"] = dropped(data["default_settings"], "default_settings")
    if isinstance(data.get("behaviors"), dict):
        data["behaviors"] = {
            name: dropped(part, f"behaviors.{name}") for name, part in data["behaviors"].items()
        }
    return data


def warn_without_effect(behaviors: dict[str, Any]) -> None:
    """Warn once per behavior about ML-Agents options that are accepted, set to other than
    their default, and do nothing in evtrain."""
    from evtrain.trainers.settings import SACSettings

    for name, settings in behaviors.items():
        network = settings.network_settings
        where = f"behaviors.{name}"
        if network.deterministic:
            logger.warning(
                "%s.network_settings.deterministic: true has no effect in evtrain: training "
                "samples actions; the exported ONNX policy and --inference always take the "
                "most likely action",
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
        providers = settings.reward_signals
        if (
            isinstance(hp, SACSettings)
            and not providers.intrinsic
            and hp.reward_signal_steps_per_update != hp.steps_per_update
        ):
            logger.warning(
                "%s.hyperparameters.reward_signal_steps_per_update: %s has no effect without "
                "an intrinsic reward provider (curiosity, rnd, gail): the extrinsic reward "
                "provider has no model to update",
                where,
                hp.reward_signal_steps_per_update,
            )
        _warn_provider_networks(where, providers)
        if isinstance(hp, SACSettings):
            _warn_sac_gammas(where, providers)


_PROVIDER_MODEL_SHAPE = ("hidden_units", "num_layers")
"""The keys of a reward provider's ``network_settings`` that shape its model."""


def _warn_provider_networks(where: str, providers: Any) -> None:
    """A reward provider's ``network_settings`` keys that shape nothing: all of ``extrinsic``'s
    (it has no model), and every key but ``hidden_units`` and ``num_layers`` of the others
    (their models see the policy's observations, normalised as the policy's are)."""
    import attrs

    from evtrain.trainers.settings import DEFAULT_ENCODING_SIZE

    extrinsic = providers.extrinsic.network_settings
    if extrinsic is not None:
        logger.warning(
            "%s.reward_signals.extrinsic.network_settings: has no effect: the extrinsic "
            "reward provider has no model",
            where,
        )
    for name, provider in providers.intrinsic.items():
        network = provider.network_settings
        if network is None:
            continue
        path = f"{where}.reward_signals.{name}"
        defaults = type(network)()
        for field in attrs.fields(type(network)):
            value = getattr(network, field.name)
            if field.name not in _PROVIDER_MODEL_SHAPE and value != getattr(defaults, field.name):
                logger.warning(
                    "%s.network_settings.%s: %s has no effect on the %s model: only "
                    "hidden_units and num_layers shape it",
                    path,
                    field.name,
                    value,
                    name,
                )
        if provider.encoding_size != DEFAULT_ENCODING_SIZE:
            logger.warning(
                "%s.encoding_size: %s is ignored: network_settings shapes the %s model "
                "(ML-Agents' rule)",
                path,
                provider.encoding_size,
                name,
            )


def _warn_sac_gammas(where: str, providers: Any) -> None:
    """SAC learns one critic on the sum of the providers' rewards, discounted with the
    extrinsic ``gamma``: another ``gamma`` of an intrinsic reward provider is not applied."""
    gamma = providers.extrinsic.gamma
    for name, provider in providers.intrinsic.items():
        if provider.gamma != gamma:
            logger.warning(
                "%s.reward_signals.%s.gamma: %s has no effect with trainer_type sac: SAC "
                "discounts the sum of the providers' rewards with the extrinsic gamma (%s)",
                where,
                name,
                provider.gamma,
                gamma,
            )


def _name_lessons(data: dict[str, Any]) -> dict[str, Any]:
    """Curriculum lessons written ``- Lesson0: {value: ..., completion_criteria: ...}`` (the
    lesson's name as its only key, as in samples of several ML-Agents releases) turned into
    ML-Agents' current ``- name: Lesson0`` form, with a note each."""
    parameters = data.get("environment_parameters")
    if not isinstance(parameters, dict):
        return data
    renamed: dict[str, Any] = {}
    for parameter, item in parameters.items():
        lessons = item.get("curriculum") if isinstance(item, dict) else None
        if isinstance(lessons, list):
            item = {**item, "curriculum": [_named(parameter, i, x) for i, x in enumerate(lessons)]}
        renamed[parameter] = item
    return {**data, "environment_parameters": renamed}


def _named(parameter: Any, index: int, lesson: Any) -> Any:
    if not (isinstance(lesson, dict) and len(lesson) == 1):
        return lesson
    ((name, body),) = lesson.items()
    if not isinstance(body, dict) or "name" in body or name in ("name", "value"):
        return lesson
    logger.info(
        "environment_parameters.%s.curriculum.%d: lesson written as '%s: {...}' read as "
        "'name: %s' (ML-Agents' current form)",
        parameter,
        index,
        name,
        name,
    )
    return {"name": name, **body}


_RUN_SECTIONS = (
    *("behaviors", "default_settings", "env_settings", "checkpoint_settings", "torch_settings"),
    *("bus", "plugins", "environment_parameters", "writers", "debug", "engine_settings"),
    "sweep",
)
"""The top-level keys that are no behavior in an old trainer config: RunOptions' fields (not
imported: :mod:`evtrain.config.options` imports this module)."""
_OLD_NETWORK_KEYS = ("hidden_units", "num_layers", "normalize", "vis_encode_type")
_OLD_MEMORY_KEYS = ("sequence_length", "memory_size")


def upgrade_old_trainer_config(data: dict[str, Any]) -> dict[str, Any]:
    """A trainer config of ML-Agents 0.16 and before (behavior names at the top, ``default``
    merged under each, ``trainer: ppo``, hyperparameters and network keys side by side,
    ``use_recurrent``) in today's shape, as ML-Agents' ``mlagents-upgrade-config`` converts it:
    each key goes where a key of that name exists (the hyperparameters of the trainer type,
    ``network_settings``, its ``memory`` when ``use_recurrent``, the behavior), and what has
    no place is dropped; one note says what was converted and what was dropped.  ``data``
    itself when it is no such file."""
    if "behaviors" in data or not any(
        isinstance(part, dict) and "trainer" in part for part in data.values()
    ):
        return data
    import attrs

    from evtrain.trainers.registry import trainer_type
    from evtrain.trainers.settings import TrainerSettings

    default = data["default"] if isinstance(data.get("default"), dict) else {}
    sections = set(_RUN_SECTIONS)
    behaviors: dict[str, Any] = {}
    dropped: list[str] = []
    for name, part in data.items():
        if name == "default" or name in sections or not isinstance(part, dict):
            continue
        old = {**default, **part}
        kind = old.get("trainer", "ppo")
        try:
            hyperparameters = attrs.fields_dict(trainer_type(str(kind)).settings)
        except ValueError:  # an unknown type (offline_bc): structuring names it, as usual
            hyperparameters = {}
        behavior: dict[str, Any] = {"trainer_type": kind}
        behavior["hyperparameters"] = {k: v for k, v in old.items() if k in hyperparameters}
        network = {k: old[k] for k in _OLD_NETWORK_KEYS if k in old}
        if old.get("use_recurrent"):
            network["memory"] = {k: old[k] for k in _OLD_MEMORY_KEYS if k in old}
        behavior["network_settings"] = network
        behavior.update(
            (k, v)
            for k, v in old.items()
            if k in attrs.fields_dict(TrainerSettings) and k not in behavior
        )
        used = {*behavior, *behavior["hyperparameters"], *network, "trainer", "use_recurrent"}
        used |= set(_OLD_MEMORY_KEYS)
        dropped += [f"{name}.{k}" for k in old if k not in used]
        behaviors[str(name)] = behavior
    logger.warning(
        "ML-Agents 0.16 trainer config (behaviors %s at the top level%s) converted to today's "
        "shape as mlagents-upgrade-config does%s",
        ", ".join(behaviors),
        ", default merged into each" if default else "",
        f"; dropped, having no place: {', '.join(dropped)}" if dropped else "",
    )
    kept = {k: v for k, v in data.items() if k in sections}
    return {**kept, "behaviors": behaviors}
