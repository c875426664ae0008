from __future__ import annotations

import threading
import time

import pytest

from evtrain import Bus, StatsEvent, StatsSummary, signals
from tests.helpers import Gate, stats_event


def fill_behind_gate(bus: Bus, overflow: str, steps: range) -> Gate:
    """Connect a gated subscriber with capacity 2 and emit ``steps`` while it is stuck on 0."""
    gate = Gate()
    bus.connect(signals.stats, gate, capacity=2, overflow=overflow, name="gated")
    bus.emit(signals.stats, stats_event(0))
    assert gate.entered.wait(5)
    for step in steps:
        bus.emit(signals.stats, stats_event(step))
    return gate


def test_drop_newest_keeps_the_first_events(bus: Bus) -> None:
    gate = fill_behind_gate(bus, "drop_newest", range(1, 6))
    gate.open.set()
    bus.flush()
    assert gate.steps == [0, 1, 2]
    assert bus.metrics()["gated"].dropped == 3


def test_drop_oldest_keeps_the_last_events(bus: Bus) -> None:
    gate = fill_behind_gate(bus, "drop_oldest", range(1, 6))
    gate.open.set()
    bus.flush()
    assert gate.steps == [0, 4, 5]
    assert bus.metrics()["gated"].dropped == 3


def test_latest_keeps_newest_per_behavior_and_merges_stat_keys(bus: Bus) -> None:
    got: list[StatsEvent] = []
    entered, release = threading.Event(), threading.Event()

    def slow(event: StatsEvent) -> None:
        entered.set()
        release.wait(10)
        got.append(event)

    bus.connect(signals.stats, slow, capacity=10, overflow="latest", name="latest")
    bus.emit(signals.stats, stats_event(0, reward=0.0))
    assert entered.wait(5)
    bus.emit(signals.stats, stats_event(1, reward=1.0, loss=9.0))
    bus.emit(signals.stats, stats_event(2, reward=2.0))
    bus.emit(signals.stats, stats_event(3, category="Other", reward=3.0))
    release.set()
    bus.flush()
    assert [(e.category, e.step) for e in got] == [("CartPole", 0), ("CartPole", 2), ("Other", 3)]
    # step 2 had no loss: the replaced step-1 event's loss is carried over
    assert {k: v.mean for k, v in got[1].values.items()} == {"reward": 2.0, "loss": 9.0}
    assert bus.metrics()["latest"].dropped == 1


def test_block_waits_for_room_and_loses_nothing(bus: Bus) -> None:
    gate = Gate()
    bus.connect(signals.stats, gate, capacity=2, name="gated")
    bus.emit(signals.stats, stats_event(0))
    assert gate.entered.wait(5)

    def produce() -> None:
        for step in range(1, 6):
            bus.emit(signals.stats, stats_event(step))

    producer = threading.Thread(target=produce)
    producer.start()
    time.sleep(0.2)
    assert producer.is_alive()  # blocked on the full inbox
    gate.open.set()
    producer.join(5)
    bus.flush()
    assert gate.steps == [0, 1, 2, 3, 4, 5]
    assert bus.metrics()["gated"].dropped == 0


def test_drop_policy_bounds_memory_while_stalled(bus: Bus) -> None:
    gate = fill_behind_gate(bus, "drop_oldest", range(1, 10_001))
    metrics = bus.metrics()["gated"]
    assert metrics.queued == 2 and metrics.high_water == 2 and metrics.dropped == 9_998
    gate.open.set()


def test_unknown_overflow_is_refused(bus: Bus) -> None:
    with pytest.raises(ValueError, match="'sometimes' is not a valid Overflow"):
        bus.connect(signals.stats, print, overflow="sometimes")
    with pytest.raises(ValueError, match="capacity must be at least 1, got 0"):
        Bus(capacity=0)


def test_stats_event_payload_is_frozen() -> None:
    import attrs

    event = StatsEvent(category="C", step=1, values={"k": StatsSummary(full_dist=[1])})
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        event.step = 2  # type: ignore[misc]


@pytest.mark.parametrize("overflow", ["drop_oldest", "latest"])
def test_evicting_the_oldest_never_evicts_a_flush_marker(bus: Bus, overflow: str) -> None:
    gate = fill_behind_gate(bus, overflow, range(1, 3))
    flushed = threading.Event()

    def flush() -> None:
        bus.flush(timeout=5)
        flushed.set()

    flusher = threading.Thread(target=flush)
    flusher.start()
    time.sleep(0.05)  # its marker is queued behind steps 1-2
    for step in range(3, 6):  # the full inbox evicts its oldest events, not the marker
        bus.emit(signals.stats, stats_event(step, category=f"B{step}"))
    gate.open.set()
    flusher.join(10)
    assert flushed.is_set()


def test_close_counts_what_a_stuck_drop_newest_subscriber_left() -> None:
    bus = Bus()
    gate = fill_behind_gate(bus, "drop_newest", range(1, 6))
    report = bus.close(timeout=0.2)
    gate.open.set()
    # step 0 is stuck inside the subscriber, 1-2 queued, 3-5 dropped by the policy
    assert report.undelivered == {"gated": 3}
    assert bus.metrics()["gated"].dropped == 6
