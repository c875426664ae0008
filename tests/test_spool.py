"""The spool policy: emit never waits, nothing is lost — hung, failing, stalled or dead sinks,
``close`` with a timeout, ``kill -9`` — with real threads, a real journal on disk, real
processes."""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest

from evtrain import (
    Bus,
    JournalInUseError,
    RunOptions,
    StatsEvent,
    StatsSummary,
    StatsWriter,
    SubscriberFailed,
    SubscriberStalled,
    signals,
)
from evtrain.bus import journal_backlog, journal_path
from evtrain.bus.spool import SpoolInbox
from evtrain.run.wiring import make_bus
from evtrain.testing import Recorder
from tests.helpers import stats_event


class Hung:
    """A tracker that stops answering at step ``hang_at`` until released."""

    def __init__(self, hang_at: int = 0) -> None:
        self.hang_at = hang_at
        self.entered = threading.Event()
        self.release = threading.Event()
        self.steps: list[int] = []

    def __call__(self, event: StatsEvent) -> None:
        if event.step == self.hang_at and not self.release.is_set():
            self.entered.set()
            self.release.wait(30)
        self.steps.append(event.step)


@pytest.fixture
def hung() -> Iterator[Hung]:
    tracker = Hung()
    yield tracker
    tracker.release.set()  # a tracker a bus gave up on must not outlive the test


def spool_inbox(bus: Bus, name: str) -> SpoolInbox:
    (inbox,) = [s.inbox for s in bus.subscriptions if s.name == name]
    assert isinstance(inbox, SpoolInbox)
    return inbox


def emit_steps(bus: Bus, steps: range) -> float:
    """Emit ``steps``; return the longest single ``emit``."""
    longest = 0.0
    for step in steps:
        start = time.perf_counter()
        bus.emit(signals.stats, stats_event(step, reward=float(step)))
        longest = max(longest, time.perf_counter() - start)
    return longest


def test_a_hung_tracker_never_blocks_emit_and_gets_every_event_once_in_order(
    tmp_path: Path, hung: Hung
) -> None:
    with Bus(journal_dir=tmp_path) as bus:
        bus.connect(signals.stats, hung, overflow="spool", capacity=100, name="tracker")
        bus.emit(signals.stats, stats_event(0))
        assert hung.entered.wait(5)
        # Under `block` the 101st emit would wait for the tracker for good.
        emit_steps(bus, range(1, 50_000))
        # Every emit returned while the tracker was still inside its first call: none waited
        # for it (how long an emit takes is for benchmarks/, not a test on a shared machine).
        assert hung.steps == [] and not hung.release.is_set()
        stuck = bus.metrics()["tracker"]
        assert (stuck.delivered, stuck.journaled, stuck.dropped) == (0, 50_000, 0)
        assert spool_inbox(bus, "tracker").in_memory <= 100  # the rest is only on disk
        hung.release.set()
        bus.flush(timeout=60)
        metrics = bus.metrics()["tracker"]
    assert hung.steps == list(range(50_000))
    assert (metrics.delivered, metrics.dropped, metrics.failed, metrics.journaled) == (
        50_000,
        0,
        0,
        0,
    )
    assert 0 < metrics.replayed < 50_000  # the window came from memory, the rest from disk
    assert metrics.high_water <= 100
    assert not journal_path(tmp_path, "tracker").exists()  # all acknowledged: removed at close


class FlakyTracker(StatsWriter):
    """A tracker writer that raises on its first ``failures`` tries of step 5."""

    overflow = "spool"

    def __init__(self, failures: int) -> None:
        self.failures = failures
        self.steps: list[int] = []

    def write_stats(self, category: str, values: Mapping[str, StatsSummary], step: int) -> None:
        if step == 5 and self.failures:
            self.failures -= 1
            raise ConnectionError("tracker unreachable")
        self.steps.append(step)


