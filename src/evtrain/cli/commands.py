"""What each ``evtrain`` command does once its arguments are parsed: each returns the
process's exit code."""

from __future__ import annotations

import argparse
import shlex
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING

from evtrain import plugins
from evtrain.cli.overrides import cli_data, interrupted_line
from evtrain.cli.startup import resume_collector
from evtrain.config.options import RunOptions
from evtrain.config.problems import short_repr
from evtrain.errors import ConfigError

if TYPE_CHECKING:
    from evtrain.run.learn import LearnResult


def list_plugins(groups: Sequence[str], paths: Sequence[str] = ()) -> int:
    """Print every plugin of ``groups`` with its distribution and load status; 1 if any fails."""
    found = plugins.discover(groups, paths)
    results = [plugins.load(p) for p in found]
    status = 0
    for group in groups:
        rows = [r for r in results if r.plugin.group == group]
        print(f"{group}:")
        if group == plugins.TRAINER:
            _list_built_in_trainers()
        elif not rows:
            print("  (none)")
        for result in rows:
            p = result.plugin
            source = " ".join(filter(None, (p.distribution, p.version))) or "(no distribution)"
            if isinstance(result, plugins.FailedPlugin):
                state = f"FAILED: {result.reason}"
                status = 1
            else:
                state = "loaded"
            print(f"  {p.name:<20} {source:<28} {p.value:<45} {state}")
    return status


def _list_built_in_trainers() -> None:
    from evtrain._version import __version__
    from evtrain.trainers.registry import TRAINER_TYPES

    for name, built_in in TRAINER_TYPES.items():
        value = built_in.trainer if isinstance(built_in.trainer, str) else built_in.trainer.__name__
        print(f"  {name:<20} {'evtrain ' + __version__:<28} {value:<45} built in")


def run_learn(args: argparse.Namespace) -> int:
    """``evtrain learn``: 0 once the run ended with its final save, 1 when it failed."""
    from evtrain.events.payloads import RunStatus
    from evtrain.ranks import get_rank
    from evtrain.run.options import options_and_types
    from evtrain.run.wiring import initialized
    from evtrain.trainers.registry import use_trainer_types

    options, types = options_and_types(cli_data(args))  # learn() keeps these trainer types
    # torch only once the config is known good: a config error is reported without it.
    from evtrain.run.learn import learn

    resume_collector()  # the imports are done (evtrain.cli.startup)

    # Initialised first: the bus takes its rank from the process group, and only rank 0 shows
    # a progress bar (ranks share one terminal under torchrun).
    with use_trainer_types(types), initialized(options):
        rank = get_rank()
        if not sys.stderr.isatty() or rank != 0:
            result = learn(options)
        else:
            from evtrain.run.progress import ProgressDisplay
            from evtrain.run.wiring import make_bus

            display = ProgressDisplay({n: s.max_steps for n, s in options.behaviors.items()})
            with display, make_bus(options) as bus:
                display.connect(bus)
                result = learn(options, bus, progress=display)
    for name, path in result.models.items():
        print(f"{name}: {result.steps[name]:,} steps, policy exported to {path}")
    if rank == 0:  # ranks share one terminal
        logdir = shlex.quote(options.checkpoint_settings.results_dir)
        print(f"TensorBoard: tensorboard --logdir {logdir}")
        if result.status is RunStatus.INTERRUPTED:
            print(interrupted_line(args, result.run_id, result.steps))
        if result.status is RunStatus.STOPPED:
            print(f"Stopped early at a subscriber's request: {result.stop_reason}")
        if result.journaled:
            print(_sync_line(options.checkpoint_settings.results_dir, result))
    return 0 if result.status is not RunStatus.FAILED else 1


def _sync_line(results_dir: str, result: LearnResult) -> str:
    """The last line of a run whose tracker did not take everything: how to deliver it."""
    where = "" if results_dir == "results" else f" --results-dir {shlex.quote(results_dir)}"
    kept = sum(result.journaled.values())
    return (
        f"{kept:,} tracker events wait in the journal of {', '.join(result.journaled)}; "
        f"deliver them once the tracker answers: evtrain sync {shlex.quote(result.run_id)}{where}"
    )


def run_record(args: argparse.Namespace) -> int:
    """``evtrain record``: the trained policy's episodes to a demonstration file."""
    from evtrain.run.options import options_and_types, read_config
    from evtrain.run.record import record

    data = read_config(args.config)
    for section, key, value in (
        ("checkpoint_settings", "run_id", args.run_id),
        ("checkpoint_settings", "results_dir", args.results_dir),
        ("env_settings", "seed", args.seed),
    ):
        if value is not None:
            part = data.setdefault(section, {})
            if not isinstance(part, dict):
                raise ConfigError(
                    [f"{section}: expected a mapping of options, got {short_repr(part)}"]
                )
            part[key] = value
    options, _ = options_and_types(data)
    result = record(options, episodes=args.episodes, output=args.output, behavior=args.behavior)
    mean = sum(result.returns) / len(result.returns)
    print(
        f"{result.behavior}: recorded {result.episodes} episodes ({result.steps:,} steps, mean "
        f"return {mean:.1f}) with {result.policy} to {result.path}"
    )
    return 0


def run_sync(args: argparse.Namespace) -> int:
    """``evtrain sync``: 0 once every journal is delivered, 1 when some is left."""
    from evtrain.run.sync import sync_run

    report = sync_run(args.run_id, args.results_dir, args.timeout, args.plugins)
    if not report.pending:
        print(f"{args.run_id}: nothing journaled; every tracker has every event")
        return 0
    for name, pending in report.pending.items():
        left = report.left.get(name, 0)
        refused = report.refused.get(name, 0)
        delivered = (
            f"{name}: {pending - left - refused:,} of {pending:,} journaled events delivered"
        )
        if refused:
            delivered += f", {refused:,} refused (see run_logs/dead_letter/)"
        print(delivered)
    if report.complete:
        return 0
    print(
        f"Some events are still journaled; run evtrain sync {shlex.quote(args.run_id)} again "
        "once the tracker answers."
    )
    return 1


def run_demo(args: argparse.Namespace) -> int:
    """``evtrain demo``: a synthetic run through the default writers."""
    from evtrain.demo import run_demo as demo

    options = RunOptions.from_dict(
        {
            "checkpoint_settings": {
                "run_id": args.run_id,
                "results_dir": args.results_dir,
            },
            "debug": args.debug,
        }
    )
    demo(options, steps=args.steps)
    return 0
