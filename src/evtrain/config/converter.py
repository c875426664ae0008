"""evtrain's cattrs converter: one for every options class.

Unknown keys are refused, ints accept ``5.0e5`` (PyYAML reads that as a string) and integral
floats, enums and literals accept their values, an options class accepts only a mapping.
:func:`structure` turns structuring errors into :class:`~evtrain.errors.ConfigError` lines
``"path.to.key: what is wrong"`` (:mod:`evtrain.config.problems`).
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from typing import Any, Literal, TypeVar, get_args, get_origin

import attrs
import cattrs
from cattrs.cols import is_mapping, is_sequence, list_structure_factory, mapping_structure_factory
from cattrs.errors import (
    AttributeValidationNote,
    BaseValidationError,
    ClassValidationError,
    IterableValidationError,
    IterableValidationNote,
)
from cattrs.gen import make_dict_structure_fn, override

from evtrain.config.environment_parameters import (
    SAMPLERS,
    Constant,
    EnvironmentParameter,
    Lesson,
    Sampler,
    SamplerSpec,
    sampler_data,
)
from evtrain.config.problems import Problem, choices, problems
from evtrain.errors import ConfigError
from evtrain.trainers.registry import trainer_type
from evtrain.trainers.settings import (
    InfoStat,
    NetworkSettings,
    RewardProviders,
    RewardProviderSettings,
    SelfPlaySettings,
    TrainerSettings,
    absent_when_none,
)

T = TypeVar("T")


def _structure_int(value: Any, _: type) -> int:
    if isinstance(value, bool):
        raise TypeError(f"expected an integer, got {value!r}")
    if isinstance(value, int):
        return value
    try:
        number = float(value) if isinstance(value, (str, float)) else None
    except ValueError:
        number = None
    if number is None or not number.is_integer():
        raise ValueError(f"expected an integer, got {value!r}")
    return int(number)


def _structure_float(value: Any, _: type) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise TypeError(f"expected a number, got {value!r}")
    try:
        return float(value)
    except ValueError:
        raise ValueError(f"expected a number, got {value!r}") from None


def _structure_bool(value: Any, _: type) -> bool:
    if not isinstance(value, bool):
        raise TypeError(f"expected true or false, got {value!r}")
    return value


def _structure_str(value: Any, _: type) -> str:
    if not isinstance(value, (str, int, float)) or isinstance(value, bool):
        raise TypeError(f"expected a string, got {value!r}")
    return str(value)


def _structure_enum(value: Any, cls: type[enum.Enum]) -> enum.Enum:
    try:
        return cls(value)
    except ValueError:
        expected = choices(member.value for member in cls)
        raise ValueError(f"expected one of {expected}, got {value!r}") from None


def _is_literal(t: Any) -> bool:
    return get_origin(t) is Literal


def _structure_literal(value: Any, cls: Any) -> Any:
    if value not in get_args(cls):
        raise ValueError(f"expected one of {choices(get_args(cls))}, got {value!r}")
    return value


def _strict_list(cl: Any, converter: cattrs.Converter) -> Any:
    inner = list_structure_factory(cl, converter)

    def structure_list(value: Any, _: type) -> Any:
        if not isinstance(value, (list, tuple)):
            raise TypeError(f"expected a list, got {value!r}")
        return inner(value, cl)

    return structure_list


def _strict_mapping(cl: Any, converter: cattrs.Converter) -> Any:
    inner = mapping_structure_factory(cl, converter)

    def structure_mapping(value: Any, _: type) -> Any:
        if not isinstance(value, dict):
            raise TypeError(f"expected a mapping, got {value!r}")
        return inner(value, cl)

    return structure_mapping


def _strict_options(cl: Any, converter: cattrs.Converter) -> Any:
    inner = converter.gen_structure_attrs_fromdict(cl)

    def structure_options(value: Any, _: type) -> Any:
        if not isinstance(value, dict):
            raise TypeError("expected a mapping of options")
        return inner(value, cl)

    return structure_options


def make_converter() -> cattrs.Converter:
    """A fresh converter with evtrain's strict hooks (plugins may register more on it)."""
    converter = cattrs.Converter(forbid_extra_keys=True)
    converter.register_structure_hook(int, _structure_int)
    converter.register_structure_hook(float, _structure_float)
    converter.register_structure_hook(bool, _structure_bool)
    converter.register_structure_hook(str, _structure_str)
    converter.register_structure_hook_func(
        lambda t: isinstance(t, type) and issubclass(t, enum.Enum), _structure_enum
    )
    converter.register_structure_hook_factory(is_sequence, _strict_list)
    converter.register_structure_hook_factory(is_mapping, _strict_mapping)
    converter.register_structure_hook_func(_is_literal, _structure_literal)
    converter.register_structure_hook_factory(attrs.has, _strict_options)
    converter.register_unstructure_hook_func(
        lambda t: isinstance(t, type) and issubclass(t, enum.Enum), lambda e: e.value
    )
    return converter


