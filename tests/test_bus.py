from __future__ import annotations

import gc
import logging
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from evtrain import (
    Bus,
    BusClosedError,
    BusTimeoutError,
    SaveEvent,
    StatsEvent,
    StatsSummary,
    StatsWriter,
    SubscriberError,
    SubscriberFailed,
    signals,
)
from evtrain.bus.inbox import Overflow, SubscriberSettings
from evtrain.events.stats import StatsPropertyType
from evtrain.testing import Recorder
from tests.helpers import Gate, stats_event


def test_emit_returns_without_running_subscriber_code(bus: Bus) -> None:
    gate = Gate()
    threads: list[str] = []
    bus.connect(signals.stats, gate)
    bus.connect(signals.stats, lambda e: threads.append(threading.current_thread().name))
    bus.emit(signals.stats, stats_event(1))  # returns although the gate is closed
    assert gate.entered.wait(5)
    assert gate.steps == []
    gate.open.set()
    bus.flush()
    assert gate.steps == [1]
    assert threads and threads[0] != threading.current_thread().name


def test_each_subscriber_sees_emission_order(bus: Bus) -> None:
    first, second = Recorder(), Recorder()
    bus.connect(signals.stats, first, name="first")
    bus.connect(signals.stats, second, name="second")
    for step in range(5000):
        bus.emit(signals.stats, stats_event(step))
    bus.flush()
    assert [e.step for e in first.events] == list(range(5000))
    assert [e.step for e in second.events] == list(range(5000))


