"""`evtrain compare`'s statistics against hand computations on fixed data: the interquartile
mean, the optimality gap, the stratified bootstrap and its percentile interval, the learning
curve of several runs (docs/compare.md)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from evtrain.compare.comparison import Settings, common_curve, compare_group, final_scores
from evtrain.compare.reading import Series
from evtrain.compare.statistics import (
    aggregates,
    bootstrap_aggregates,
    bootstrap_curve,
    iqm,
    mean,
    median,
    optimality_gap,
    percentile_interval,
    stratified_indices,
)

SCORES = [10.0, 1.0, 7.0, 3.0, 100.0, 5.0, 2.0, 8.0]
"""Sorted: 1 2 3 5 7 8 10 100."""


def test_iqm_drops_a_quarter_of_the_scores_at_each_end_as_trim_mean_does() -> None:
    assert iqm(SCORES) == (3 + 5 + 7 + 8) / 4  # 8 scores: 2 dropped at each end
    assert iqm([4.0, 1.0, 3.0, 2.0, 5.0]) == (2 + 3 + 4) / 3  # int(0.25 * 5) = 1 at each end
    assert iqm([1.0, 2.0, 3.0]) == 2.0  # fewer than 4: none dropped
    assert iqm([[1.0, 2.0, 3.0, 4.0], [0.0, 0.0, 0.0, 8.0]]).tolist() == [2.5, 0.0]  # per row
    # 13 scores: int(3.25) = 3 dropped at each end, the middle 7 kept (0..12 shuffled)
    assert iqm([7.0, 12.0, 0.0, 5.0, 3.0, 9.0, 1.0, 11.0, 4.0, 8.0, 2.0, 10.0, 6.0]) == 6.0


def test_mean_median_and_optimality_gap_of_fixed_scores() -> None:
    assert mean(SCORES) == 136 / 8
    # One task: the median over tasks of the task's mean is that mean (rliable's), not 6.
    assert median(SCORES) == 136 / 8
    # min(score, 6): 6 1 6 3 6 5 2 6, their mean 35 / 8
    assert optimality_gap(6.0)(np.asarray(SCORES)) == 6 - 35 / 8
    assert list(aggregates()) == ["IQM", "mean", "median"]
    assert list(aggregates(target=1.0)) == ["IQM", "mean", "median", "optimality gap"]


THREE_TASKS = [1.0, 2.0, 9.0, 4.0, 6.0, 30.0, 40.0, 50.0, 0.0]
"""Task A: 1 2 9 (its mean 4); B: 4 6 (mean 5); C: 30 40 50 0 (mean 30)."""
SIZES = [3, 2, 4]


def test_the_four_aggregates_are_rliables_on_tasks_of_unequal_runs() -> None:
    # rliable's definitions on a (runs x tasks) matrix: aggregate_iqm trims all scores pooled,
    # aggregate_mean and aggregate_median take each task's mean over its runs first,
    # aggregate_optimality_gap pools all scores.  Worked by hand on THREE_TASKS:
    # - IQM: 9 scores sorted 0 1 2 4 6 9 30 40 50, int(0.25 * 9) = 2 dropped at each end:
    #   (2 + 4 + 6 + 9 + 30) / 5 = 10.2;
    # - mean: of the task means 4, 5, 30: 39 / 3 = 13 (the pooled mean would be 142 / 9);
    # - median: of the task means 4, 5, 30: 5 (the pooled median would be 6);
    # - optimality gap to 10: min(score, 10) = 1 2 9 4 6 10 10 10 0, summing to 52:
    #   10 - 52 / 9 = 38 / 9.
    chosen = aggregates(target=10.0, sizes=SIZES)
    scores = np.asarray(THREE_TASKS)
    found = {name: float(function(scores)) for name, function in chosen.items()}
    assert found == pytest.approx(
        {"IQM": 10.2, "mean": 13.0, "median": 5.0, "optimality gap": 38 / 9}
    )
    # Two tasks (A, B): the median of an even count is the mean of the middle two, (4 + 5) / 2.
    assert float(median(THREE_TASKS[:5], [3, 2])) == 4.5
    # Row by row, as on bootstrap resamples [reps, runs]: the second row's task means 1 1 1.
    rows = np.asarray([THREE_TASKS, [1.0] * 9])
    assert median(rows, SIZES).tolist() == [5.0, 1.0]
    assert mean(rows, SIZES).tolist() == [13.0, 1.0]


def test_percentile_interval_interpolates_linearly_between_samples() -> None:
    low, high = percentile_interval([5.0, 1.0, 4.0, 2.0, 3.0], 0.5)  # 25 % and 75 %
    assert (float(low), float(high)) == (2.0, 4.0)
    low, high = percentile_interval([1.0, 2.0, 3.0, 4.0, 5.0], 0.9)  # 5 %: 0.2 of the way
    assert [float(low), float(high)] == pytest.approx([1.2, 4.8])


def test_bootstrap_with_a_fixed_seed_is_the_hand_computed_one() -> None:
    indices = stratified_indices([4], 4, np.random.default_rng(0))
    assert indices.tolist() == [[3, 2, 2, 1], [1, 0, 0, 0], [0, 3, 2, 3], [2, 2, 3, 2]]
    # scores 1 2 3 4 at those indices: means 3.0, 1.25, 3.0, 3.25; sorted 1.25 3 3 3.25.
    # A 50 % interval: the 25th percentile at 0.75 of the way from the first to the second,
    # the 75th at 0.25 of the way from the third to the fourth.
    estimate = bootstrap_aggregates(
        [1.0, 2.0, 3.0, 4.0],
        [4],
        {"mean": mean},
        reps=4,
        confidence=0.5,
        rng=np.random.default_rng(0),
    )["mean"]
    assert estimate.value == 2.5
    assert estimate.low == 1.25 + 0.75 * (3.0 - 1.25)
    assert estimate.high == 3.0 + 0.25 * (3.25 - 3.0)


def test_the_same_seed_gives_the_same_intervals_and_they_hold_the_point_estimate() -> None:
    scores = [12.0, 15.0, 9.0, 30.0, 14.0, 11.0, 16.0, 13.0, 10.0, 20.0]

    def estimates(seed: int) -> dict[str, tuple[float, float, float]]:
        found = bootstrap_aggregates(
            scores,
            [10],
            aggregates(target=15.0),
            reps=2000,
            confidence=0.95,
            rng=np.random.default_rng(seed),
        )
        return {name: (e.value, e.low, e.high) for name, e in found.items()}

    first = estimates(3)
    assert estimates(3) == first
    assert estimates(4) != first
    assert first["IQM"][0] == (11 + 12 + 13 + 14 + 15 + 16) / 6
    for value, low, high in first.values():
        assert low <= value <= high
        assert low < high


def test_stratified_resamples_draw_each_task_from_its_own_runs() -> None:
    indices = stratified_indices([2, 3], 500, np.random.default_rng(0))
    assert indices.shape == (500, 5)
    assert set(indices[:, :2].ravel()) == {0, 1}
    assert set(indices[:, 2:].ravel()) == {2, 3, 4}
    # Task A scores 0, 0; task B 10, 20, 30.  Every stratified resample holds 2 runs of A and
    # 3 of B, so its mean is between (0 + 0 + 3 x 10) / 5 = 6 and (3 x 30) / 5 = 18 ...
    scores = np.asarray([0.0, 0.0, 10.0, 20.0, 30.0])
    stratified = scores[indices].mean(axis=1)
    assert stratified.min() >= 6 and stratified.max() <= 18
    # ... where resampling all five runs together also draws more of A (or all of B).
    pooled = scores[stratified_indices([5], 500, np.random.default_rng(0))].mean(axis=1)
    assert pooled.min() < 6 and pooled.max() > 18
    with pytest.raises(ValueError, match="at least one run"):
        stratified_indices([2, 0], 10, np.random.default_rng(0))


def test_a_curves_interval_is_the_mean_of_resampled_whole_runs() -> None:
    values = np.asarray([[0.0, 10.0, 5.0], [2.0, 20.0, 5.0], [4.0, 60.0, 5.0]])
    curve = bootstrap_curve(
        [100, 200, 300], values, [3], reps=1000, confidence=0.9, rng=np.random.default_rng(5)
    )
    assert curve.steps.tolist() == [100, 200, 300]
    assert curve.mean.tolist() == [2.0, 30.0, 5.0]
    # The same resamples, drawn again, averaged the long way: whole runs, curve and all.
    resampled = values[stratified_indices([3], 1000, np.random.default_rng(5))].mean(axis=1)
    low, high = np.percentile(resampled, [5, 95], axis=0)
    assert curve.low == pytest.approx(low) and curve.high == pytest.approx(high)
    assert curve.low[2] == curve.high[2] == 5.0  # every run at 5: no spread
    assert np.all(curve.low <= curve.mean) and np.all(curve.mean <= curve.high)


def series(run: str, steps: list[int], values: list[float], task: str = "CartPole") -> Series:
    return Series(
        run=run,
        task=task,
        source=Path(run),
        steps=np.asarray(steps, dtype=np.int64),
        values=np.asarray(values, dtype=np.float64),
    )


def test_common_steps_interpolate_each_run_between_its_own_steps() -> None:
    a = series("a", [0, 10, 20, 30], [0.0, 10.0, 20.0, 30.0])
    b = series("b", [5, 15, 25], [1.0, 3.0, 5.0])
    common = common_curve([a, b])
    assert common is not None
    steps, values = common
    assert steps.tolist() == [5, 10, 15, 20, 25]  # from the latest first to the earliest last
    assert values.tolist() == [[5.0, 10.0, 15.0, 20.0, 25.0], [1.0, 2.0, 3.0, 4.0, 5.0]]
    assert common_curve([a, series("late", [40, 50], [1.0, 2.0])]) is None
    long = series("long", list(range(0, 1001, 2)), [1.0] * 501)  # 501 steps: 11 evenly picked
    thinned = common_curve([long], max_points=11)
    assert thinned is not None and thinned[0].tolist() == list(range(0, 1001, 100))


def test_final_score_is_the_mean_of_the_last_values() -> None:
    runs = [series("a", [1, 2, 3], [1.0, 2.0, 6.0]), series("b", [1], [7.0])]
    assert final_scores(runs).tolist() == [6.0, 7.0]
    assert final_scores(runs, last=2).tolist() == [4.0, 7.0]  # b has one value only


def test_a_group_of_two_tasks_is_resampled_task_by_task() -> None:
    runs = [
        series("a1", [10, 20], [0.0, 0.0], task="A"),
        series("a2", [10, 20], [0.0, 0.0], task="A"),
        series("b1", [10, 20], [5.0, 10.0], task="B"),
        series("b2", [10, 20], [5.0, 20.0], task="B"),
        series("b3", [10, 20], [5.0, 30.0], task="B"),
    ]
    result = compare_group("both", runs, Settings(stat="x", reps=500))
    assert result.tasks == ("A", "B")
    assert result.scores.tolist() == [0.0, 0.0, 10.0, 20.0, 30.0]
    # The mean of the task means 0 and 20; every resample's A mean is 0 and its B mean
    # between 10 and 30, so its mean is between 5 and 15.
    mean_estimate = result.final["mean"]
    assert mean_estimate.value == 10.0
    assert 5.0 <= mean_estimate.low <= 10.0 <= mean_estimate.high <= 15.0
    assert result.curve is not None and result.curve.mean.tolist() == [3.0, 12.0]
    # Another group's presence changes nothing: each group draws from its own seeded generator.
    again = compare_group("both", runs, Settings(stat="x", reps=500))
    assert again.final == result.final
