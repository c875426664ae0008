"""``evtrain compare --output curves.png``: the learning curves and the final-score aggregates
in one PNG, drawn with matplotlib (the optional ``plot`` extra: README.md,
"Installing extras").

The figure is :data:`WIDTH` x :data:`HEIGHT` pixels: on the left each group's mean curve with
its confidence band; on the right one panel per aggregate (IQM, mean, median, optimality gap
when asked), each group's interval as a bar and its point estimate as a black tick, as
rliable draws its interval estimates.  matplotlib's ``Figure`` is used without ``pyplot``, so
no window or global state is involved; the file is written atomically.
"""

from __future__ import annotations

import io
from collections.abc import Sequence
from pathlib import Path

from evtrain.atomic import atomic_write
from evtrain.compare.comparison import GroupResult, Settings
from evtrain.extras import install_hint

WIDTH = 1200
HEIGHT = 500
"""The PNG's size in pixels."""
DPI = 100


class PlotUnavailable(ImportError):
    """matplotlib is not installed: the table is printed, the PNG cannot be drawn."""

    def __init__(self, path: Path) -> None:
        super().__init__(
            f"--output {str(path)!r}: drawing the PNG needs matplotlib, which is not installed; "
            f"{install_hint('plot')} (the table above is complete without it)"
        )


def plot(results: Sequence[GroupResult], settings: Settings, path: Path) -> Path:
    """Draw ``results`` into the PNG ``path``; returns it.

    :raises PlotUnavailable: matplotlib is not installed.
    """
    try:
        from matplotlib.figure import Figure
    except ImportError as error:
        raise PlotUnavailable(path) from error
    names = list(results[0].final) if results else []
    figure = Figure(figsize=(WIDTH / DPI, HEIGHT / DPI), dpi=DPI, layout="constrained")
    grid = figure.add_gridspec(1, 1 + len(names), width_ratios=[3.0] + [1.0] * len(names))
    curves = figure.add_subplot(grid[0, 0])
    for index, result in enumerate(results):
        if result.curve is None:
            continue
        color = f"C{index % 10}"
        curve = result.curve
        curves.plot(curve.steps, curve.mean, color=color, label=result.name)
        curves.fill_between(curve.steps, curve.low, curve.high, color=color, alpha=0.2)
    curves.set_xlabel("step")
    curves.set_ylabel(settings.stat)
    curves.set_title(f"Learning curves: mean, {settings.confidence:.0%} interval")
    if any(result.curve is not None for result in results):
        curves.legend(loc="best")
    for column, name in enumerate(names, start=1):
        panel = figure.add_subplot(grid[0, column])
        for index, result in enumerate(results):
            estimate = result.final[name]
            color = f"C{index % 10}"
            panel.barh(
                index,
                estimate.high - estimate.low,
                left=estimate.low,
                height=0.6,
                color=color,
                alpha=0.75,
            )
            panel.vlines(estimate.value, index - 0.3, index + 0.3, color="black")
        labels = [result.name if column == 1 else "" for result in results]
        panel.set_yticks(range(len(results)), labels)
        panel.set_ylim(len(results) - 0.5, -0.5)  # the first group on top
        panel.set_title(name)
        gap = name == "optimality gap"
        panel.set_xlabel(f"short of {settings.target:g}" if gap else "final score")
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=DPI)
    path.parent.mkdir(parents=True, exist_ok=True)
    return atomic_write(path, lambda file: file.write(buffer.getvalue()))