def test_concurrent_producers_keep_each_producers_order(bus: Bus) -> None:
    recorder = Recorder()
    bus.connect(signals.stats, recorder, capacity=64)  # small: producers also block

    def produce(producer: int) -> None:
        for step in range(2000):
            bus.emit(signals.stats, stats_event(step, category=f"p{producer}"))

    threads = [threading.Thread(target=produce, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    bus.flush()
    assert len(recorder.events) == 8000
    for producer in range(4):
        steps = [e.step for e in recorder.events if e.category == f"p{producer}"]
        assert steps == list(range(2000))


def test_raising_subscriber_is_isolated_and_reported(
    bus: Bus, caplog: pytest.LogCaptureFixture
) -> None:
    good, failures = Recorder(), Recorder()

    def broken(event: StatsEvent) -> None:
        raise ValueError(f"cannot handle step {event.step}")

    bus.connect(signals.stats, broken, name="broken")
    bus.connect(signals.stats, good, name="good")
    bus.connect(signals.subscriber_failed, failures, name="failures")
    with caplog.at_level(logging.ERROR, logger="evtrain.bus"):
        for step in range(3):
            bus.emit(signals.stats, stats_event(step))
        bus.flush()
    assert [e.step for e in good.events] == [0, 1, 2]
    assert failures.events == [
        SubscriberFailed(
            subscriber="broken",
            signal="stats",
            error=f"cannot handle step {step}",
            error_type="ValueError",
            count=step + 1,
            disabled=False,
        )
        for step in range(3)
    ]
    # The first failure is logged with its traceback; the next two within 10 s are not.
    logged = [r for r in caplog.records if "'broken'" in r.getMessage()]
    assert len(logged) == 1
    assert logged[0].exc_info is not None and logged[0].exc_info[0] is ValueError
    metrics = bus.metrics()
    assert (metrics["broken"].failed, metrics["broken"].delivered) == (3, 3)
    assert (metrics["good"].failed, metrics["good"].delivered) == (0, 3)


def test_subscriber_disabled_after_consecutive_failures() -> None:
    failures = Recorder()
    calls: list[int] = []

    def flaky(event: StatsEvent) -> None:
        calls.append(event.step)
        if event.step != 1:
            raise RuntimeError("down")

    with Bus(max_consecutive_failures=3) as bus:
        bus.connect(signals.stats, flaky, name="flaky")
        bus.connect(signals.subscriber_failed, failures)
        for step in range(10):
            bus.emit(signals.stats, stats_event(step))
        bus.flush()
        # step 1 succeeds and resets the run of failures: 0 fails, 1 ok, 2,3,4 fail -> disabled
        assert calls == [0, 1, 2, 3, 4]
        assert [f.disabled for f in failures.events] == [False, False, False, True]
        metrics = bus.metrics()["flaky"]
        assert metrics.disabled and metrics.failed == 4 and metrics.dropped == 5


def test_raise_policy_surfaces_error_on_producer_thread() -> None:
    bus = Bus(on_error="raise")
    bus.connect(signals.stats, lambda e: 1 / 0, name="divider")
    bus.emit(signals.stats, stats_event(1))
    with pytest.raises(SubscriberError, match="'divider' raised ZeroDivisionError") as info:
        bus.flush()
    assert isinstance(info.value.__cause__, ZeroDivisionError)
    bus.close()


def test_close_drains_every_inbox_then_closes_writers() -> None:
    handled: list[int] = []
    order: list[str] = []

    class Slow(StatsWriter):
        def write_stats(self, category: str, values: Mapping[str, StatsSummary], step: int) -> None:
            time.sleep(0.001)
            handled.append(step)

        def flush(self) -> None:
            order.append("flush")

        def close(self) -> None:
            order.append(f"close after {len(handled)}")

    bus = Bus()
    bus.add_writer(Slow())
    for step in range(300):
        bus.emit(signals.stats, stats_event(step))
    report = bus.close()
    assert handled == list(range(300))
    assert order == ["flush", "close after 300"]
    assert report.clean
    assert bus.close() is report  # idempotent
    with pytest.raises(BusClosedError):
        bus.emit(signals.stats, stats_event(301))
    with pytest.raises(BusClosedError):
        bus.connect(signals.stats, print)


def test_close_with_timeout_reports_undelivered() -> None:
    gate = Gate()
    bus = Bus()
    bus.connect(signals.stats, gate, name="stuck")
    for step in range(5):
        bus.emit(signals.stats, stats_event(step))
    assert gate.entered.wait(5)
    report = bus.close(timeout=0.2)
    gate.open.set()
    assert report.timed_out == ("stuck",)
    # step 0 is still inside the subscriber, steps 1-4 are queued behind it: none finished
    assert report.undelivered == {"stuck": 5}
    assert not report.clean


def test_flush_timeout_names_who_is_behind(bus: Bus) -> None:
    gate = Gate()
    bus.connect(signals.stats, gate, name="stuck")
    bus.emit(signals.stats, stats_event(0))
    bus.emit(signals.stats, stats_event(1))
    assert gate.entered.wait(5)
    with pytest.raises(BusTimeoutError) as info:
        bus.flush(timeout=0.1)
    assert info.value.pending == ("stuck",)
    gate.open.set()
    bus.flush()
    assert gate.steps == [0, 1]


def test_sender_filter_selects_one_behavior(bus: Bus) -> None:
    walker, everything = Recorder(), Recorder()
    bus.connect(signals.stats, walker, sender="Walker")
    bus.connect(signals.stats, everything)
    bus.emit(signals.stats, stats_event(1, category="Walker"))
    bus.emit(signals.stats, stats_event(2, category="CartPole"))
    bus.flush()
    assert [e.category for e in walker.events] == ["Walker"]
    assert [e.category for e in everything.events] == ["Walker", "CartPole"]
    assert bus.has_receivers(signals.stats, "Walker")
    assert not bus.has_receivers(signals.save, "Walker")


def test_async_subscribers_are_awaited_in_order(bus: Bus) -> None:
    got: list[tuple[str, int]] = []

    async def coroutine_function(event: StatsEvent) -> None:
        got.append(("function", event.step))

    class AsyncCallable:
        async def __call__(self, event: StatsEvent) -> None:
            got.append(("object", event.step))

    bus.connect(signals.stats, coroutine_function)
    bus.connect(signals.stats, AsyncCallable())
    for step in range(3):
        bus.emit(signals.stats, stats_event(step))
    bus.flush()
    assert [s for kind, s in got if kind == "function"] == [0, 1, 2]
    assert [s for kind, s in got if kind == "object"] == [0, 1, 2]


def test_async_subscriber_failure_is_isolated(bus: Bus) -> None:
    failures = Recorder()

    async def broken(event: StatsEvent) -> None:
        raise KeyError("missing")

    bus.connect(signals.stats, broken, name="async-broken")
    bus.connect(signals.subscriber_failed, failures)
    bus.emit(signals.stats, stats_event(1))
    bus.flush()
    assert [(f.subscriber, f.error_type) for f in failures.events] == [("async-broken", "KeyError")]


def test_subscribers_are_held_strongly(bus: Bus) -> None:
    got: list[int] = []
    bus.connect(signals.stats, lambda e: got.append(e.step))
    gc.collect()
    bus.emit(signals.stats, stats_event(7))
    bus.flush()
    assert got == [7]


def test_decorator_returns_function_unchanged(bus: Bus) -> None:
    got: list[int] = []

    def saved(event: SaveEvent) -> None:
        got.append(event.step)

    assert bus.on(signals.save)(saved) is saved
    bus.emit(signals.save, SaveEvent(category="C", step=5, path="x.pt"))  # type: ignore[arg-type]
    bus.flush()
    assert got == [5]


def test_subscriber_that_cannot_take_a_payload_is_refused(bus: Bus) -> None:
    def two(a: Any, b: Any) -> None: ...

    def zero() -> None: ...

    with pytest.raises(TypeError, match=r"subscriber 'two-args' cannot take one payload"):
        bus.connect(signals.stats, two, name="two-args")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="cannot take one payload"):
        bus.connect(signals.stats, zero)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="not callable"):
        bus.connect(signals.stats, 42)  # type: ignore[arg-type]


