"""``evtrain compare RUN_OR_GLOB... [--stat KEY]``: its arguments, and what it does with them
(docs/compare.md)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from evtrain.cli.arguments import fraction, natural_int, positive_int, positive_int_at_most
from evtrain.errors import ConfigError

if TYPE_CHECKING:
    # What add_subparsers returns (as in evtrain.cli.parser, which imports this module).
    _Commands = argparse._SubParsersAction[argparse.ArgumentParser]

DEFAULT_STAT = "Environment/Cumulative Reward"
MAX_REPS = 100_000
"""The most bootstrap resamples: memory grows with resamples times runs and curve steps (at
most 200), and 50,000,000 took 21 GB; rliable's paper used 2,000 to 50,000."""

COMPARE_EPILOG = """\
Each RUN_OR_GLOB is a group of runs (its seeds): a run folder, a run id under --results-dir,
or a glob of them in quotes ('results/ppo-*'). With --group-by, the runs of all arguments
are grouped by the regular expression's match in their run ids instead.

Final scores: the IQM (interquartile mean) of the runs' last values, the mean and median over
tasks of each task's mean, with stratified bootstrap confidence intervals, as rliable defines
them (Agarwal et al., "Deep Reinforcement Learning at the Edge of the Statistical Precipice",
NeurIPS 2021).

exit codes: 0 the report was printed (and the figure written); 1 the figure could not be drawn
(matplotlib missing: the plot extra, README.md "Installing extras"); 2 usage error, or runs
or stat not found.
see docs/compare.md."""


def add_compare(commands: _Commands) -> argparse.ArgumentParser:
    """``compare``'s sub-parser."""
    compare = commands.add_parser(
        "compare",
        help="compare runs: learning curves and final scores (IQM, bootstrap intervals)",
        epilog=COMPARE_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    compare.add_argument("runs", nargs="+", metavar="RUN_OR_GLOB", help="a group of runs")
    compare.add_argument(
        "--stat", default=DEFAULT_STAT, metavar="KEY", help=f"the stat (default {DEFAULT_STAT})"
    )
    compare.add_argument(
        "--results-dir",
        default="results",
        metavar="DIR",
        help="where run ids are looked up (default results)",
    )
    compare.add_argument(
        "--behavior", metavar="NAME", help="only this behavior of each run (default: all)"
    )
    compare.add_argument("--group-by", metavar="REGEX", help="group runs by this match in run ids")
    compare.add_argument(
        "--last",
        type=positive_int,
        default=1,
        metavar="N",
        help="final score: mean of the last N (1)",
    )
    compare.add_argument(
        "--target", type=float, metavar="SCORE", help="also the optimality gap to this score"
    )
    compare.add_argument(
        "--reps",
        type=positive_int_at_most(MAX_REPS),
        default=2000,
        metavar="N",
        help=f"bootstrap resamples (2000; at most {MAX_REPS:,})",
    )
    compare.add_argument(
        "--confidence",
        type=fraction,
        default=0.95,
        metavar="LEVEL",
        help="the intervals' level (0.95)",
    )
    compare.add_argument(
        "--seed", type=natural_int, default=0, metavar="N", help="the resamples' seed (0)"
    )
    compare.add_argument(
        "--output",
        metavar="FILE",
        help="also draw curves and scores into a .png, .svg or .pdf file",
    )
    compare.add_argument(
        "--debug", action="store_true", default=argparse.SUPPRESS, help="verbose logs"
    )
    return compare


def run_compare(args: argparse.Namespace) -> int:
    """``evtrain compare``: print the report; 1 when the figure asked for cannot be drawn."""
    from evtrain.compare.comparison import Settings, compare_group
    from evtrain.compare.plot import FORMATS, PlotUnavailable, plot
    from evtrain.compare.runs import find_groups, read_group
    from evtrain.compare.table import report

    output = Path(args.output) if args.output is not None else None
    if output is not None and output.suffix.lower() not in FORMATS:
        raise ConfigError(
            [f"--output {args.output!r}: expected a .png, .svg or .pdf file, e.g. curves.png"]
        )
    settings = Settings(
        stat=args.stat,
        last=args.last,
        reps=args.reps,
        confidence=args.confidence,
        seed=args.seed,
        target=args.target,
    )
    groups = find_groups(args.runs, Path(args.results_dir), args.group_by)
    problems: list[str] = []
    read = []
    for group in groups:
        try:
            read.append((group.name, read_group(group, args.stat, args.behavior)))
        except ConfigError as error:
            problems += error.problems
    if problems:
        raise ConfigError(problems)
    results = [compare_group(name, series, settings) for name, series in read]
    print(report(results, settings))
    if output is None:
        return 0
    try:
        written = plot(results, settings, output)
    except PlotUnavailable as error:
        print(f"evtrain: error: {error}", file=sys.stderr)
        return 1
    print(f"\nPlot: {written}")
    return 0
