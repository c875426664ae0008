"""``evtrain compare``'s console report: the final-score aggregates of every group, then each
group's learning curve at a few of its steps."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from evtrain.compare.comparison import GroupResult, Settings
from evtrain.compare.statistics import Estimate

CURVE_ROWS = 10
"""The most steps of a learning curve printed (the first and the last among them)."""

CITATION = (
    'Agarwal et al., "Deep Reinforcement Learning at the Edge of the Statistical Precipice", '
    "NeurIPS 2021"
)


def report(results: Sequence[GroupResult], settings: Settings) -> str:
    """The whole report, lines joined (no trailing newline)."""
    lines = [*final_table(results, settings), ""]
    for result in results:
        lines += [*curve_table(result, settings), ""]
    return "\n".join(lines[:-1])


def final_table(results: Sequence[GroupResult], settings: Settings) -> list[str]:
    """The header lines and one row per group: runs, tasks, each aggregate [interval]."""
    which = "last value" if settings.last == 1 else f"mean of its last {settings.last} values"
    names = list(results[0].final) if results else []
    rows = [
        [
            result.name,
            str(len({s.run for s in result.series})),
            ", ".join(result.tasks),
            *(interval(result.final[name]) for name in names),
        ]
        for result in results
    ]
    return [
        f"{settings.stat}: final score = each run's {which}",
        f"{', '.join(names)} with {settings.confidence:.0%} confidence intervals: stratified "
        f"bootstrap ({settings.reps} resamples of the runs within each task, seed "
        f"{settings.seed}),",
        f"as in {CITATION}",
        "",
        *aligned(["group", "runs", "tasks", *names], rows, right=(1,)),
    ]


def curve_table(result: GroupResult, settings: Settings) -> list[str]:
    """A group's learning curve at up to :data:`CURVE_ROWS` of its steps."""
    level = f"{settings.confidence:.0%}"
    title = (
        f"Learning curve of {result.name} (mean of {len(result.series)} curves, {level} interval)"
    )
    curve = result.curve
    if curve is None:
        return [f"{title}: none, its runs share no steps"]
    shown = np.unique(np.round(np.linspace(0, len(curve.steps) - 1, CURVE_ROWS)).astype(int))
    rows = [
        [
            f"{int(curve.steps[i]):,}",
            number(curve.mean[i]),
            f"[{number(curve.low[i])}, {number(curve.high[i])}]",
        ]
        for i in shown
    ]
    return [f"{title}:", *aligned(["step", "mean", "interval"], rows, right=(0, 1))]


def interval(estimate: Estimate) -> str:
    """``value [low, high]``."""
    return f"{number(estimate.value)} [{number(estimate.low)}, {number(estimate.high)}]"


def number(value: float) -> str:
    """Two decimals: returns and rewards read well so, small or large."""
    return f"{value:.2f}"


def aligned(
    header: Sequence[str], rows: Sequence[Sequence[str]], right: Sequence[int] = ()
) -> list[str]:
    """``header`` and ``rows`` as lines of columns two spaces apart; the columns of ``right``
    aligned to the right, the others to the left; no trailing spaces."""
    widths = [max(len(row[c]) for row in [header, *rows]) for c in range(len(header))]
    lines = []
    for row in [header, *rows]:
        cells = [
            cell.rjust(width) if c in right else cell.ljust(width)
            for c, (cell, width) in enumerate(zip(row, widths, strict=True))
        ]
        lines.append("  ".join(cells).rstrip())
    return lines