def test_payload_of_wrong_type_is_refused(bus: Bus) -> None:
    with pytest.raises(TypeError, match="signal 'stats' carries StatsEvent, got SaveEvent"):
        bus.emit(signals.stats, SaveEvent(category="C", step=1, path="x"))  # type: ignore[arg-type]


def test_handle_disconnects_and_drains_on_exit(bus: Bus) -> None:
    recorder = Recorder()
    with bus.connect(signals.stats, recorder) as handle:
        assert handle.active
        bus.emit(signals.stats, stats_event(1))
    assert not handle.active
    assert [e.step for e in recorder.events] == [1]
    bus.emit(signals.stats, stats_event(2))
    bus.flush()
    assert [e.step for e in recorder.events] == [1]


def test_add_writer_delivers_stats_and_properties_in_order(bus: Bus) -> None:
    calls: list[tuple[Any, ...]] = []

    class Writer(StatsWriter):
        def write_stats(self, category: str, values: Mapping[str, StatsSummary], step: int) -> None:
            calls.append(("stats", category, step, {k: v.mean for k, v in values.items()}))

        def add_property(self, category: str, property_type: StatsPropertyType, value: Any) -> None:
            calls.append(("property", category, property_type, value))

        def flush(self) -> None:
            calls.append(("flush",))

    from evtrain import PropertyEvent

    bus.add_writer(Writer())
    bus.emit(
        signals.hyperparameters,
        PropertyEvent(
            category="C", property_type=StatsPropertyType.HYPERPARAMETERS, value={"a": 1}
        ),
    )
    bus.emit(signals.stats, stats_event(10, category="C", reward=1.5))
    bus.flush()
    assert calls == [
        ("property", "C", StatsPropertyType.HYPERPARAMETERS, {"a": 1}),
        ("stats", "C", 10, {"reward": 1.5}),
        ("flush",),
    ]


