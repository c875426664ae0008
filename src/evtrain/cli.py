"""The ``evtrain`` command line (also ``python -m evtrain``)."""

from __future__ import annotations

import argparse
import gc
import logging
import shlex
import sys
import traceback
from collections.abc import Mapping, Sequence
from typing import Any, NoReturn

import yaml

from evtrain import plugins
from evtrain.atomic import disk_full
from evtrain.config.options import RunOptions
from evtrain.config.problems import short_repr
from evtrain.errors import (
    CheckpointError,
    ConfigError,
    DistributedError,
    JournalFormatError,
    NonFiniteError,
    PluginError,
    RunFolderError,
)
from evtrain.run.interrupt import Aborted

LOG_FORMAT = "[%(levelname)s] %(message)s"
DEBUG_LOG_FORMAT = "%(asctime)s %(levelname)s [%(name)s %(filename)s:%(lineno)d] %(message)s"


LEARN_EPILOG = """\
signals: the first SIGINT (Ctrl-C), SIGTERM or SIGHUP stops the run cleanly: the current
update finishes, then the final save and export, then the drain of the writers; during the
final save it lets the save finish. A second signal aborts at once and says which files of the
interrupted save are on disk (each complete).

exit codes:
  0    the run ended with its final save complete (at max_steps, or stopped by a signal)
  1    the run failed (e.g. a non-finite reward or loss; another rank died)
  2    usage or configuration error; nothing was trained
  130  aborted by a second signal: SIGINT (129 SIGHUP, 143 SIGTERM: 128 + the signal's number)

see docs/run-folder.md, "Exit codes and signals"."""


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="evtrain",
        description="Train RL agents from YAML; every training event goes through a typed bus.",
    )
    parser.add_argument("--debug", action="store_true", help="verbose logs")
    parser.add_argument("--version", action="version", version=f"evtrain {_version()}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    listing = commands.add_parser("plugins", help="list every plugin found, and whether it loads")
    listing.add_argument(
        "--group", choices=plugins.GROUPS, action="append", help="only these groups"
    )
    listing.add_argument(
        "--plugins", nargs="+", metavar="PATH", default=[], help="also list modules under PATH"
    )

    learn = commands.add_parser(
        "learn",
        help="train the behaviors of a YAML config",
        epilog=LEARN_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    learn.set_defaults(learn_parser=learn)
    # Optional here so that "--plugins DIR config.yaml" works: see _parse.
    learn.add_argument(
        "config", nargs="?", help="YAML file in ML-Agents' shape (see docs/configuration.md)"
    )
    overrides = learn.add_argument_group("overrides (applied only when given)")
    overrides.add_argument("--run-id", help="checkpoint_settings.run_id")
    overrides.add_argument("--results-dir", help="checkpoint_settings.results_dir")
    overrides.add_argument("--resume", action="store_true", default=None, help="continue the run")
    overrides.add_argument("--force", action="store_true", default=None, help="overwrite the run")
    overrides.add_argument("--initialize-from", metavar="RUN_ID", help="start from its weights")
    overrides.add_argument(
        "--inference", action="store_true", default=None, help="run the policy, do not train"
    )
    overrides.add_argument(
        "--seed", type=int, help="env_settings.seed: 0 or more, or -1 to draw one (logged)"
    )
    overrides.add_argument("--num-envs", type=int, help="env_settings.num_envs")
    overrides.add_argument("--torch-device", help="torch_settings.device (cpu, cuda, cuda:1)")
    overrides.add_argument(
        "--plugins", nargs="+", metavar="PATH", help="folders of modules declaring plugins"
    )
    overrides.add_argument(
        "--initializer",
        metavar="NAME",
        help="plugins.initializer: the evtrain.initializer plugin to use (none: no initializer)",
    )
    overrides.add_argument(
        "--writer",
        action="append",
        metavar="NAME[:KEY=VALUE,...]",
        help="writers.NAME: run this optional writer (csv, jsonl, ...), with its options; "
        "repeatable",
    )

    rec = commands.add_parser(
        "record", help="run a trained policy and write its episodes as demonstrations"
    )
    rec.add_argument("config", help="the YAML config the run was trained with")
    rec.add_argument("--run-id", help="the trained run (default: the config's run_id)")
    rec.add_argument("--results-dir", help="parent folder of the run (default: the config's)")
    rec.add_argument("--episodes", type=int, required=True, help="whole episodes to record")
    rec.add_argument("--output", required=True, metavar="FILE", help="demonstration file (.npz)")
    rec.add_argument("--behavior", help="the behavior to record (needed with several)")
    rec.add_argument("--seed", type=int, help="env_settings.seed of the recorded episodes")

    sync = commands.add_parser(
        "sync", help="deliver what a run's journals hold to its trackers (after an outage)"
    )
    sync.add_argument("run_id", metavar="RUN_ID", help="the run's id (its folder's name)")
    sync.add_argument("--results-dir", default="results", help="parent folder (default: results)")
    sync.add_argument(
        "--timeout",
        type=float,
        default=60.0,
        help="seconds to wait for the trackers; what is left stays journaled (default 60)",
    )
    sync.add_argument(
        "--plugins",
        nargs="+",
        metavar="PATH",
        default=[],
        help="folders of plugin modules to import (the run's own plugins.paths are not)",
    )

    demo = commands.add_parser(
        "demo", help="emit a synthetic run through the default writers (no training)"
    )
    demo.add_argument("--run-id", default="demo", help="run folder name (default: demo)")
    demo.add_argument("--results-dir", default="results", help="parent folder (default: results)")
    demo.add_argument("--steps", type=int, default=50_000, help="synthetic steps (default 50000)")
    for command in (learn, rec, sync, demo):
        # Also after the command (evtrain learn --debug ...); SUPPRESS: when absent here, the
        # value given before the command stands.
        command.add_argument(
            "--debug", action="store_true", default=argparse.SUPPRESS, help="verbose logs"
        )
    return parser


def _version() -> str:
    from evtrain._version import __version__

    return __version__


def _parse(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = _parser()
    args = parser.parse_args(argv)
    learn_parser = vars(args).pop("learn_parser", None)
    if args.command == "learn" and args.config is None:
        # learn --plugins DIR config.yaml: --plugins takes one or more paths, so argparse
        # gives it the config too; the last of its paths is the config then.
        if args.plugins is None or len(args.plugins) < 2:
            learn_parser.error("the following arguments are required: config")
        args.config = args.plugins.pop()
    return args


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


_OVERRIDES = {
    "run_id": ("checkpoint_settings", "run_id"),
    "results_dir": ("checkpoint_settings", "results_dir"),
    "resume": ("checkpoint_settings", "resume"),
    "force": ("checkpoint_settings", "force"),
    "initialize_from": ("checkpoint_settings", "initialize_from"),
    "inference": ("checkpoint_settings", "inference"),
    "seed": ("env_settings", "seed"),
    "num_envs": ("env_settings", "num_envs"),
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
    for dest, (section, key) in _OVERRIDES.items():
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


def run_learn(args: argparse.Namespace) -> int:
    from evtrain.events.payloads import RunStatus
    from evtrain.ranks import get_rank
    from evtrain.run.learn import learn
    from evtrain.run.options import options_and_types
    from evtrain.run.wiring import initialized
    from evtrain.trainers.registry import use_trainer_types

    options, types = options_and_types(cli_data(args))  # learn() keeps these trainer types
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
            print(_interrupted_line(args, result.run_id, result.steps))
        if result.journaled:
            print(_sync_line(options.checkpoint_settings.results_dir, result))
    return 0 if result.status in (RunStatus.COMPLETED, RunStatus.INTERRUPTED) else 1


def _sync_line(results_dir: str, result: Any) -> str:
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
        print(f"{name}: {pending - left:,} of {pending:,} journaled events delivered")
    if report.complete:
        return 0
    print(
        f"Some events are still journaled; run evtrain sync {shlex.quote(args.run_id)} again "
        "once the tracker answers."
    )
    return 1


def _interrupted_line(args: argparse.Namespace, run_id: str, steps: Mapping[str, int]) -> str:
    """``Interrupted at step N. Continue with: evtrain learn ... --resume``: the command line
    that was given, less what starts a run afresh, plus the run id and ``--resume``."""
    if len(steps) == 1:
        where = f"step {next(iter(steps.values())):,}"
    else:
        where = "steps " + ", ".join(f"{n:,} ({name})" for name, n in steps.items())
    if args.inference:
        return f"Interrupted at {where}."  # nothing to continue: inference trains nothing
    command = ["evtrain", *(["--debug"] if args.debug else []), "learn", args.config]
    for dest in _OVERRIDES:
        value = getattr(args, dest)
        if value is None or dest in ("run_id", "resume", "force", "initialize_from", "inference"):
            continue
        command.append("--" + dest.replace("_", "-"))
        command.extend([str(v) for v in value] if dest == "plugins" else [str(value)])
    for flag in args.writer or ():
        command += ["--writer", flag]
    command += ["--run-id", run_id, "--resume"]
    return f"Interrupted at {where}. Continue with: {shlex.join(command)}"


def entry() -> NoReturn:
    """The ``evtrain`` command (and ``python -m evtrain``): :func:`main`, then exit.

    Before exiting, every object alive is moved out of the cyclic garbage collector's reach
    (``gc.freeze``): the collections of the interpreter's shutdown would otherwise walk the
    whole of torch's object graph, about half a second on a small machine, for a process
    that is ending anyway (measured in ``benchmarks/bench_startup.py``).  Everything of the
    run is closed by then; objects are still released by reference count as usual.
    """
    code = main()
    gc.freeze()
    sys.exit(code)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the process exit code."""
    args = _parse(argv)
    # Only evtrain's own loggers speak at INFO: libraries (the ONNX exporter, say) keep the
    # root's WARNING, so the console shows training, not their progress chatter.
    logging.basicConfig(
        level=logging.WARNING, format=DEBUG_LOG_FORMAT if args.debug else LOG_FORMAT
    )
    logging.getLogger("evtrain").setLevel(logging.DEBUG if args.debug else logging.INFO)
    try:
        if args.command == "plugins":
            return list_plugins(args.group or plugins.GROUPS, args.plugins)
        if args.command == "learn":
            return run_learn(args)
        if args.command == "sync":
            return run_sync(args)
        if args.command == "record":
            return run_record(args)
        if args.command == "demo":
            from evtrain.demo import run_demo

            options = RunOptions.from_dict(
                {
                    "checkpoint_settings": {
                        "run_id": args.run_id,
                        "results_dir": args.results_dir,
                    },
                    "debug": args.debug,
                }
            )
            run_demo(options, steps=args.steps)
            return 0
    except (
        CheckpointError,
        ConfigError,
        JournalFormatError,
        PluginError,
        RunFolderError,
    ) as error:
        print(f"evtrain: error: {error}", file=sys.stderr)
        return 2
    except DistributedError:
        return 1  # logged where it happened (see evtrain.distributed.World)
    except OSError as error:
        if not disk_full(error):
            raise
        # A full disk is the machine's state, not a bug: one line, no traceback.  Every
        # checkpoint write is atomic, so the last one on disk is complete.
        print(
            f"evtrain: error: {error.strerror}: {error.filename or 'a file of the run'}. Free "
            "space there, then continue with --resume (the last checkpoint on disk is "
            "complete).",
            file=sys.stderr,
        )
        return 1
    except NonFiniteError as error:
        if args.debug:
            traceback.print_exc()
        print(f"evtrain: error: {error}", file=sys.stderr)
        return 1
    except KeyboardInterrupt as interrupt:
        print("evtrain: aborted", file=sys.stderr)
        return interrupt.exit_code if isinstance(interrupt, Aborted) else 130
    raise AssertionError(f"unhandled command {args.command!r}")  # argparse enforces choices


if __name__ == "__main__":
    sys.exit(main())
