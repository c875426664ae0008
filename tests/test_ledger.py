"""The shared log behind default subscribers (``evtrain.bus.ledger``; docs/delivery.md, "How
emit delivers"): one append per emit whatever the number of subscribers, and what a
per-subscriber inbox promised still holds — order across signals, ``block`` losing nothing,
``block_timeout`` dropping and reporting, subscribers coming, going and disabled mid-run."""

from __future__ import annotations

import gc
import threading
import time
import weakref
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from evtrain import Bus, SaveEvent, StatsEvent, SubscriberStalled, signals
from evtrain.bus.inbox import Inbox
from evtrain.bus.ledger import TRIM_EVERY, Route
from evtrain.bus.log_inbox import LogInbox
from evtrain.bus.markers import Marker
from evtrain.testing import Recorder
from tests.helpers import stats_event

WAIT_S = 60.0
"""Generous bound for anything a test waits on; never reached when the code is right."""


def save_event(step: int) -> SaveEvent:
    return SaveEvent(category="CartPole", step=step, path=Path(f"CartPole-{step}.pt"))


def seen(events: list[Any]) -> list[tuple[str, int]]:
    return [(type(e).__name__, e.step) for e in events]


def emit_mixed(bus: Bus, steps: range) -> list[tuple[str, int]]:
    """Emit a stats event for most steps and a save event for every third; what was emitted."""
    emitted = []
    for step in steps:
        if step % 3:
            bus.emit(signals.stats, stats_event(step))
            emitted.append(("StatsEvent", step))
        else:
            bus.emit(signals.save, save_event(step))
            emitted.append(("SaveEvent", step))
    return emitted


def emit_stats(bus: Bus, steps: range) -> None:
    for step in steps:
        bus.emit(signals.stats, stats_event(step))


class Held:
    """A subscriber that records each event, then waits on the first until opened."""

    def __init__(self) -> None:
        self.entered = threading.Event()
        self.open = threading.Event()
        self.events: list[Any] = []

    def __call__(self, event: Any) -> None:
        self.events.append(event)
        self.entered.set()
        assert self.open.wait(WAIT_S)


class Counter:
    """Keeps the events it gets; ``reached`` is set once it has seen ``target`` of them."""

    def __init__(self, target: int) -> None:
        self.events: list[Any] = []
        self.target = target
        self.reached = threading.Event()

    def __call__(self, event: Any) -> None:
        self.events.append(event)
        if len(self.events) >= self.target:
            self.reached.set()


def wait_until(condition: Callable[[], bool]) -> None:
    """Poll ``condition`` until it holds (within ``WAIT_S``)."""
    deadline = time.monotonic() + WAIT_S
    while not condition():
        assert time.monotonic() < deadline, f"{condition} did not hold within {WAIT_S} s"
        time.sleep(0.01)


@pytest.fixture
def held() -> Iterator[Held]:
    subscriber = Held()
    yield subscriber
    subscriber.open.set()  # lets its worker thread end


def in_thread(fn: Callable[[], None]) -> Callable[[], None]:
    """Run ``fn`` on a daemon thread; the returned callable joins it within ``WAIT_S``."""
    thread = threading.Thread(target=fn, daemon=True)
    thread.start()

    def join() -> None:
        thread.join(WAIT_S)
        assert not thread.is_alive(), f"{fn} did not return within {WAIT_S} s"

    return join


def test_emit_appends_once_for_every_default_subscriber_of_a_route(bus: Bus) -> None:
    recorders = [Recorder() for _ in range(100)]
    for i, recorder in enumerate(recorders):
        bus.connect(signals.stats, recorder, name=f"r{i}")
    dropper = Recorder()
    bus.connect(signals.stats, dropper, overflow="drop_newest", name="dropper")
    targets = bus._routes.lookup(signals.stats, "CartPole")
    # The one subscriber with a policy of its own keeps its inbox; the hundred share one append.
    assert [type(t) for t in targets] == [Inbox, Route]
    route = targets[1]
    assert isinstance(route, Route) and len(route.token) == 100
    for step in range(50):
        bus.emit(signals.stats, stats_event(step))
    bus.flush()
    for recorder in [*recorders, dropper]:
        assert [e.step for e in recorder.events] == list(range(50))
    assert all(m.dropped == 0 and m.delivered == 50 for m in bus.metrics().values())


def test_each_subscriber_sees_its_signals_in_emit_order_across_signals(bus: Bus) -> None:
    both, stats_only, saves_only = Recorder(), Recorder(), Recorder()
    bus.connect([signals.stats, signals.save], both, name="both")
    bus.connect(signals.stats, stats_only, name="stats")  # the two routes name other readers
    bus.connect(signals.save, saves_only, name="saves")
    emitted = emit_mixed(bus, range(100))
    bus.flush()
    emitted += emit_mixed(bus, range(100, 3 * TRIM_EVERY))  # across trims of the log
    bus.flush()
    assert seen(both.events) == emitted
    assert seen(stats_only.events) == [e for e in emitted if e[0] == "StatsEvent"]
    assert seen(saves_only.events) == [e for e in emitted if e[0] == "SaveEvent"]


