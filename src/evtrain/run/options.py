"""A run's options from what a user hands over: a YAML path, plain data, or options.

This is where trainer plugins load, before structuring, so that ``trainer_type: my_algo`` and
its hyperparameters validate against them; :meth:`RunOptions.from_dict` itself loads nothing.
"""

from __future__ import annotations

import io
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from evtrain.config.converter import structure
from evtrain.config.options import PluginSettings, RunOptions
from evtrain.config.problems import shorten
from evtrain.config.shared_env import shared_env_problems
from evtrain.errors import ConfigError
from evtrain.run.wiring import trainer_types_for
from evtrain.trainers.registry import TrainerType, chosen_trainer_types, use_trainer_types

MAX_CONFIG_BYTES = 1 << 20
"""A config file's size limit (1 MiB): configs are a few KB, and a runaway file (a 50 MB list)
would take minutes to parse and echo megabytes back in its error."""
MAX_CONFIG_VALUES = 100_000
"""Most values (mappings, lists and scalars) a config may hold once its aliases are expanded:
configs hold a few hundred, and a few-KB alias bomb (``&a [*b, *b, ...]`` nested ten deep)
would hold billions, and exhaust memory wherever it is copied or written out."""
MAX_INTEGER_DIGITS = 20
"""Most digits an integer in a config may be written with: every whole-number option is bounded
well below 10**20 (docs/configuration.md, "Limits on sizes"), and Python refuses to read one
of more than 4,300 digits at all (a traceback, before an option could name its key)."""


class _BoundedLoader(yaml.SafeLoader):
    """PyYAML's safe loader that refuses a document of more than :data:`MAX_CONFIG_VALUES`
    values once aliases are expanded, or with an alias inside its own anchor, counted on the
    composed node graph (where an alias is a shared node) before anything is constructed."""

    def compose_document(self) -> Node | None:
        node: Node | None = super().compose_document()
        if node is not None:
            _expanded_size(node, {}, set())
            _long_integer(node, "")
        return node


_CSafeLoader: type[yaml.CSafeLoader] | None = getattr(yaml, "CSafeLoader", None)
"""libyaml's safe loader, where PyYAML was built with it: the same data, many times faster."""


if _CSafeLoader is not None:

    class _FastBoundedLoader(_CSafeLoader):  # type: ignore[valid-type,misc]
        """:class:`_BoundedLoader`'s bounds on libyaml's loader (used first: a valid 1 MiB
        config loads in a fraction of a second, where PyYAML's own parser takes seconds)."""

        def get_single_node(self) -> Node | None:
            node: Node | None = super().get_single_node()
            if node is not None:
                _expanded_size(node, {}, set())
                _long_integer(node, "")
            return node


class _Unbounded(Exception):
    """What :func:`_expanded_size` found: the problem line, less the file's name."""


def _expanded_size(node: Node, sizes: dict[int, int], open_: set[int]) -> int:
    """Values under ``node`` (itself included) with every alias expanded; memoised by node, so
    a shared node is counted in one step however often it is used.

    :raises _Unbounded: more than :data:`MAX_CONFIG_VALUES`, or a node inside itself.
    """
    key = id(node)
    if key in sizes:
        return sizes[key]
    if key in open_:
        line = node.start_mark.line + 1
        raise _Unbounded(
            f"line {line}: an alias refers to the anchored value it is inside of (a value that "
            "contains itself), which no option can hold"
        )
    open_.add(key)
    total = 1
    if isinstance(node, SequenceNode):
        children: list[Node] = list(node.value)
    elif isinstance(node, MappingNode):
        children = [item for pair in node.value for item in pair]
    else:
        children = []
    for child in children:
        total += _expanded_size(child, sizes, open_)
        if total > MAX_CONFIG_VALUES:
            raise _Unbounded(
                f"holds more than {MAX_CONFIG_VALUES:,} values once its aliases (*name) are "
                "expanded, where a config holds a few hundred; list each value once, or use "
                "fewer aliases of large anchored values"
            )
    open_.discard(key)
    sizes[key] = total
    return total


def _long_integer(node: Node, key: str) -> None:
    """Refuses an integer under ``node`` (``key``: its path of keys) written with more than
    :data:`MAX_INTEGER_DIGITS` digits; run after :func:`_expanded_size`, which bounds the walk.

    :raises _Unbounded: naming the first such integer's line and key.
    """
    if isinstance(node, ScalarNode):
        digits = sum(character.isdigit() for character in node.value)
        if node.tag == "tag:yaml.org,2002:int" and digits > MAX_INTEGER_DIGITS:
            raise _Unbounded(
                f"line {node.start_mark.line + 1}: {key or 'the document'}: an integer of "
                f"{digits:,} digits, where no option takes one of more than "
                f"{MAX_INTEGER_DIGITS} (see the limits in docs/configuration.md); got "
                f"{shorten(node.value, 40)}"
            )
    elif isinstance(node, SequenceNode):
        for index, item in enumerate(node.value):
            _long_integer(item, f"{key}[{index}]")
    elif isinstance(node, MappingNode):
        for name, value in node.value:
            label = name.value if isinstance(name, ScalarNode) else "?"
            _long_integer(value, f"{key}.{label}" if key else label)


