"""The Prometheus writer's ``/metrics`` page, scraped over real HTTP on 127.0.0.1 while a
real bus feeds it, with prometheus_client's own parser reading the page."""

from __future__ import annotations

import urllib.request

import pytest

from evtrain import Bus, RunFinished, RunStarted, RunStatus, signals
from tests.helpers import stats_event

pytest.importorskip("prometheus_client")

from prometheus_client.parser import text_string_to_metric_families

from evtrain_writers.prometheus_writer import PrometheusOptions, PrometheusWriter


def scrape(port: int) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as page:
        text = page.read().decode()
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def test_metrics_are_served_and_advance_between_two_scrapes() -> None:
    writer = PrometheusWriter(PrometheusOptions(port=0))
    with Bus() as bus:
        bus.add_writer(writer, name="prometheus")
        bus.emit(signals.run_started, RunStarted(run_id="r"))
        bus.emit(signals.stats, stats_event(100, category="C", reward=1.5))
        bus.flush(timeout=10)
        port = writer.port
        assert port is not None
        first = scrape(port)
        bus.emit(signals.stats, stats_event(200, category="C", reward=2.5))
        bus.flush(timeout=10)
        second = scrape(port)
        bus.emit(signals.run_finished, RunFinished(run_id="r", status=RunStatus.COMPLETED))
        bus.flush(timeout=10)
    step = ("evtrain_step", (("behavior", "C"),))
    assert (first[step], second[step]) == (100.0, 200.0)
    rewards = [v for (name, labels), v in second.items() if name == "evtrain_stat"]
    assert 2.5 in rewards and 1.5 not in rewards  # the latest value of the stat
    assert any(name == "evtrain_last_step_timestamp_seconds" for name, _ in second)
    delivered = [
        v
        for (name, labels), v in second.items()
        if name.startswith("evtrain_bus_delivered") and ("subscriber", "prometheus") in labels
    ]
    assert delivered and delivered[0] >= 2  # bus metrics per subscriber
    assert any(name == "evtrain_bus_journaled" for name, _ in second)
    with pytest.raises(OSError):
        scrape(port)  # closed with the bus