def test_block_on_two_signals_loses_nothing_and_keeps_order_behind_a_slow_subscriber(
    bus: Bus, held: Held
) -> None:
    bus.connect([signals.stats, signals.save], held, capacity=3, name="slow")
    others = Recorder()
    bus.connect(signals.stats, others, name="others")
    [sub] = [s for s in bus.subscriptions if s.name == "slow"]
    assert isinstance(sub.inbox, LogInbox)
    bus.emit(signals.stats, stats_event(1))
    assert held.entered.wait(WAIT_S)
    emitted: list[tuple[str, int]] = []
    done = in_thread(lambda: emitted.extend(emit_mixed(bus, range(2, 40))))
    # The producer waits on the full inbox (block_timeout is 10 s): let it through.
    held.open.set()
    done()
    bus.flush()
    assert seen(held.events) == [("StatsEvent", 1), *emitted]
    assert [e.step for e in others.events] == [1] + [s for s in range(2, 40) if s % 3]
    metrics = bus.metrics()["slow"]
    assert (metrics.delivered, metrics.dropped, metrics.queued) == (39, 0, 0)
    assert 1 <= metrics.high_water <= 3


class Flushed(Held):
    """A :class:`Held` whose ``flush`` hook (run when a flush marker passes) is recorded."""

    def flush(self) -> None:
        self.events.append("flush")


def test_a_marker_keeps_its_place_among_the_events_set_aside_for_a_full_subscriber(
    bus: Bus,
) -> None:
    slow = Flushed()
    bus.connect([signals.stats, signals.save], slow, capacity=3, name="slow")
    bus.connect(signals.stats, Recorder(), name="others")
    [sub] = [s for s in bus.subscriptions if s.name == "slow"]
    bus.emit(signals.stats, stats_event(1))
    assert slow.entered.wait(WAIT_S)
    next_waits = threading.Event()

    def produce() -> None:
        emit_mixed(bus, range(2, 5))  # fills its three places
        next_waits.set()
        emit_mixed(bus, range(5, 13))  # 5 waits for room

    done = in_thread(produce)
    assert next_waits.wait(WAIT_S)
    marker = Marker(1)
    sub.inbox.put_marker(marker)  # behind 2, 3, 4 (set aside, or still in the log), before 5
    slow.open.set()
    done()
    assert marker.wait(WAIT_S)
    bus.flush()
    steps = [e if e == "flush" else e.step for e in slow.events]
    assert steps == [1, 2, 3, 4, "flush", *range(5, 13), "flush"]


def test_a_stalled_subscriber_drops_and_reports_while_its_neighbour_gets_everything(
    held: Held,
) -> None:
    total = 3 * TRIM_EVERY
    with Bus(block_timeout=0.2, stall_timeout=600) as bus:
        stalls = Counter(1)
        bus.connect(signals.subscriber_stalled, stalls, name="stalls")
        bus.connect(signals.stats, held, capacity=2, name="hung")
        healthy = Counter(total + 1)
        bus.connect(signals.stats, healthy, name="healthy")
        bus.emit(signals.stats, stats_event(0))
        assert held.entered.wait(WAIT_S)  # step 0 in flight: the inbox holds 2 more
        # 1, 2 queued; 3 waits block_timeout and is dropped; the rest dropped at once.
        in_thread(lambda: emit_stats(bus, range(1, total + 1)))()
        assert healthy.reached.wait(WAIT_S)
        # The stalled subscriber does not hold the log (4,097 entries by now): once the healthy
        # one took everything, the next trim (at least every TRIM_EVERY appends) lets go of all
        # but the last TRIM_EVERY + 1 at most, and as many appended since.
        emit_stats(bus, range(total + 1, total + TRIM_EVERY + 2))
        total += TRIM_EVERY + 1
        assert len(bus._routes.ledger.entries) <= 2 * (TRIM_EVERY + 1)
        assert bus.metrics()["hung"].dropped == total - 2
        assert stalls.reached.wait(WAIT_S)
        [stall] = stalls.events
        assert isinstance(stall, SubscriberStalled)
        assert (stall.subscriber, stall.inbox_full, stall.stall_timeout) == ("hung", True, 0.2)
        # Once it takes again, block waits (and loses nothing) as before.
        held.open.set()
        bus.flush(timeout=WAIT_S)
        bus.emit(signals.stats, stats_event(total + 1))
        bus.flush(timeout=WAIT_S)
        assert [e.step for e in held.events] == [0, 1, 2, total + 1]
        metrics = bus.metrics()["hung"]
        assert (metrics.delivered, metrics.dropped, metrics.queued) == (4, total - 2, 0)
        assert bus.metrics()["healthy"].delivered == total + 2


