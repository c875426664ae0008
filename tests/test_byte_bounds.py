"""Bounded in bytes: ``capacity_bytes`` for inboxes and spool windows, a journal that never
outgrows ``journal_max_bytes`` by more than one segment, and every deleted event counted."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from evtrain import Bus, StatsEvent, StatsSummary
from evtrain.bus import Overflow, SubscriberSettings
from evtrain.bus.inbox import Inbox, event_size
from evtrain.bus.journal import HEADER, journal_backlog, journal_path
from evtrain.bus.records import MAGIC, encode
from evtrain.config.options import RunOptions
from evtrain.events.signals import stats
from tests.helpers import Gate

VALUES = 10_000


def big(step: int) -> StatsEvent:
    """About 80 kB: one key with 10 000 recorded values."""
    summary = StatsSummary(full_dist=[0.5] * VALUES)
    return StatsEvent(category="B", step=step, values={"k": summary}, rank=0, time=0.0)


SIZE = 256 + 160 + 8 * VALUES
ROOM = 3 * SIZE + SIZE // 2
"""Bytes for three of them, not four."""


def test_the_size_estimate_of_a_stats_event() -> None:
    assert event_size(big(0)) == SIZE == 80_416


@pytest.mark.parametrize(
    ("overflow", "kept"),
    [(Overflow.DROP_OLDEST, [7, 8, 9]), (Overflow.DROP_NEWEST, [0, 1, 2])],
)
def test_an_inbox_full_in_bytes_applies_its_overflow_policy(
    overflow: Overflow, kept: list[int]
) -> None:
    inbox = Inbox(1000, overflow, capacity_bytes=ROOM)
    for step in range(10):
        inbox.put(float(step), big(step))
    assert [payload.step for _, payload in inbox.take()] == kept
    assert (inbox.offered, inbox.dropped, inbox.high_water) == (10, 7, 3)


def test_an_empty_inbox_takes_one_event_larger_than_its_bound() -> None:
    inbox = Inbox(1000, Overflow.DROP_NEWEST, capacity_bytes=SIZE // 2)
    for step in range(3):
        inbox.put(float(step), big(step))
    assert [payload.step for _, payload in inbox.take()] == [0]
    assert inbox.dropped == 2


def test_a_block_inbox_full_in_bytes_waits_then_drops_the_event() -> None:
    inbox = Inbox(1000, Overflow.BLOCK, block_timeout=0.1, capacity_bytes=ROOM)
    waited: list[int] = []
    inbox.on_block_timeout = lambda payload, seconds: waited.append(payload.step)
    for step in range(4):
        inbox.put(float(step), big(step))
    assert waited == [3]
    assert [payload.step for _, payload in inbox.take()] == [0, 1, 2]


def test_capacity_bytes_by_subscriber_name_bounds_a_connected_inbox() -> None:
    settings = {"gate": SubscriberSettings(capacity_bytes=ROOM)}
    bus = Bus(subscribers=settings, overflow="drop_newest")
    gate = Gate()
    bus.connect(stats, gate, name="gate")
    bus.emit(stats, big(0))
    assert gate.entered.wait(60)
    for step in range(1, 10):
        bus.emit(stats, big(step))
    gate.open.set()
    bus.close()
    assert gate.steps == [0, 1, 2, 3]
    assert bus.metrics()["gate"].dropped == 6


def test_a_spool_window_full_in_bytes_leaves_the_rest_to_the_journal(tmp_path: Path) -> None:
    bus = Bus(journal_dir=tmp_path)
    gate = Gate()
    bus.connect(stats, gate, name="gate", overflow="spool", capacity_bytes=ROOM)
    bus.emit(stats, big(0))
    assert gate.entered.wait(60)
    for step in range(1, 10):
        bus.emit(stats, big(step))
    gate.open.set()
    bus.close()
    assert gate.steps == list(range(10))
    metrics = bus.metrics()["gate"]
    assert (metrics.high_water, metrics.replayed, metrics.dropped) == (3, 6, 0)


def test_capacity_bytes_in_the_options() -> None:
    options = RunOptions.from_dict(
        {"bus": {"subscribers": {"x": {"capacity_bytes": 1 << 20, "isolation": "process"}}}}
    )
    assert options.bus.subscribers["x"].capacity_bytes == 1 << 20


def down(event: StatsEvent) -> None:
    raise ConnectionError("tracker down")


class Sampler(threading.Thread):
    """Sums the sizes of a journal's segments, over and over, while a burst is written; keeps
    the largest sum of a scan during which no segment was created or deleted (so each file's
    size is at most what it holds at the scan's end, and the sum what the folder held then)."""

    def __init__(self, folder: Path) -> None:
        super().__init__(daemon=True)
        self.folder = folder
        self.largest = 0
        self.scans = 0
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.is_set():
            names = sorted(self.folder.glob("*.seg"))
            try:
                total = sum(path.stat().st_size for path in names)
            except FileNotFoundError:
                continue
            if names == sorted(self.folder.glob("*.seg")):
                self.largest = max(self.largest, total)
                self.scans += 1
            time.sleep(0.001)  # let the writer thread write


def test_a_journal_under_a_burst_stays_within_its_bound_and_counts_every_deletion(
    tmp_path: Path,
) -> None:
    max_bytes = 64 << 10
    summary = StatsSummary(full_dist=[0.5] * 10)
    event = StatsEvent(category="B", step=0, values={"k": summary}, rank=0, time=0.0)
    record = HEADER.size + len(encode(event))
    settings = {"tracker": SubscriberSettings(journal_max_bytes=max_bytes)}
    bus = Bus(journal_dir=tmp_path, subscribers=settings, drain_timeout=1.0)
    bus.connect(stats, down, name="tracker", overflow="spool")
    folder = journal_path(tmp_path, "tracker")
    sampler = Sampler(folder)
    sampler.start()
    after_batches = []
    for _ in range(3):
        for _ in range(1000):
            bus.emit(stats, event)
        bus.flush(60, journaled=True)
        after_batches.append(sum(p.stat().st_size for p in folder.glob("*.seg")))
    sampler.stop.set()
    sampler.join()
    # The bound, plus the segment being written (max_bytes // 8), the record crossing it, and
    # the next segment's first line.
    most = max_bytes + max_bytes // 8 + record + len(MAGIC)
    assert sampler.scans > 0
    assert max(sampler.largest, *after_batches) <= most
    bus.close()
    left = journal_backlog(tmp_path, "tracker")
    assert 0 < left < 3000
    metrics = bus.metrics()["tracker"]
    assert metrics.delivered == 0
    assert metrics.dropped == 3000 - left
