"""``evtrain learn``'s flags as options: each flag given writes over the YAML's value, and the
command line that continues an interrupted run."""

from __future__ import annotations

import argparse
import shlex
from collections.abc import Mapping
from typing import Any

import yaml

from evtrain.config.options import RunOptions
from evtrain.config.problems import short_repr
from evtrain.errors import ConfigError

OVERRIDES = {
    "run_id": ("checkpoint_settings", "run_id"),
    "results_dir": ("checkpoint_settings", "results_dir"),
    "resume": ("checkpoint_settings", "resume"),
    "force": ("checkpoint_settings", "force"),
    "initialize_from": ("checkpoint_settings", "initialize_from"),
    "inference": ("checkpoint_settings", "inference"),
    "seed": ("env_settings", "seed"),
    "num_envs": ("env_settings", "num_envs"),
    **{
        key: ("env_settings", key)
        for key in (
            *("env_path", "base_port", "num_areas", "timeout_wait", "max_lifetime_restarts"),
            *("restarts_rate_limit_n", "restarts_rate_limit_period_s", "env_args"),
        )
    },
    **{
        key: ("engine_settings", key)
        for key in (
            *("width", "height", "quality_level", "time_scale", "target_frame_rate"),
            *("capture_frame_rate", "no_graphics"),
        )
    },
    "torch_device": ("torch_settings", "device"),
    "plugins": ("plugins", "paths"),
    "initializer": ("plugins", "initializer"),
}
"""CLI flag (argparse dest) to the option it overrides."""


def options_from_cli(args: argparse.Namespace) -> RunOptions:
    """The YAML's options with the flags that were given written over them."""
    from evtrain.run.options import options_from_data

    return options_from_data(cli_data(args))


def cli_data(args: argparse.Namespace) -> dict[str, Any]:
    """The YAML's plain data with the flags that were given written over it."""
    from evtrain.run.options import read_config

    data = read_config(args.config)
    for dest, (section, key) in OVERRIDES.items():
        value = getattr(args, dest)
        if value is not None:
            part = data.setdefault(section, {})
            if not isinstance(part, dict):
                raise ConfigError(
                    [f"{section}: expected a mapping of options, got {short_repr(part)}"]
                )
            part[key] = [str(p) for p in value] if dest == "plugins" else value
    for flag in args.writer or ():
        name, options = parse_writer_flag(flag)
        writers = data.setdefault("writers", {})
        if not isinstance(writers, dict):
            raise ConfigError(
                [f"writers: expected a mapping of writer names, got {short_repr(writers)}"]
            )
        writers[name] = {**(writers.get(name) or {}), **options}
    if args.debug:
        data["debug"] = True
    return data


def parse_writer_flag(flag: str) -> tuple[str, dict[str, Any]]:
    """``mlflow:tracking_uri=http://127.0.0.1:5000,experiment=cartpole`` to the writer's name
    and options; each value is read as YAML (``port=9100`` is a number).

    :raises ConfigError: an empty name, or an option without ``=``.
    """
    name, _, rest = flag.partition(":")
    if not name:
        raise ConfigError([f"--writer {flag!r}: expected NAME or NAME:KEY=VALUE,..."])
    options: dict[str, Any] = {}
    for item in filter(None, rest.split(",")):
        key, equals, value = item.partition("=")
        if not equals or not key:
            raise ConfigError(
                [f"--writer {flag!r}: expected KEY=VALUE after {name}:, got {item!r}"]
            )
        options[key] = yaml.safe_load(value) if value else ""
    return name, options


_NOT_CONTINUED = ("run_id", "resume", "force", "initialize_from", "inference", "env_args")
"""The flags a continued run does not repeat (``--env-args`` goes last: it takes the rest)."""
_FLAGS = {"env_path": "--env"}
"""The flags not spelled as their option."""


def interrupted_line(args: argparse.Namespace, run_id: str, steps: Mapping[str, int]) -> str:
    """``Interrupted at step N. Continue with: evtrain learn ... --resume``: the command line
    that was given, less what starts a run afresh, plus the run id and ``--resume``."""
    if len(steps) == 1:
        where = f"step {next(iter(steps.values())):,}"
    else:
        where = "steps " + ", ".join(f"{n:,} ({name})" for name, n in steps.items())
    if args.inference:
        return f"Interrupted at {where}."  # nothing to continue: inference trains nothing
    command = ["evtrain", *(["--debug"] if args.debug else []), "learn", args.config]
    for dest in OVERRIDES:
        value = getattr(args, dest)
        if value is None or dest in _NOT_CONTINUED:
            continue
        command.append(_FLAGS.get(dest, "--" + dest.replace("_", "-")))
        if dest == "plugins":
            command.extend(str(v) for v in value)
        elif dest != "no_graphics":
            command.append(str(value))
    for flag in args.writer or ():
        command += ["--writer", flag]
    command += ["--run-id", run_id, "--resume"]
    if args.env_args is not None:  # it takes every argument after it
        command += ["--env-args", *args.env_args]
    return f"Interrupted at {where}. Continue with: {shlex.join(command)}"