def test_a_raising_tracker_is_retried_on_a_fixed_interval_in_order_and_never_disabled(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    failures = Recorder()
    writer = FlakyTracker(failures=3)
    bus = Bus(
        journal_dir=tmp_path,
        max_consecutive_failures=1,  # would disable any other subscriber at once
        retry_backoff_s=0.02,
        retry_backoff_max_s=0.05,
    )
    bus.connect(signals.subscriber_failed, failures, name="failures")
    handle = bus.add_writer(writer, name="tracker")
    with caplog.at_level(logging.WARNING, logger="evtrain.bus"):
        emit_steps(bus, range(50))
        bus.flush(timeout=10)
    assert writer.steps == list(range(50))
    # One outage, reported once; the retries are 0.02 s apart, never more.
    assert [(f.subscriber, f.error_type, f.disabled, f.retry_in_s) for f in failures.events] == [
        ("tracker", "ConnectionError", False, 0.02),
    ]
    assert isinstance(failures.events[0], SubscriberFailed)
    metrics = bus.metrics()["tracker"]
    assert (metrics.delivered, metrics.failed, metrics.retries, metrics.disabled) == (
        50,
        3,
        3,
        False,
    )
    assert handle.active
    logged = [r.getMessage() for r in caplog.records if "'tracker'" in r.getMessage()]
    assert len(logged) == 2  # one line when it went down, one when it came back
    assert "delivery is retried every 0.02 s" in logged[0]
    assert logged[1].startswith("Subscriber 'tracker' is back after ")
    assert all(r.exc_info is None for r in caplog.records)  # no traceback unless --debug
    assert bus.close(timeout=5).clean


def test_an_async_tracker_is_retried_on_the_loop(tmp_path: Path) -> None:
    got: list[int] = []
    tries = {"left": 2}

    async def tracker(event: StatsEvent) -> None:
        if event.step == 3 and tries["left"]:
            tries["left"] -= 1
            raise TimeoutError("no answer")
        got.append(event.step)

    with Bus(journal_dir=tmp_path, retry_backoff_s=0.01) as bus:
        bus.connect(signals.stats, tracker, overflow="spool", capacity=4, name="tracker")
        emit_steps(bus, range(200))
        bus.flush(timeout=10)
        assert bus.metrics()["tracker"].retries == 2
    assert got == list(range(200))


@pytest.mark.parametrize("overflow", ["spool", "block"])
def test_a_stall_is_reported_once_and_a_spool_stops_filling_memory(
    tmp_path: Path, hung: Hung, overflow: str
) -> None:
    stalls = Recorder()
    with Bus(journal_dir=tmp_path, stall_timeout=0.2) as bus:
        bus.connect(signals.subscriber_stalled, stalls, name="stalls")
        bus.connect(signals.stats, hung, overflow=overflow, name="tracker")
        bus.emit(signals.stats, stats_event(0))
        deadline = time.monotonic() + 5
        while not stalls.events and time.monotonic() < deadline:
            time.sleep(0.02)
        emit_steps(bus, range(1, 500))
        if overflow == "spool":
            assert spool_inbox(bus, "tracker").in_memory == 0  # journal only while stalled
        time.sleep(0.3)  # the watchdog looks again: still one report for this call
        metrics = bus.metrics()["tracker"]
        assert (metrics.stalls, metrics.delivered) == (1, 0)
        assert metrics.stalled_s >= 0.2
        hung.release.set()
        bus.flush(timeout=10)
    assert hung.steps == list(range(500))
    (stall,) = stalls.events
    assert isinstance(stall, SubscriberStalled)
    assert (stall.subscriber, stall.signal, stall.stall_timeout) == ("tracker", "stats", 0.2)
    assert stall.spool is (overflow == "spool")
    assert 0.2 <= stall.seconds < 5
    if overflow == "spool":
        assert bus.metrics()["tracker"].replayed == 499  # caught up from disk


def test_the_stall_timeout_is_per_subscriber(tmp_path: Path, hung: Hung) -> None:
    stalls = Recorder()
    with Bus(journal_dir=tmp_path, stall_timeout=60) as bus:
        bus.connect(signals.subscriber_stalled, stalls, name="stalls")
        bus.connect(signals.stats, hung, name="tracker", stall_timeout=0.1)
        bus.emit(signals.stats, stats_event(0))
        time.sleep(0.5)
        hung.release.set()
        bus.flush(timeout=5)
    assert [s.subscriber for s in stalls.events] == ["tracker"]


@pytest.mark.parametrize("trouble", ["failing", "stalled"])
def test_flush_does_not_wait_for_a_failing_or_stalled_tracker_once_its_events_are_journaled(
    tmp_path: Path, hung: Hung, trouble: str
) -> None:
    tracker = FlakyTracker(failures=10**9) if trouble == "failing" else None
    bus = Bus(
        journal_dir=tmp_path, stall_timeout=0.2, retry_backoff_s=0.05, retry_backoff_max_s=0.2
    )
    try:
        if tracker is not None:
            bus.add_writer(tracker, name="tracker")
        else:
            bus.connect(signals.stats, hung, overflow="spool", name="tracker")
        emit_steps(bus, range(100))
        # Queued before the trouble is noticed: released when it is.  A flush that waited for
        # delivery would raise BusTimeoutError: the tracker never recovers meanwhile.
        bus.flush(timeout=10, journaled=True)
        emit_steps(bus, range(100, 200))
        bus.flush(timeout=10, journaled=True)
        delivered_meanwhile = list(tracker.steps if tracker is not None else hung.steps)
        journaled = bus.metrics()["tracker"].journaled
    finally:
        hung.release.set()
        if tracker is not None:
            tracker.failures = 0
        bus.close(timeout=10)
    assert delivered_meanwhile == ([0, 1, 2, 3, 4] if tracker is not None else [])
    assert journaled >= 195  # all but those before step 5
    # the events were kept, and go out once the tracker answers again
    got = tracker.steps if tracker is not None else hung.steps
    assert got == list(range(200))


def test_close_with_a_dead_tracker_returns_in_time_and_the_next_bus_delivers_the_rest(
    tmp_path: Path, hung: Hung, caplog: pytest.LogCaptureFixture
) -> None:
    bus = Bus(journal_dir=tmp_path)
    bus.connect(signals.stats, hung, overflow="spool", capacity=10, name="tracker")
    emit_steps(bus, range(100))
    assert hung.entered.wait(5)
    start = time.monotonic()
    with caplog.at_level(logging.WARNING, logger="evtrain.bus"):
        report = bus.close(timeout=1)
    assert time.monotonic() - start < 3
    assert report.timed_out == ("tracker",)
    assert report.undelivered == {}  # nothing lost...
    assert (report.delivered, report.journaled) == ({"tracker": 0}, {"tracker": 100})  # ...kept
    assert not report.clean
    assert any(
        "100 events are kept undelivered in its journal" in r.message for r in caplog.records
    )
    assert journal_backlog(tmp_path, "tracker") == 100

    recorder = Recorder()
    with Bus(journal_dir=tmp_path) as again:
        again.connect(signals.stats, recorder, overflow="spool", name="tracker")
        emit_steps(again, range(100, 110))
        again.flush(timeout=10)
        assert again.metrics()["tracker"].replayed == 100
    assert [e.step for e in recorder.events] == list(range(110))  # the journal first, in order
    assert journal_backlog(tmp_path, "tracker") == 0
    assert not journal_path(tmp_path, "tracker").exists()


def test_a_journal_is_one_buss_at_a_time(tmp_path: Path) -> None:
    with Bus(journal_dir=tmp_path) as bus:
        bus.connect(signals.stats, print, overflow="spool", name="tracker")
        with Bus(journal_dir=tmp_path) as other, pytest.raises(JournalInUseError, match="close"):
            other.connect(signals.stats, print, overflow="spool", name="tracker")


def test_journals_are_named_by_subscriber_and_rank(tmp_path: Path) -> None:
    with Bus(journal_dir=tmp_path, rank=2) as bus:
        bus.connect(signals.stats, print, overflow="spool", name="my.Tracker<run 1>")
        folder = spool_inbox(bus, "my.Tracker<run 1>").journal.folder
        assert folder == tmp_path / "my.Tracker_run_1_-rank2"
        assert folder == journal_path(tmp_path, "my.Tracker<run 1>", rank=2)


def test_without_a_journal_dir_a_temporary_one_is_used_and_removed(hung: Hung) -> None:
    hung.release.set()
    bus = Bus()
    bus.connect(signals.stats, hung, overflow="spool", capacity=2, name="tracker")
    folder = spool_inbox(bus, "tracker").journal.folder
    assert folder.is_dir()
    emit_steps(bus, range(100))
    assert bus.close(timeout=10).clean
    assert hung.steps == list(range(100))
    assert not folder.exists() and not folder.parent.exists()


KILLED_RUN = """
import os, signal, sys, threading, time
from evtrain import Bus, StatsEvent, StatsSummary, signals

journal, delivered, total, fsync_s = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), float(
    sys.argv[4]
)
hang = threading.Event()


def tracker(event):
    if event.step >= delivered:
        hang.wait()  # the tracker stops answering


def emit(steps):
    for step in steps:
        summary = {"reward": StatsSummary(full_dist=[float(step)])}
        bus.emit(signals.stats, StatsEvent(category="C", step=step, values=summary, time=0.0))


def wait_for(condition, what):
    deadline = time.monotonic() + 30
    while not condition():
        assert time.monotonic() < deadline, what
        time.sleep(0.01)


bus = Bus(journal_dir=journal, journal_fsync_s=fsync_s, stall_timeout=0.5)
bus.connect(signals.stats, tracker, overflow="spool", capacity=50, name="tracker")
(inbox,) = [s.inbox for s in bus.subscriptions if s.name == "tracker"]
emit(range(delivered))
wait_for(lambda: bus.metrics()["tracker"].delivered >= delivered, "never delivered")
if fsync_s < 1:  # an fsync tick that saw the acks: they are on disk
    wait_for(lambda: inbox.journal.acked >= delivered, "no fsync tick saved the acks")
emit(range(delivered, total))
bus.flush(timeout=30, journaled=True)  # the stalled tracker's events: every one journaled
print(bus.metrics()["tracker"].journaled, flush=True)
os.kill(os.getpid(), signal.SIGKILL)
"""


@pytest.mark.parametrize(
    ("fsync_s", "expected_first"),
    [
        (0.1, 300),  # the ack of the 300 delivered was persisted: only the rest comes
        (60.0, 0),  # killed before any ack was persisted: at least once, from the start
    ],
)
def test_after_kill_9_a_new_bus_delivers_everything_from_the_last_ack(
    tmp_path: Path, fsync_s: float, expected_first: int
) -> None:
    run = subprocess.run(
        [sys.executable, "-c", KILLED_RUN, str(tmp_path), "300", "5000", str(fsync_s)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert run.returncode == -signal.SIGKILL, run.stderr
    assert run.stdout.strip() == "4700"
    assert journal_backlog(tmp_path, "tracker") == 5000 - expected_first
    recorder = Recorder()
    with Bus(journal_dir=tmp_path) as bus:
        bus.connect(signals.stats, recorder, overflow="spool", name="tracker")
        bus.flush(timeout=30)
    steps = [e.step for e in recorder.events]
    # None missing; duplicates only of what the killed run delivered without a persisted ack.
    assert steps == list(range(expected_first, 5000))
    assert recorder.events[-1].values["reward"].mean == 4999.0


def test_a_torn_tail_record_is_ignored(
    tmp_path: Path, hung: Hung, caplog: pytest.LogCaptureFixture
) -> None:
    bus = Bus(journal_dir=tmp_path)
    bus.connect(signals.stats, hung, overflow="spool", name="tracker")
    emit_steps(bus, range(20))
    assert bus.close(timeout=0.5).journaled == {"tracker": 20}
    (segment,) = journal_path(tmp_path, "tracker").glob("*.seg")
    os.truncate(segment, segment.stat().st_size - 5)  # a crash in the middle of the last record

    recorder = Recorder()
    with caplog.at_level(logging.WARNING, logger="evtrain.bus"), Bus(journal_dir=tmp_path) as bus:
        bus.connect(signals.stats, recorder, overflow="spool", name="tracker")
        emit_steps(bus, range(100, 103))
        bus.flush(timeout=10)
    assert [e.step for e in recorder.events] == [*range(19), 100, 101, 102]
    assert any("ignoring a torn record" in r.message for r in caplog.records)


def test_past_journal_max_bytes_the_oldest_events_are_dropped_counted_and_warned(
    tmp_path: Path, hung: Hung, caplog: pytest.LogCaptureFixture
) -> None:
    with (
        caplog.at_level(logging.WARNING, logger="evtrain.bus"),
        Bus(journal_dir=tmp_path, journal_max_bytes=40_000) as bus,
    ):
        bus.connect(signals.stats, hung, overflow="spool", capacity=10, name="tracker")
        emit_steps(bus, range(3000))
        assert hung.entered.wait(5)
        deadline = time.monotonic() + 5
        while spool_inbox(bus, "tracker").journal.size > 40_000:
            assert time.monotonic() < deadline
            time.sleep(0.02)
        hung.release.set()
        bus.flush(timeout=10)
        metrics = bus.metrics()["tracker"]
    assert metrics.dropped > 0
    assert metrics.delivered + metrics.dropped == 3000
    assert len(hung.steps) == metrics.delivered
    assert hung.steps == sorted(set(hung.steps))  # in order, each once
    assert hung.steps[:10] == list(range(10))  # the window, from memory
    assert hung.steps[-1] == 2999  # the newest are kept
    warned = [r for r in caplog.records if "over journal_max_bytes" in r.message]
    assert len(warned) == 1


def test_make_bus_keeps_journals_in_the_run_folder(tmp_path: Path) -> None:
    options = RunOptions.from_dict(
        {
            "checkpoint_settings": {"results_dir": str(tmp_path), "run_id": "r1"},
            "bus": {"stall_timeout": 3, "journal_max_bytes": 1_000_000, "journal_fsync_s": 2},
        }
    )
    with make_bus(options) as bus:
        assert bus.journal_dir == tmp_path / "r1" / "run_logs" / "journal"
        assert (bus.stall_timeout, bus.journal_max_bytes, bus.journal_fsync_s) == (3, 1e6, 2)


def test_a_healthy_trackers_journal_stays_small(tmp_path: Path) -> None:
    recorder = Recorder()
    with Bus(journal_dir=tmp_path, journal_fsync_s=0.05) as bus:
        bus.connect(signals.stats, recorder, overflow="spool", name="tracker")
        journal = spool_inbox(bus, "tracker").journal
        for chunk in range(12):
            emit_steps(bus, range(chunk * 2000, (chunk + 1) * 2000))
            bus.flush(timeout=10)
            # an fsync tick that saw every ack: caught-up segments go (however busy the CPU)
            deadline = time.monotonic() + 10
            while journal.acked < (chunk + 1) * 2000:
                assert time.monotonic() < deadline, "no fsync tick saved the acknowledgement"
                time.sleep(0.01)
        assert journal.size < 3 << 20  # everything is recorded ahead, acknowledged parts go
        assert len(list(journal.folder.glob("*.seg"))) <= 2
        assert bus.metrics()["tracker"].replayed == 0  # all from memory
    assert len(recorder.events) == 24_000
