"""evtrain's cattrs converter: one for every options class.

Unknown keys are refused, ints accept ``5.0e5`` (PyYAML reads that as a string) and integral
floats, enums and literals accept their values, an options class accepts only a mapping.
:func:`structure` turns structuring errors into :class:`~evtrain.errors.ConfigError` lines
``"path.to.key: what is wrong"`` (:mod:`evtrain.config.problems`).
"""

from __future__ import annotations

import difflib
import enum
import re
from collections.abc import Callable, Sequence
from typing import Any, Literal, TypeVar, get_args, get_origin

import attrs
import cattrs
from cattrs.cols import is_mapping, is_sequence, list_structure_factory, mapping_structure_factory
from cattrs.errors import (
    AttributeValidationNote,
    ClassValidationError,
    ForbiddenExtraKeysError,
    IterableValidationError,
)
from cattrs.gen import make_dict_structure_fn, override
from cattrs.v import format_exception

from evtrain.config.mlagents import kind_of, unsupported
from evtrain.errors import ConfigError
from evtrain.trainers.registry import trainer_type
from evtrain.trainers.settings import TrainerSettings

T = TypeVar("T")

_ATTRS_VALIDATOR = re.compile(r"^'(\w+)' must be (.+?): (.+)$")


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
        expected = ", ".join(repr(member.value) for member in cls)
        raise ValueError(f"expected one of {expected}, got {value!r}") from None


def _is_literal(t: Any) -> bool:
    return get_origin(t) is Literal


def _structure_literal(value: Any, cls: Any) -> Any:
    if value not in get_args(cls):
        expected = ", ".join(repr(choice) for choice in get_args(cls))
        raise ValueError(f"expected one of {expected}, got {value!r}")
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


def drop_inherited(problems: Sequence[str], data: Any) -> list[str]:
    """``problems`` without a behavior's copy of a ``default_settings`` problem: a bad key of
    ``default_settings`` is merged under every behavior, but is reported once, where it is
    written.  A behavior that sets the same key itself keeps its own line."""
    behaviors = data.get("behaviors") if isinstance(data, dict) else None
    if not isinstance(behaviors, dict):
        return list(problems)
    known = set(problems)
    kept = []
    for line in problems:
        name = next((n for n in behaviors if line.startswith(f"behaviors.{n}.")), None)
        if name is not None:
            rest = line[len(f"behaviors.{name}.") :]
            keys = rest.partition(": ")[0].split(".")
            if f"default_settings.{rest}" in known and not _sets(behaviors[name], keys):
                continue
        kept.append(line)
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
    # hyperparameters is typed `object`: unstructure it as what it really is
    lambda settings: {
        a.name: converter.unstructure(getattr(settings, a.name))
        for a in attrs.fields(TrainerSettings)
    },
)


def structure(data: Any, cls: type[T], *, root: str = "") -> T:
    """Build ``cls`` from plain data, raising :class:`ConfigError` with every problem."""
    if not isinstance(data, dict):
        where = f"{root}: " if root else ""
        raise ConfigError([f"{where}expected a mapping of options, got {_kind(data)}"])
    try:
        return converter.structure(data, cls)
    except (ClassValidationError, IterableValidationError) as error:
        raise ConfigError(describe(error, root)) from None


def describe(error: BaseException, path: str = "") -> list[str]:
    """One line per leaf error of a cattrs exception group, each led by the key's full path."""
    if isinstance(error, ForbiddenExtraKeysError):
        return [_extra_key(error.cl, _join(path, key), key) for key in sorted(error.extra_fields)]
    if isinstance(error, (ClassValidationError, IterableValidationError)):
        lines: list[str] = []
        with_notes, without = error.group_exceptions()
        for sub, note in with_notes:
            step = getattr(note, "name", None)
            if step is None:
                step = getattr(note, "index", None)
            lines.extend(describe(sub, _join(path, step)))
        for sub in without:
            lines.extend(describe(sub, path))
        return lines
    if isinstance(error, KeyError) and error.args:
        return [f"{_join(path, error.args[0])}: required key is missing"]
    message = str(error) if isinstance(error, (TypeError, ValueError)) else ""
    field, sep, rest = message.partition(": ")  # a validator's "<key>: what is wrong"
    if sep and field.isidentifier():
        return [f"{_join(path, field)}: {rest}"]
    attrs_validator = _ATTRS_VALIDATOR.match(message)  # attrs' "'name' must be > 0: -1"
    if attrs_validator:
        name, requirement, value = attrs_validator.groups()
        return [f"{_join(path, name)}: must be {requirement}, got {value}"]
    if not message.startswith("expected") or "not iterable" in message:
        message = format_exception(error, None)
        if "not iterable" in str(error) or "mapping" in message:
            message = "expected a mapping of options"
    return [f"{path or '<root>'}: {message}"]


def _extra_key(cls: type[Any], full: str, key: str) -> str:
    if kind_of(cls, key) is not None:  # Unity-only ones never get here: they are dropped
        return unsupported(full, key)
    valid = [a.name for a in attrs.fields(cls)] if attrs.has(cls) else []
    return _unknown_key(full, key, valid)


def _unknown_key(full: str, key: str, valid: Sequence[str]) -> str:
    # 0.8: a typo (learning_rat, run_idd) stays well above it; an unrelated key that only
    # shares a suffix (checkpoint_freq vs checkpoint_interval, 0.65) falls below it.
    close = difflib.get_close_matches(key, valid, n=1, cutoff=0.8)
    if close:
        return f"{full}: unknown key (did you mean {close[0]}?)"
    return f"{full}: unknown key (valid keys: {', '.join(valid)})"


def _join(path: str, step: Any) -> str:
    if step is None:
        return path
    return f"{path}.{step}" if path else str(step)


def _kind(value: Any) -> str:
    return "nothing" if value is None else f"{type(value).__name__} {value!r}"