converter = make_converter()
"""The converter used for :class:`~evtrain.config.options.RunOptions`."""


def _structure_trainer_settings(value: Any, cls: type[TrainerSettings]) -> TrainerSettings:
    """``hyperparameters`` is structured as the class registered for ``trainer_type``."""
    if not isinstance(value, dict):
        raise TypeError(f"expected a mapping, got {value!r}")
    kind = value.get("trainer_type", "ppo")
    if not isinstance(kind, str):
        raise _invalid_trainer_type(TypeError(f"expected a string, got {kind!r}"))
    try:
        settings = trainer_type(kind).settings
    except ValueError as error:
        raise _invalid_trainer_type(error) from None
    # without hyperparameters, the trainer type's defaults (TrainerSettings' own default
    # knows only ppo and sac)
    return _trainer_settings_hook(settings)({"hyperparameters": {}, **value}, cls)


def _invalid_trainer_type(error: Exception) -> ClassValidationError:
    note = AttributeValidationNote("Structuring trainer_type", "trainer_type", str)
    error.__notes__ = [*getattr(error, "__notes__", []), note]  # type: ignore[attr-defined]
    return ClassValidationError("While structuring TrainerSettings", [error], TrainerSettings)


def _trainer_settings_hook(settings: type[Any]) -> Callable[[Any, Any], TrainerSettings]:
    """cattrs' structuring of :class:`TrainerSettings` with ``hyperparameters`` as
    ``settings`` (generated once per settings class)."""
    hook = _TRAINER_SETTINGS_HOOKS.get(settings)
    if hook is None:

        def structure_hyperparameters(value: Any, _: Any) -> Any:
            return converter.structure(value, settings)

        hyperparameters = override(struct_hook=structure_hyperparameters)
        hook = make_dict_structure_fn(TrainerSettings, converter, hyperparameters=hyperparameters)
        _TRAINER_SETTINGS_HOOKS[settings] = hook
    return hook


_TRAINER_SETTINGS_HOOKS: dict[type[Any], Callable[[Any, Any], TrainerSettings]] = {}


attrs.resolve_types(TrainerSettings)
converter.register_structure_hook(TrainerSettings, _structure_trainer_settings)
converter.register_unstructure_hook(
    TrainerSettings,
    # hyperparameters is typed `object`: unstructure it as what it really is;
    # behavioral_cloning, when not configured, is no key (not "behavioral_cloning: null")
    lambda settings: _present_fields(settings, attrs.fields(TrainerSettings)),
)
converter.register_unstructure_hook(
    RewardProviders,
    # an intrinsic reward provider that is not configured is no key (not "curiosity: null")
    lambda signals: _present_fields(signals, attrs.fields(RewardProviders)),
)
converter.register_unstructure_hook(
    NetworkSettings,
    # feed-forward networks have no memory key (not "memory: null")
    lambda network: _present_fields(network, attrs.fields(NetworkSettings)),
)
converter.register_unstructure_hook(
    SelfPlaySettings,
    # self-play without a league has no league key (not "league: null")
    lambda self_play: _present_fields(self_play, attrs.fields(SelfPlaySettings)),
)
converter.register_unstructure_hook_func(
    # a provider's network_settings, when not configured, is no key
    lambda t: isinstance(t, type) and issubclass(t, RewardProviderSettings),
    lambda signal: _present_fields(signal, attrs.fields(type(signal))),
)


def _present_fields(instance: Any, fields: tuple[attrs.Attribute[Any], ...]) -> dict[str, Any]:
    """``instance`` unstructured field by field, without the optional ones left unset."""
    return {
        a.name: converter.unstructure(getattr(instance, a.name))
        for a in fields
        if absent_when_none(a, getattr(instance, a.name))
    }


