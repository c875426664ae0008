from __future__ import annotations

import threading

import pytest

from evtrain import Bus, StatsAggregationMethod, StatsEvent, StatsReporter, StatsSummary, signals
from evtrain.events.stats import StatsPropertyType
from evtrain.testing import Recorder

M = StatsAggregationMethod


@pytest.mark.parametrize(
    ("method", "expected"),
    [(M.AVERAGE, 2.0), (M.MOST_RECENT, 4), (M.SUM, 10), (M.HISTOGRAM, 2.0)],
)
def test_aggregated_value_follows_ml_agents(
    method: StatsAggregationMethod, expected: float
) -> None:
    bus = Bus()
    reporter = StatsReporter(bus, "Agent")
    for value in range(5):
        reporter.add_stat("key", value, method)
    summary = reporter.get_stats_summaries("key")
    assert summary.aggregated_value == expected
    bus.close()


def test_summary_statistics() -> None:
    summary = StatsSummary(full_dist=range(10))
    assert (summary.num, summary.mean, summary.sum) == (10, 4.5, 45.0)
    assert summary.std == pytest.approx(2.8722813232690143)  # numpy.std, ddof=0
    assert StatsSummary.empty().mean == 0.0 and StatsSummary.empty().std == 0.0
    assert StatsSummary.empty().aggregated_value == 0.0


def test_reporter_emits_one_event_per_period(bus: Bus) -> None:
    recorder = Recorder()
    bus.connect(signals.stats, recorder)
    reporter = StatsReporter(bus, "Walker")
    reporter.add_stat("Environment/Cumulative Reward", 1.0, M.HISTOGRAM)
    reporter.add_stat("Environment/Cumulative Reward", 3.0, M.HISTOGRAM)
    reporter.set_stat("Step", 100)
    reporter.set_stat("Step", 200)
    reporter.write_stats(200)
    reporter.add_stat("Losses/Policy Loss", 0.5)
    reporter.write_stats(400)
    assert reporter.write_stats(600) is None  # nothing recorded in that period
    bus.flush()
    first, second = recorder.of(StatsEvent)
    assert (first.category, first.step, second.step) == ("Walker", 200, 400)
    assert first.values["Environment/Cumulative Reward"] == StatsSummary(
        full_dist=[1.0, 3.0], aggregation_method=M.HISTOGRAM
    )
    assert first.values["Step"].aggregated_value == 200
    assert list(second.values) == ["Losses/Policy Loss"]


def test_reporter_skips_building_payload_without_listeners(bus: Bus) -> None:
    reporter = StatsReporter(bus, "Walker")
    reporter.add_stat("x", 1.0)
    assert reporter.write_stats(10) is None
    assert reporter.get_stats_summaries("x").num == 0  # the period still ended


def test_reporter_is_safe_under_concurrent_producers(bus: Bus) -> None:
    recorder = Recorder()
    bus.connect(signals.stats, recorder)
    reporter = StatsReporter(bus, "Agent")

    def produce() -> None:
        for _ in range(5000):
            reporter.add_stat("count", 1.0, M.SUM)

    threads = [threading.Thread(target=produce) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    reporter.write_stats(1)
    bus.flush()
    assert recorder.events[0].values["count"].aggregated_value == 20_000


def test_reporter_property_event(bus: Bus) -> None:
    recorder = Recorder()
    bus.connect(signals.hyperparameters, recorder)
    StatsReporter(bus, "Agent").add_property(StatsPropertyType.HYPERPARAMETERS, {"lr": 0.1})
    bus.flush()
    (event,) = recorder.events
    assert (event.category, event.property_type, event.value) == (
        "Agent",
        StatsPropertyType.HYPERPARAMETERS,
        {"lr": 0.1},
    )