def read_config(path: str | Path) -> dict[str, Any]:
    """The plain data of a YAML config file, bounded: at most :data:`MAX_CONFIG_BYTES` bytes
    and :data:`MAX_CONFIG_VALUES` values with aliases expanded.

    :raises ConfigError: the file is missing, unreadable or too big, is not YAML (a tab in
        the indentation gets a hint), expands too far, or is not a mapping.
    """
    path = Path(path)
    try:
        with path.open("rb") as stream:
            raw = stream.read(MAX_CONFIG_BYTES + 1)
        if len(raw) > MAX_CONFIG_BYTES:
            raise ConfigError(
                [
                    f"{path}: the file is bigger than {MAX_CONFIG_BYTES:,} bytes, the most a "
                    "config file may be; is it the right file?"
                ]
            )
        data = _load(raw.decode("utf-8"), str(path))
    except FileNotFoundError:
        raise ConfigError([f"{path}: no such config file"]) from None
    except _Unbounded as error:
        raise ConfigError([f"{path}: {error}"]) from None
    except RecursionError:
        raise ConfigError([f"{path}: nested too deep to be a config"]) from None
    except yaml.YAMLError as error:
        raise ConfigError([f"{path}: not valid YAML: {error}{_tab_hint(error)}"]) from None
    except (OSError, UnicodeDecodeError) as error:
        raise ConfigError([f"{path}: cannot read the config file: {error}"]) from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError([f"{path}: expected a mapping of options, got {type(data).__name__}"])
    return data


def _load(text: str, name: str) -> Any:
    """``text``'s data, through libyaml where it is built in; an error is found again with
    PyYAML's own parser, whose messages (and marks naming ``name``) users see."""
    if _CSafeLoader is not None:
        fast = _FastBoundedLoader(text)
        try:
            return fast.get_single_data()
        except yaml.YAMLError:
            pass  # parsed again below for PyYAML's message
        finally:
            fast.dispose()
    # Read as a stream, marks name it and carry no snippet, as when PyYAML reads the file.
    stream = io.StringIO(text)
    stream.name = name
    loader = _BoundedLoader(stream)
    try:
        return loader.get_single_data()
    finally:
        loader.dispose()


def _tab_hint(error: yaml.YAMLError) -> str:
    """A hint for PyYAML's complaint about a tab where indentation goes."""
    mark = getattr(error, "problem_mark", None)
    if mark is None or "'\\t'" not in str(getattr(error, "problem", "")):
        return ""
    return f"\nline {mark.line + 1} is indented with a tab: use spaces, not tabs, to indent YAML"


TrainerTypes = Mapping[str, TrainerType]


def load_options(
    config: str | Path | RunOptions | Mapping[str, Any],
) -> tuple[RunOptions, TrainerTypes]:
    """Options from a YAML path, a mapping, or as given, with the trainer types they were
    checked against: the trainer plugins load once, here.  Options given as they are keep
    the types of a :func:`~evtrain.trainers.registry.use_trainer_types` block around the
    caller (the CLI's), else their plugins load.

    :raises ConfigError: the file is missing, is not YAML, or its options are invalid.
    :raises PluginError: a required trainer plugin failed, or a name clash is not settled.
    """
    if isinstance(config, RunOptions):
        return config, chosen_trainer_types() or trainer_types_for(config.plugins)
    data = dict(config) if isinstance(config, Mapping) else read_config(config)
    return options_and_types(data)


def options_and_types(data: dict[str, Any]) -> tuple[RunOptions, TrainerTypes]:
    """:meth:`RunOptions.from_dict` against the built-in trainer types and those of the trainer
    plugins that ``data``'s ``plugins`` section allows; and those types.

    :raises ConfigError: as :meth:`RunOptions.from_dict`, for a bad ``plugins`` section, and
        for what ``env_settings.shared_env`` does not support yet
        (:func:`~evtrain.config.shared_env.shared_env_problems`).
    :raises PluginError: a required trainer plugin failed, or a name clash is not settled.
    """
    plugins = data.get("plugins", {}) if isinstance(data, dict) else {}
    types = trainer_types_for(structure(plugins, PluginSettings, root="plugins"))
    with use_trainer_types(types):
        options = RunOptions.from_dict(data)
    problems = shared_env_problems(options)
    if problems:
        raise ConfigError(problems)
    return options, types


def options_from_data(data: dict[str, Any]) -> RunOptions:
    """The options of :func:`options_and_types`."""
    return options_and_types(data)[0]
