"""Aggregate scores of several runs, with confidence intervals, as rliable defines them.

Agarwal, Schwarzer, Castro, Courville and Bellemare, "Deep Reinforcement Learning at the Edge
of the Statistical Precipice", NeurIPS 2021 (https://arxiv.org/abs/2108.13264), and their
library rliable (archived in 2025), whose definitions these functions follow with numpy alone:

- the **interquartile mean** (IQM) of scores is the mean of all of them, every task's runs
  pooled, once the lowest and the highest 25 % are dropped: ``scipy.stats.trim_mean(scores,
  0.25, axis=None)``, which drops ``int(0.25 * n)`` scores at each end of the ``n`` sorted ones
  (rliable's ``aggregate_iqm``);
- the **mean** is the mean over tasks of each task's mean over its runs (rliable's
  ``aggregate_mean``), and the **median** the median over tasks of the same per-task means
  (rliable's ``aggregate_median``): with one task, the mean of its runs either way;
- the **optimality gap** is how far the scores, pooled, fall short of a target, ``target -
  mean(min(score, target))`` (rliable's ``aggregate_optimality_gap``, whose target is 1 for
  normalised scores);
- the **stratified bootstrap** draws, for every task (an environment: here a behavior) apart,
  as many runs as the task has, with replacement, and computes the aggregate of the whole
  draw; ``reps`` draws give its distribution, and the **percentile interval** of that
  distribution is the confidence interval (rliable's ``StratifiedBootstrap`` with
  ``confidence_interval_type="percentile"``).

Scores are laid out task after task in one array; ``sizes`` says how many runs each task has,
so a task may have more runs than another (rliable asks for as many; resampling within each
task needs no such rule).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence

import attrs
import numpy as np
from numpy.typing import ArrayLike, NDArray

Floats = NDArray[np.float64]
Aggregate = Callable[[Floats], Floats]
"""Scores ``[..., runs]`` to one number per row ``[...]``."""


def iqm(scores: ArrayLike) -> Floats:
    """The interquartile mean over the last axis, every run of every task pooled:
    ``scipy.stats.trim_mean(scores, 0.25)``."""
    ordered = np.sort(np.asarray(scores, dtype=np.float64), axis=-1)
    count = ordered.shape[-1]
    cut = int(0.25 * count)
    return np.asarray(ordered[..., cut : count - cut].mean(axis=-1), dtype=np.float64)


def task_means(scores: ArrayLike, sizes: Sequence[int] | None = None) -> Floats:
    """Each task's mean over its runs, over the last axis of ``scores`` (runs task after task,
    ``sizes[t]`` runs of task ``t``; ``None``: one task): ``[..., tasks]``."""
    values = np.asarray(scores, dtype=np.float64)
    counts = [values.shape[-1]] if sizes is None else list(sizes)
    starts = np.concatenate([[0], np.cumsum(counts)[:-1]]).astype(np.intp)
    sums = np.add.reduceat(values, starts, axis=-1)
    return np.asarray(sums / np.asarray(counts, dtype=np.float64), dtype=np.float64)


def mean(scores: ArrayLike, sizes: Sequence[int] | None = None) -> Floats:
    """The mean over tasks of each task's mean over its runs (rliable's ``aggregate_mean``),
    over the last axis; ``sizes`` as in :func:`task_means`."""
    return np.asarray(task_means(scores, sizes).mean(axis=-1), dtype=np.float64)


def median(scores: ArrayLike, sizes: Sequence[int] | None = None) -> Floats:
    """The median over tasks of each task's mean over its runs (rliable's
    ``aggregate_median``: of an even count of tasks, the mean of the two middle ones), over the
    last axis; ``sizes`` as in :func:`task_means`."""
    return np.asarray(np.median(task_means(scores, sizes), axis=-1), dtype=np.float64)


def optimality_gap(target: float) -> Aggregate:
    """The optimality gap over the last axis: ``target - mean(min(scores, target))``."""

    def gap(scores: Floats) -> Floats:
        return np.asarray(target - np.minimum(scores, target).mean(axis=-1), dtype=np.float64)

    return gap


def aggregates(
    target: float | None = None, sizes: Sequence[int] | None = None
) -> dict[str, Aggregate]:
    """The aggregates ``evtrain compare`` reports, by name, in the order it prints them, of
    scores laid out task after task as ``sizes`` says (``None``: one task); the optimality gap
    only when a ``target`` score is given."""
    chosen: dict[str, Aggregate] = {
        "IQM": iqm,
        "mean": functools.partial(mean, sizes=sizes),
        "median": functools.partial(median, sizes=sizes),
    }
    if target is not None:
        chosen["optimality gap"] = optimality_gap(target)
    return chosen


@attrs.frozen(kw_only=True)
class Estimate:
    """A point estimate and its confidence interval."""

    value: float
    """The aggregate of the scores themselves."""
    low: float
    high: float


def stratified_indices(
    sizes: Sequence[int], reps: int, rng: np.random.Generator
) -> NDArray[np.intp]:
    """``reps`` stratified resamples of runs laid out task after task: row ``r`` holds, for
    each task of ``sizes[t]`` runs, ``sizes[t]`` indices drawn with replacement among that
    task's own runs.  Tasks are drawn in order, each as one ``rng.integers`` call."""
    if not sizes or min(sizes) < 1:
        raise ValueError(f"every task needs at least one run, got sizes {list(sizes)}")
    parts = []
    offset = 0
    for size in sizes:
        parts.append(offset + rng.integers(0, size, size=(reps, size)))
        offset += size
    return np.concatenate(parts, axis=1)