def test_add_writer_delivers_the_run_lifecycle_in_order(bus: Bus, tmp_path: Path) -> None:
    from evtrain import ExportEvent, RunFinished, RunStarted, RunStatus, SaveEvent

    calls: list[tuple[Any, ...]] = []

    class Tracker(StatsWriter):
        def write_stats(self, category: str, values: Mapping[str, StatsSummary], step: int) -> None:
            calls.append(("stats", step))

        def on_run_started(self, event: RunStarted) -> None:
            calls.append(("started", event.run_id))

        def on_save(self, event: SaveEvent) -> None:
            calls.append(("save", event.step, event.path.name))

        def on_export(self, event: ExportEvent) -> None:
            calls.append(("export", event.step, event.format))

        def on_run_finished(self, event: RunFinished) -> None:
            calls.append(("finished", event.status))

    bus.add_writer(Tracker())
    bus.emit(signals.run_started, RunStarted(run_id="r"))
    bus.emit(signals.stats, stats_event(10))
    bus.emit(signals.save, SaveEvent(category="C", step=10, path=tmp_path / "C-10.pt"))
    bus.emit(signals.export, ExportEvent(category="C", step=10, path=tmp_path / "C-10.onnx"))
    bus.emit(signals.run_finished, RunFinished(run_id="r", status=RunStatus.COMPLETED))
    bus.flush()
    assert calls == [
        ("started", "r"),
        ("stats", 10),
        ("save", 10, "C-10.pt"),
        ("export", 10, "onnx"),
        ("finished", RunStatus.COMPLETED),
    ]


def test_a_writer_brings_its_own_overflow_policy_and_options_override_it() -> None:
    class Lossy(StatsWriter):
        overflow = "drop_newest"

        def write_stats(self, category: str, values: Mapping[str, StatsSummary], step: int) -> None:
            pass

    with Bus() as plain:
        plain.add_writer(Lossy())
        (sub,) = plain.subscriptions
        assert sub.inbox.overflow is Overflow.DROP_NEWEST
    name = "tests.test_bus.Lossy"
    with Bus(subscribers={name: SubscriberSettings(overflow=Overflow.BLOCK)}) as tuned:
        tuned.add_writer(Lossy(), name=name)
        (sub,) = tuned.subscriptions
        assert sub.inbox.overflow is Overflow.BLOCK


def test_add_writer_refuses_non_writers(bus: Bus) -> None:
    with pytest.raises(TypeError, match="add_writer\\(\\) needs a StatsWriter"):
        bus.add_writer(print)  # type: ignore[arg-type]


def test_flush_from_inside_a_subscriber_is_an_isolated_error(bus: Bus) -> None:
    failures = Recorder()
    bus.connect(signals.stats, lambda e: bus.flush(), name="reentrant")
    bus.connect(signals.subscriber_failed, failures)
    bus.emit(signals.stats, stats_event(1))
    bus.flush()
    assert failures.events[0].error == "Bus.flush() called from a subscriber would wait for itself"


def test_metrics_count_and_time_deliveries(bus: Bus) -> None:
    bus.connect(signals.stats, lambda e: time.sleep(0.002), name="sleepy")
    for step in range(20):
        bus.emit(signals.stats, stats_event(step))
    bus.flush()
    m = bus.metrics()["sleepy"]
    assert (m.delivered, m.dropped, m.failed, m.queued, m.disabled) == (20, 0, 0, 0, False)
    assert 1 <= m.high_water <= 20
    assert 0.002 <= m.latency_p50_s <= m.latency_p99_s < 5.0
    assert m.as_dict()["name"] == "sleepy"


def test_duplicate_names_are_made_unique(bus: Bus) -> None:
    first = bus.connect(signals.stats, print, name="same")
    second = bus.connect(signals.stats, print, name="same")
    assert (first.name, second.name) == ("same", "same#2")
