"""The ``evtrain`` command line (also ``python -m evtrain``).

Its grammar is :mod:`evtrain.cli.parser`'s; ``learn``'s flags as options,
:mod:`evtrain.cli.overrides`'; what each command does, :mod:`evtrain.cli.commands`'.  Here:
:func:`main`, which runs one command and turns the errors a user can fix into exit codes.
"""

from __future__ import annotations

import argparse
import gc
import logging
import sys
import traceback
from collections.abc import Sequence
from typing import NoReturn

from evtrain import plugins
from evtrain.atomic import disk_full
from evtrain.cli.commands import list_plugins, run_demo, run_learn, run_record, run_sync
from evtrain.cli.compare import run_compare
from evtrain.cli.overrides import cli_data, options_from_cli, parse_writer_flag
from evtrain.cli.parser import LEARN_EPILOG, build_parser, parse
from evtrain.cli.startup import pause_collector, resume_collector
from evtrain.cli.sweep import run_sweep
from evtrain.errors import (
    CheckpointError,
    ConfigError,
    DistributedError,
    JournalFormatError,
    NonFiniteError,
    PluginError,
    RunFolderError,
    UnityError,
)
from evtrain.run.interrupt import Aborted

__all__ = [
    "DEBUG_LOG_FORMAT",
    "LEARN_EPILOG",
    "LOG_FORMAT",
    "cli_data",
    "entry",
    "list_plugins",
    "main",
    "options_from_cli",
    "parse_writer_flag",
    "run_learn",
    "run_record",
    "run_sync",
]

LOG_FORMAT = "[%(levelname)s] %(message)s"
DEBUG_LOG_FORMAT = "%(asctime)s %(levelname)s [%(name)s %(filename)s:%(lineno)d] %(message)s"


def _parser() -> argparse.ArgumentParser:
    """:func:`evtrain.cli.parser.build_parser` (its name here before the parser had a module)."""
    return build_parser()


def entry() -> NoReturn:
    """The ``evtrain`` command (and ``python -m evtrain``): :func:`main`, then exit.

    Before exiting, every object alive is moved out of the cyclic garbage collector's reach
    (``gc.freeze``): the collections of the interpreter's shutdown would otherwise walk the
    whole of torch's object graph, about half a second on a small machine, for a process
    that is ending anyway (measured in ``benchmarks/bench_startup.py``).  Everything of the
    run is closed by then; objects are still released by reference count as usual.  At the
    start, the collector is off while the command imports its modules
    (:mod:`evtrain.cli.startup`).
    """
    pause_collector()
    code = main()
    gc.freeze()
    sys.exit(code)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the process exit code."""
    args = parse(argv)
    # Only evtrain's own loggers speak at INFO: libraries (the ONNX exporter, say) keep the
    # root's WARNING, so the console shows training, not their progress chatter.
    logging.basicConfig(
        level=logging.WARNING, format=DEBUG_LOG_FORMAT if args.debug else LOG_FORMAT
    )
    logging.getLogger("evtrain").setLevel(logging.DEBUG if args.debug else logging.INFO)
    try:
        return _run(args)
    except (
        CheckpointError,
        ConfigError,
        JournalFormatError,
        PluginError,
        RunFolderError,
    ) as error:
        print(f"evtrain: error: {error}", file=sys.stderr)
        return 2
    except UnityError as error:  # a build's fault: one line, the build and its log named
        if args.debug:
            traceback.print_exc()
        print(f"evtrain: error: {error}", file=sys.stderr)
        return 1
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


def _run(args: argparse.Namespace) -> int:
    """The command ``args`` name, run; its exit code."""
    if args.command == "learn":
        return run_learn(args)  # resumes the collector once torch is imported
    resume_collector()
    if args.command == "plugins":
        return list_plugins(args.group or plugins.GROUPS, args.plugins)
    if args.command == "sync":
        return run_sync(args)
    if args.command == "record":
        return run_record(args)
    if args.command == "demo":
        return run_demo(args)
    if args.command == "compare":
        return run_compare(args)
    if args.command == "sweep":
        return run_sweep(args)
    raise AssertionError(f"unhandled command {args.command!r}")  # argparse enforces choices
