"""The ``evtrain`` command line (also ``python -m evtrain``)."""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence

from evtrain import plugins
from evtrain.errors import ConfigError, PluginError
from evtrain.settings import RunOptions

LOG_FORMAT = "[%(levelname)s] %(message)s"
DEBUG_LOG_FORMAT = "%(asctime)s %(levelname)s [%(name)s %(filename)s:%(lineno)d] %(message)s"


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="evtrain",
        description="Train RL agents from YAML; every training event goes through a typed bus.",
    )
    parser.add_argument("--debug", action="store_true", help="verbose logs")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    listing = commands.add_parser("plugins", help="list every plugin found, and whether it loads")
    listing.add_argument(
        "--group", choices=plugins.GROUPS, action="append", help="only these groups"
    )

    demo = commands.add_parser(
        "demo", help="emit a synthetic run through the default writers (no training)"
    )
    demo.add_argument("--run-id", default="demo", help="run folder name (default: demo)")
    demo.add_argument("--results-dir", default="results", help="parent folder (default: results)")
    demo.add_argument("--steps", type=int, default=50_000, help="synthetic steps (default 50000)")
    return parser


def list_plugins(groups: Sequence[str]) -> int:
    """Print every plugin of ``groups`` with its distribution and load status; 1 if any fails."""
    found = plugins.discover(groups)
    results = [plugins.load(p) for p in found]
    status = 0
    for group in groups:
        rows = [r for r in results if r.plugin.group == group]
        print(f"{group}:")
        if not rows:
            print("  (none)")
        for result in rows:
            p = result.plugin
            source = f"{p.distribution} {p.version}" if p.distribution else "(no distribution)"
            if isinstance(result, plugins.FailedPlugin):
                state = f"FAILED: {result.reason}"
                status = 1
            else:
                state = "loaded"
            print(f"  {p.name:<20} {source:<28} {p.value:<45} {state}")
    return status


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the process exit code."""
    args = _parser().parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.debug else logging.INFO,
        format=DEBUG_LOG_FORMAT if args.debug else LOG_FORMAT,
    )
    try:
        if args.command == "plugins":
            return list_plugins(args.group or plugins.GROUPS)
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
    except (ConfigError, PluginError) as error:
        print(f"evtrain: error: {error}", file=sys.stderr)
        return 2
    raise AssertionError(f"unhandled command {args.command!r}")  # argparse enforces choices


if __name__ == "__main__":
    sys.exit(main())
