"""Groups of runs compared: each group's final-score aggregates and its learning curve.

A run's **final score** is the mean of its last ``last`` values of the stat (the last value by
default), one per behavior that records it.  A group's **learning curve** is the mean of its
runs' curves at common steps: the steps any of its runs logged between the latest first step
and the earliest last step of its runs (at most :data:`MAX_CURVE_POINTS` of them, evenly
picked), each run's value at a step it did not log interpolated linearly between its
neighbours.  Each group draws its resamples from a generator of its own seeded with ``seed``,
so its intervals depend only on its runs, ``reps`` and ``seed``: not on the other groups.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence

import attrs
import numpy as np
from numpy.typing import NDArray

from evtrain.compare.reading import Series
from evtrain.compare.statistics import (
    CurveEstimate,
    Estimate,
    aggregates,
    bootstrap_aggregates,
    bootstrap_curve,
)

MAX_CURVE_POINTS = 200
"""The most steps a group's learning curve has (printed, plotted and resampled)."""


@attrs.frozen(kw_only=True)
class GroupResult:
    """What ``evtrain compare`` reports of one group."""

    name: str
    series: tuple[Series, ...]
    """Task after task (behaviors by name), runs in the order found within a task."""
    scores: NDArray[np.float64]
    """Each series' final score, in the order of :attr:`series`."""
    final: dict[str, Estimate]
    """Each aggregate of :attr:`scores` with its stratified bootstrap interval."""
    curve: CurveEstimate | None
    """``None`` when the runs share no step (one ended before another began)."""

    @property
    def tasks(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(s.task for s in self.series))


@attrs.frozen(kw_only=True)
class Settings:
    """How the groups are compared (``evtrain compare``'s options)."""

    stat: str
    last: int = 1
    reps: int = 2000
    confidence: float = 0.95
    seed: int = 0
    target: float | None = None
    """The score the optimality gap is measured from; ``None``: no optimality gap."""


def compare_group(name: str, series: Sequence[Series], settings: Settings) -> GroupResult:
    """One group's final-score aggregates and learning curve."""
    ordered = tuple(sorted(series, key=lambda s: s.task))  # stable: runs keep their order
    sizes = [len(list(runs)) for _, runs in itertools.groupby(ordered, key=lambda s: s.task)]
    rng = np.random.default_rng(settings.seed)
    scores = final_scores(ordered, settings.last)
    final = bootstrap_aggregates(
        scores,
        sizes,
        aggregates(settings.target, sizes),
        reps=settings.reps,
        confidence=settings.confidence,
        rng=rng,
    )
    common = common_curve(ordered)
    curve = None
    if common is not None:
        steps, values = common
        curve = bootstrap_curve(
            steps, values, sizes, reps=settings.reps, confidence=settings.confidence, rng=rng
        )
    return GroupResult(name=name, series=ordered, scores=scores, final=final, curve=curve)


def final_scores(series: Sequence[Series], last: int = 1) -> NDArray[np.float64]:
    """Each series' mean of its last ``last`` values (all of them when it has fewer)."""
    if last < 1:
        raise ValueError(f"last must be 1 or more, got {last}")
    return np.asarray([s.values[-last:].mean() for s in series], dtype=np.float64)


def common_curve(
    series: Sequence[Series], max_points: int = MAX_CURVE_POINTS
) -> tuple[NDArray[np.int64], NDArray[np.float64]] | None:
    """The common steps of ``series`` and each one's values there (``[series, steps]``), or
    ``None`` when they share no step range."""
    first = max(int(s.steps[0]) for s in series)
    end = min(int(s.steps[-1]) for s in series)
    if first > end:
        return None
    every = np.unique(np.concatenate([s.steps for s in series]))
    steps = every[(every >= first) & (every <= end)]
    if len(steps) > max_points:
        picked = np.unique(np.round(np.linspace(0, len(steps) - 1, max_points)).astype(np.int64))
        steps = steps[picked]
    values = np.stack([np.interp(steps, s.steps, s.values) for s in series])
    return steps.astype(np.int64), values.astype(np.float64)
