"""The ``evtrain`` command line's grammar: one parser, a sub-parser per command."""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from evtrain import plugins
from evtrain.cli.arguments import integer
from evtrain.cli.compare import add_compare
from evtrain.cli.sweep import add_sweep

LEARN_EPILOG = """\
interrupts: the first SIGINT (Ctrl-C), SIGTERM or SIGHUP stops the run cleanly: the current
update finishes, then the final save and export, then the drain of the writers; during the
final save it lets the save finish. A second interrupt aborts at once and says which files of
the interrupted save are on disk (each complete).

exit codes:
  0    the run ended with its final save complete (at max_steps, or stopped by an interrupt)
  1    the run failed (e.g. a non-finite reward or loss; another rank died)
  2    usage or configuration error; nothing was trained
  130  aborted by a second interrupt: SIGINT (129 SIGHUP, 143 SIGTERM: 128 + its number)

see docs/run-folder.md, "Exit codes and interrupts"."""

if TYPE_CHECKING:
    # What add_subparsers returns; argparse's own name for it is private.
    _Commands = argparse._SubParsersAction[argparse.ArgumentParser]


def build_parser() -> argparse.ArgumentParser:
    """The parser of ``evtrain [--debug] COMMAND ...``."""
    parser = argparse.ArgumentParser(
        prog="evtrain",
        description="Train RL agents from YAML; every training event goes through a typed bus.",
    )
    parser.add_argument("--debug", action="store_true", help="verbose logs")
    parser.add_argument("--version", action="version", version=f"evtrain {_version()}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    _add_plugins(commands)
    learn = _add_learn(commands)
    rec = _add_record(commands)
    sync = _add_sync(commands)
    demo = _add_demo(commands)
    add_compare(commands)  # adds its own --debug
    sweep = add_sweep(commands)
    for command in (learn, rec, sync, demo, sweep):
        # Also after the command (evtrain learn --debug ...); SUPPRESS: when absent here, the
        # value given before the command stands.
        command.add_argument(
            "--debug", action="store_true", default=argparse.SUPPRESS, help="verbose logs"
        )
    return parser


def parse(argv: Sequence[str] | None) -> argparse.Namespace:
    """``argv`` (``None``: the process's) parsed; ``learn``'s config is always set."""
    parser = build_parser()
    args = parser.parse_args(argv)
    learn_parser = vars(args).pop("learn_parser", None)
    if args.command == "learn" and args.config is None:
        # learn --plugins DIR config.yaml: --plugins takes one or more paths, so argparse
        # gives it the config too; the last of its paths is the config then.
        if args.plugins is None or len(args.plugins) < 2:
            learn_parser.error("the following arguments are required: config")
        args.config = args.plugins.pop()
    return args


def _version() -> str:
    from evtrain._version import __version__

    return __version__


def _add_plugins(commands: _Commands) -> None:
    listing = commands.add_parser("plugins", help="list every plugin found, and whether it loads")
    listing.add_argument(
        "--group", choices=plugins.GROUPS, action="append", help="only these groups"
    )
    listing.add_argument(
        "--plugins", nargs="+", metavar="PATH", default=[], help="also list modules under PATH"
    )


def _add_learn(commands: _Commands) -> argparse.ArgumentParser:
    learn = commands.add_parser(
        "learn",
        help="train the behaviors of a YAML config",
        epilog=LEARN_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    learn.set_defaults(learn_parser=learn)
    # Optional here so that "--plugins DIR config.yaml" works: see parse.
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
        "--seed", type=integer, help="env_settings.seed: 0 or more, or -1 to draw one (logged)"
    )
    overrides.add_argument("--num-envs", type=integer, help="env_settings.num_envs")
    overrides.add_argument("--torch-device", help="torch_settings.device (cpu, cuda, cuda:1)")
    overrides.add_argument(
        "--plugins", nargs="+", metavar="PATH", help="folders of modules declaring plugins"
    )
    overrides.add_argument(
        "--initializer",
        metavar="NAME",
        help="plugins.initializer: the evtrain.initializer plugin to use (none: no initializer)",
    )
    _add_unity(learn)
    overrides.add_argument(
        "--writer",
        action="append",
        metavar="NAME[:KEY=VALUE,...]",
        help="writers.NAME: run this optional writer (csv, jsonl, ...), with its options; "
        "repeatable",
    )
    return learn


def _add_unity(learn: argparse.ArgumentParser) -> None:
    """ML-Agents' flags of a Unity run (docs/unity.md), each overriding its key."""
    unity = learn.add_argument_group("Unity builds (ML-Agents' flags; docs/unity.md)")
    unity.add_argument("--env", dest="env_path", metavar="PATH", help="env_settings.env_path")
    unity.add_argument("--base-port", type=integer, help="env_settings.base_port")
    unity.add_argument("--num-areas", type=integer, help="env_settings.num_areas")
    unity.add_argument("--timeout-wait", type=float, help="env_settings.timeout_wait")
    unity.add_argument(
        "--max-lifetime-restarts", type=integer, help="env_settings.max_lifetime_restarts"
    )
    unity.add_argument(
        "--restarts-rate-limit-n", type=integer, help="env_settings.restarts_rate_limit_n"
    )
    unity.add_argument(
        "--restarts-rate-limit-period-s",
        type=float,
        help="env_settings.restarts_rate_limit_period_s",
    )
    engine = learn.add_argument_group("Unity engine (ML-Agents' flags; engine_settings)")
    for flag, kind in ENGINE_FLAGS.items():
        engine.add_argument(flag, type=kind, help="engine_settings." + flag[2:].replace("-", "_"))
    engine.add_argument(
        "--no-graphics", action="store_true", default=None, help="engine_settings.no_graphics"
    )
    unity.add_argument(
        "--env-args",
        nargs=argparse.REMAINDER,
        metavar="ARG",
        help="env_settings.env_args: every argument after it goes to the build",
    )


ENGINE_FLAGS: dict[str, Callable[[str], object]] = {
    "--width": integer,
    "--height": integer,
    "--quality-level": integer,
    "--time-scale": float,
    "--target-frame-rate": integer,
    "--capture-frame-rate": integer,
}
"""ML-Agents' engine flags that take a value, and its type."""


def _add_record(commands: _Commands) -> argparse.ArgumentParser:
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
    return rec


def _add_sync(commands: _Commands) -> argparse.ArgumentParser:
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
    return sync


def _add_demo(commands: _Commands) -> argparse.ArgumentParser:
    demo = commands.add_parser(
        "demo", help="emit a synthetic run through the default writers (no training)"
    )
    demo.add_argument("--run-id", default="demo", help="run folder name (default: demo)")
    demo.add_argument("--results-dir", default="results", help="parent folder (default: results)")
    demo.add_argument("--steps", type=int, default=50_000, help="synthetic steps (default 50000)")
    return demo