def percentile_interval(samples: ArrayLike, confidence: float) -> tuple[Floats, Floats]:
    """The percentile interval of bootstrap ``samples`` (first axis: the resamples): their
    ``(1 - confidence) / 2`` and ``(1 + confidence) / 2`` quantiles, linearly interpolated
    (``np.percentile``'s default, as rliable's ``arch`` backend computes it)."""
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be between 0 and 1, got {confidence}")
    tail = 100 * (1 - confidence) / 2
    low, high = np.percentile(np.asarray(samples, dtype=np.float64), [tail, 100 - tail], axis=0)
    return np.asarray(low, dtype=np.float64), np.asarray(high, dtype=np.float64)


def bootstrap_aggregates(
    scores: ArrayLike,
    sizes: Sequence[int],
    functions: Mapping[str, Aggregate],
    *,
    reps: int,
    confidence: float,
    rng: np.random.Generator,
) -> dict[str, Estimate]:
    """Each aggregate of ``scores`` (one per run, task after task as ``sizes`` says) with its
    stratified bootstrap confidence interval.  Every aggregate is computed on the same
    ``reps`` resamples."""
    values = np.asarray(scores, dtype=np.float64)
    if values.shape != (sum(sizes),):
        raise ValueError(f"expected {sum(sizes)} scores (sizes {list(sizes)}), got {values.shape}")
    resampled = values[stratified_indices(sizes, reps, rng)]  # [reps, runs]
    estimates = {}
    for name, function in functions.items():
        low, high = percentile_interval(function(resampled), confidence)
        estimates[name] = Estimate(value=float(function(values)), low=float(low), high=float(high))
    return estimates


@attrs.frozen(kw_only=True)
class CurveEstimate:
    """The mean learning curve of several runs with its pointwise confidence band."""

    steps: NDArray[np.int64]
    mean: Floats
    low: Floats
    high: Floats


def bootstrap_curve(
    steps: ArrayLike,
    values: ArrayLike,
    sizes: Sequence[int],
    *,
    reps: int,
    confidence: float,
    rng: np.random.Generator,
) -> CurveEstimate:
    """The mean over runs of ``values`` (``[runs, steps]``, runs task after task) at each step,
    with a percentile interval from stratified resamples of whole runs (a resampled run brings
    its whole curve, as in rliable's sample-efficiency curves).

    A resample's mean is its runs' counts times their curves, so memory stays ``reps x
    (runs + steps)`` however long the curves are.
    """
    curves = np.asarray(values, dtype=np.float64)
    runs = curves.shape[0]
    indices = stratified_indices(sizes, reps, rng)
    counts = np.zeros((reps, runs))
    np.add.at(counts, (np.arange(reps)[:, None], indices), 1.0)
    low, high = percentile_interval(counts @ curves / runs, confidence)
    return CurveEstimate(
        steps=np.asarray(steps, dtype=np.int64), mean=curves.mean(axis=0), low=low, high=high
    )