def test_a_subscriber_on_a_rare_signal_does_not_keep_the_others_events(bus: Bus) -> None:
    saves, stats = Recorder(), Counter(3 * TRIM_EVERY)
    bus.connect(signals.save, saves, name="saves")
    bus.connect(signals.stats, stats, name="stats")
    bus.emit(signals.save, save_event(0))
    bus.flush()
    [sub] = [s for s in bus.subscriptions if s.name == "saves"]
    wait_until(lambda: sub.inbox.sleeping)  # idle 0.25 s: it sleeps until an event for it
    emit_stats(bus, range(1, 3 * TRIM_EVERY + 1))
    assert stats.reached.wait(WAIT_S)
    emit_stats(bus, range(3 * TRIM_EVERY + 1, 4 * TRIM_EVERY + 2))  # at least one trim
    assert len(bus._routes.ledger.entries) <= 2 * (TRIM_EVERY + 1)
    bus.emit(signals.save, save_event(4 * TRIM_EVERY + 2))
    bus.flush()
    assert [e.step for e in saves.events] == [0, 4 * TRIM_EVERY + 2]
    assert bus.metrics()["stats"].delivered == 4 * TRIM_EVERY + 1


def test_capacity_holds_for_a_subscriber_connected_after_the_log_ran_ahead(
    bus: Bus, held: Held
) -> None:
    for i in range(3):
        bus.connect(signals.stats, Recorder(), name=f"r{i}")
    for step in range(10):
        bus.emit(signals.stats, stats_event(step))
    bus.flush()
    bus.connect(signals.stats, held, capacity=1, block_timeout=0.2, name="one")
    bus.emit(signals.stats, stats_event(10))
    assert held.entered.wait(WAIT_S)
    bus.emit(signals.stats, stats_event(11))  # fills its one place
    bus.emit(signals.stats, stats_event(12))  # waits 0.2 s, then is dropped
    assert bus.metrics()["one"].dropped == 1
    held.open.set()
    bus.flush(timeout=WAIT_S)
    assert [e.step for e in held.events] == [10, 11]


def test_subscribers_connected_and_disconnected_mid_run(bus: Bus) -> None:
    first, late = Recorder(), Recorder()
    bus.connect(signals.stats, first, name="first")
    for step in range(10):
        bus.emit(signals.stats, stats_event(step))
    handle = bus.connect(signals.stats, late, name="late")
    [sub] = [s for s in bus.subscriptions if s.name == "late"]
    for step in range(10, 20):
        bus.emit(signals.stats, stats_event(step))
    handle.disconnect()
    assert bus._dispatcher.wait_ended(sub, WAIT_S)  # its task ended: it is abandoned
    for step in range(20, 20 + 2 * TRIM_EVERY):
        bus.emit(signals.stats, stats_event(step))
    bus.flush()
    assert [e.step for e in first.events] == list(range(20 + 2 * TRIM_EVERY))
    assert [e.step for e in late.events] == list(range(10, 20))
    metrics = bus.metrics()["late"]
    assert (metrics.delivered, metrics.dropped, metrics.queued) == (10, 0, 0)
    # Closed and no longer routed, it is let go of: the log no longer keeps a place for it.
    assert isinstance(sub.inbox, LogInbox)
    assert sub.inbox not in bus._routes.ledger.readers


def test_a_subscriber_disabled_mid_run_drops_and_counts_while_the_others_go_on() -> None:
    def failing(event: StatsEvent) -> None:
        raise ValueError("boom")

    with Bus(max_consecutive_failures=3) as bus:
        ok = Recorder()
        bus.connect(signals.stats, failing, name="failing")
        bus.connect(signals.stats, ok, name="ok")
        for step in range(10):
            bus.emit(signals.stats, stats_event(step))
        bus.flush()
        metrics = bus.metrics()["failing"]
        assert (metrics.failed, metrics.disabled, metrics.delivered) == (3, True, 3)
        assert metrics.dropped == 7
        assert [e.step for e in ok.events] == list(range(10))


def test_a_closed_bus_keeps_no_event_alive_and_its_counts_stand(tmp_path: Path) -> None:
    # The last entries (fewer than TRIM_EVERY) used to stay in the log after close, alive
    # through the readers' reference cycles until a full garbage collection, and each
    # subscription kept the payload it handled last. Default, own-queue and spool subscribers.
    gc.disable()  # freed by reference counting alone, or the test fails
    try:
        bus = Bus(journal_dir=tmp_path)
        bus.connect(signals.stats, lambda event: None, name="a")
        bus.connect((signals.stats, signals.save), lambda event: None, name="b")
        bus.connect(signals.stats, lambda event: None, name="own", overflow="drop_oldest")
        bus.connect(signals.stats, lambda event: None, name="spooled", overflow="spool")
        refs = []
        for step in range(10):
            event = stats_event(step, loss=float(step))
            refs.append(weakref.ref(event))
            bus.emit(signals.stats, event)
        del event
        bus.emit(signals.save, save_event(10))
        report = bus.close()
        assert report.undelivered == {}
        assert bus._routes.ledger.entries == []
        assert [ref() for ref in refs] == [None] * 10
        metrics = bus.metrics()
        assert (metrics["a"].delivered, metrics["a"].dropped) == (10, 0)
        assert (metrics["b"].delivered, metrics["b"].dropped) == (11, 0)
    finally:
        gc.enable()
