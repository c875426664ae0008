"""``evtrain compare --output curves.png``: the learning curves and the final-score aggregates
in one figure, drawn with matplotlib (the optional ``plot`` extra: README.md, "Installing
extras"), as a PNG, an SVG or a PDF (:data:`FORMATS`, chosen by the file's suffix).

The figure is :data:`WIDTH` x :data:`HEIGHT` pixels at :data:`DPI` (12 x 5 inches): on the
left each group's mean curve with its confidence band; on the right one panel per aggregate
(IQM, mean, median, optimality gap when asked), each group's interval as a bar and its point
estimate as a black tick, as rliable draws its interval estimates.  An interval of zero width
(every resample alike) is a bar of no width, so its estimate is also marked with a diamond of
the group's colour; each panel's range leaves a margin around every interval, so none is hidden
under the frame.  Groups are labelled with readable names (:func:`labels`).  SVG text stays
text (``svg.fonttype: none``) and PDF fonts are embedded as TrueType (``pdf.fonttype: 42``),
as journals ask; no creation date is written, so the same runs give the same file.
matplotlib's ``Figure`` is used without ``pyplot``, so no window or global state is involved;
the file is written atomically.
"""

from __future__ import annotations

import io
import re
from collections.abc import Sequence
from pathlib import Path, PurePath
from typing import Any

from evtrain.atomic import atomic_write
from evtrain.compare.comparison import GroupResult, Settings
from evtrain.extras import install_hint

WIDTH = 1200
HEIGHT = 500
"""The figure's size in pixels (of the PNG; SVG and PDF have its size in inches at DPI)."""
DPI = 100
FORMATS = (".png", ".svg", ".pdf")
"""The suffixes ``--output`` takes, each drawn in its format."""
_METADATA: dict[str, dict[str, Any]] = {
    ".png": {},
    ".svg": {"Date": None},
    ".pdf": {"CreationDate": None},
}
"""No creation date in SVG and PDF: the same runs, the same file."""
_GLOB = re.compile(r"[-_.]?(?:\[[^\]]*\]|[*?])+")
"""A glob's wildcards with the separator before them: ``-*`` of ``ppo-*``."""


class PlotUnavailable(ImportError):
    """matplotlib is not installed: the table is printed, the figure cannot be drawn."""

    def __init__(self, path: Path) -> None:
        super().__init__(
            f"--output {str(path)!r}: drawing the figure needs matplotlib, which is not "
            f"installed; {install_hint('plot')} (the table above is complete without it)"
        )


def labels(names: Sequence[str]) -> list[str]:
    """The groups' names as a figure shows them: a name that is a path or a glob, its last
    path part without its glob wildcards and the separator before them (``results/ppo-*`` ->
    ``ppo``, ``a-[12]`` -> ``a``), other names as they are (a run id, a ``--group-by``
    match); the names as given where that leaves one empty or two alike."""
    short = [
        _GLOB.sub("", PurePath(name).name).strip("-_. ")
        if _GLOB.search(name) or "/" in name
        else name
        for name in names
    ]
    if any(not label for label in short) or len(set(short)) < len(short):
        return list(names)
    return short


def plot(results: Sequence[GroupResult], settings: Settings, path: Path) -> Path:
    """Draw ``results`` into ``path``, in the format of its suffix (one of :data:`FORMATS`);
    returns it.

    :raises PlotUnavailable: matplotlib is not installed.
    """
    try:
        import matplotlib
        from matplotlib.figure import Figure
    except ImportError as error:
        raise PlotUnavailable(path) from error
    suffix = path.suffix.lower()
    if suffix not in FORMATS:
        raise ValueError(f"{path}: expected one of {', '.join(FORMATS)}")
    names = list(results[0].final) if results else []
    shown = labels([result.name for result in results])
    figure = Figure(figsize=(WIDTH / DPI, HEIGHT / DPI), dpi=DPI, layout="constrained")
    grid = figure.add_gridspec(1, 1 + len(names), width_ratios=[3.0] + [1.0] * len(names))
    _curves(figure.add_subplot(grid[0, 0]), results, shown, settings)
    for column, name in enumerate(names, start=1):
        panel = figure.add_subplot(grid[0, column])
        _intervals(panel, name, results, shown if column == 1 else [""] * len(results), settings)
    buffer = io.BytesIO()
    with matplotlib.rc_context({"svg.fonttype": "none", "pdf.fonttype": 42}):
        figure.savefig(buffer, format=suffix[1:], dpi=DPI, metadata=_METADATA[suffix])
    path.parent.mkdir(parents=True, exist_ok=True)
    return atomic_write(path, lambda file: file.write(buffer.getvalue()))


def _curves(
    curves: Any, results: Sequence[GroupResult], shown: list[str], settings: Settings
) -> None:
    """Each group's mean learning curve with its confidence band, on the axes ``curves``."""
    for index, (result, label) in enumerate(zip(results, shown, strict=True)):
        if result.curve is None:
            continue
        color = f"C{index % 10}"
        curve = result.curve
        curves.plot(curve.steps, curve.mean, color=color, label=label)
        curves.fill_between(curve.steps, curve.low, curve.high, color=color, alpha=0.2)
    curves.set_xlabel("step")
    curves.set_ylabel(settings.stat)
    curves.set_title(f"Learning curves: mean, {settings.confidence:.0%} interval")
    if any(result.curve is not None for result in results):
        curves.legend(loc="best")


def _intervals(
    panel: Any, name: str, results: Sequence[GroupResult], ticks: list[str], settings: Settings
) -> None:
    """One aggregate's panel: each group's interval as a bar, its estimate as a black tick
    (and a diamond where the interval has no width), ``ticks`` naming the groups."""
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
        if estimate.high == estimate.low:
            panel.plot(
                estimate.value,
                index,
                marker="D",
                markersize=8,
                color=color,
                markeredgecolor="black",
            )
    lows = [result.final[name].low for result in results]
    highs = [result.final[name].high for result in results]
    if lows:
        span = max(highs) - min(lows) or max(1.0, abs(max(highs))) * 0.1
        panel.set_xlim(min(lows) - 0.1 * span, max(highs) + 0.1 * span)
    panel.set_yticks(range(len(results)), ticks)
    panel.set_ylim(len(results) - 0.5, -0.5)  # the first group on top
    panel.set_title(name)
    gap = name == "optimality gap"
    panel.set_xlabel(f"short of {settings.target:g}" if gap else "final score")