def _structure_info_stat(value: Any, _: Any) -> InfoStat:
    """An ``info_stats`` entry: an aggregation's name, or the full mapping."""
    if isinstance(value, str):
        value = {"aggregation": value}
    elif not isinstance(value, dict):
        raise TypeError(
            "expected an aggregation (average, most_recent, sum, histogram) or a mapping "
            f"{{aggregation, stat, at}}, got {value!r}"
        )
    stat: InfoStat = _INFO_STAT(value, InfoStat)
    return stat


_INFO_STAT = _strict_options(InfoStat, converter)
converter.register_structure_hook(InfoStat, _structure_info_stat)


def _structure_sampler(value: Any, _: Any) -> Sampler:
    """A number (a constant), or ``{sampler_type, sampler_parameters}`` structured as the
    class of ``sampler_type``."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return Constant(value=float(value))
    if not isinstance(value, dict):
        raise TypeError(
            "expected a number or a sampler ({sampler_type: uniform, sampler_parameters: "
            f"{{min_value: 0, max_value: 1}}}}), got {value!r}"
        )
    spec = converter.structure(value, SamplerSpec)
    try:
        return converter.structure(spec.sampler_parameters, SAMPLERS[spec.sampler_type])
    except (BaseValidationError, TypeError, ValueError) as error:
        note = AttributeValidationNote(
            "Structuring sampler_parameters", "sampler_parameters", dict[str, Any]
        )
        raise ClassValidationError(
            "While structuring a sampler", [_noted(error, note)], SamplerSpec
        ) from None


def _noted(error: Exception, note: str) -> Exception:
    """``error`` with cattrs' note of where it happened (notes are strings: 3.11's
    ``add_note``, written so that 3.10 runs it)."""
    error.__notes__ = [*getattr(error, "__notes__", []), note]  # type: ignore[attr-defined]
    return error


def _structure_environment_parameters(value: Any, _: Any) -> dict[str, EnvironmentParameter]:
    """``environment_parameters``: each a curriculum, or a constant or sampler, which becomes
    one lesson named after the parameter (as in ML-Agents)."""
    if not isinstance(value, dict):
        raise TypeError(f"expected a mapping, got {value!r}")
    structured: dict[str, EnvironmentParameter] = {}
    errors: list[Exception] = []
    for key, item in value.items():
        name = str(key)
        try:
            if isinstance(item, dict) and "curriculum" in item:
                structured[name] = converter.structure(item, EnvironmentParameter)
            else:
                sampler = converter.structure(item, Sampler)
                structured[name] = EnvironmentParameter(
                    curriculum=[Lesson(name=name, value=sampler)]
                )
        except Exception as error:
            note = IterableValidationNote(
                f"Structuring mapping value @ key {key!r}", key, EnvironmentParameter
            )
            errors.append(_noted(error, note))
    if errors:
        raise IterableValidationError("While structuring environment_parameters", errors, dict)
    return structured


# Only the base class: a concrete sampler class is structured from its sampler_parameters.
converter.register_structure_hook_func(lambda t: t is Sampler, _structure_sampler)
converter.register_unstructure_hook_func(
    lambda t: isinstance(t, type) and issubclass(t, Sampler), sampler_data
)
converter.register_structure_hook_func(
    lambda t: t == dict[str, EnvironmentParameter], _structure_environment_parameters
)


def structure(
    data: Any,
    cls: type[T],
    *,
    root: str = "",
    keep: Callable[[list[Problem]], list[Problem]] | None = None,
) -> T:
    """Build ``cls`` from plain data.

    :param root: the key of ``data`` in the options, which leads every path.
    :param keep: which of the problems found to report (all of them by default).
    :raises ConfigError: with every problem (that ``keep`` keeps).
    """
    if not isinstance(data, dict):
        where = f"{root}: " if root else ""
        raise ConfigError([f"{where}expected a mapping of options, got {_kind(data)}"])
    try:
        return converter.structure(data, cls)
    except BaseValidationError as error:
        found = problems(error, tuple(root.split(".")) if root else ())
        raise ConfigError([str(p) for p in (keep(found) if keep else found)]) from None


def _kind(value: Any) -> str:
    return "nothing" if value is None else f"{type(value).__name__} {value!r}"
