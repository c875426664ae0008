"""A run's options from what a user hands over: a YAML path, plain data, or options.

This is where trainer plugins load, before structuring, so that ``trainer_type: my_algo`` and
its hyperparameters validate against them; :meth:`RunOptions.from_dict` itself loads nothing.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from evtrain.config.converter import structure
from evtrain.config.options import PluginSettings, RunOptions
from evtrain.errors import ConfigError
from evtrain.run.wiring import trainer_types_for
from evtrain.trainers.registry import TrainerType, chosen_trainer_types, use_trainer_types


def read_config(path: str | Path) -> dict[str, Any]:
    """The plain data of a YAML config file.

    :raises ConfigError: the file is missing or unreadable, is not YAML, or is not a mapping.
    """
    path = Path(path)
    try:
        with path.open(encoding="utf-8") as stream:
            data = yaml.safe_load(stream)  # given the file, error marks name it, not a string
    except FileNotFoundError:
        raise ConfigError([f"{path}: no such config file"]) from None
    except yaml.YAMLError as error:
        # PyYAML says "found character '\t' that cannot start any token": say what to do.
        tabs = "; YAML indents with spaces, not tabs" if "'\\t'" in str(error) else ""
        raise ConfigError([f"{path}: not valid YAML: {error}{tabs}"]) from None
    except (OSError, UnicodeDecodeError) as error:
        raise ConfigError([f"{path}: cannot read the config file: {error}"]) from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError([f"{path}: expected a mapping of options, got {type(data).__name__}"])
    return data


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

    :raises ConfigError: as :meth:`RunOptions.from_dict`, and for a bad ``plugins`` section.
    :raises PluginError: a required trainer plugin failed, or a name clash is not settled.
    """
    plugins = data.get("plugins", {}) if isinstance(data, dict) else {}
    types = trainer_types_for(structure(plugins, PluginSettings, root="plugins"))
    with use_trainer_types(types):
        return RunOptions.from_dict(data), types


def options_from_data(data: dict[str, Any]) -> RunOptions:
    """The options of :func:`options_and_types`."""
    return options_and_types(data)[0]
