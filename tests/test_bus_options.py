"""A run's ``bus:`` options, from YAML to the bus the run makes
(:func:`evtrain.run.wiring.make_bus`): ``block_timeout`` for every subscriber, and the fixed
interval spool subscribers are retried on."""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import attrs
import pytest
import yaml

from evtrain import (
    Bus,
    RunOptions,
    StatsEvent,
    StatsSummary,
    StatsWriter,
    SubscriberFailed,
    signals,
)
from evtrain.errors import ConfigError
from evtrain.events.payloads import SubscriberStalled
from evtrain.run.wiring import make_bus
from evtrain.testing import Recorder
from tests.helpers import stats_event

WAIT_S = 30.0

BLOCK_TIMEOUT = """
checkpoint_settings: {{results_dir: {results}, run_id: run}}
bus:
  capacity: 2
  stall_timeout: 600
  block_timeout: 0.2
  subscribers:
    named: {{block_timeout: 0.1}}
"""


class Hung:
    """A subscriber that hangs on its first event until released."""

    def __init__(self) -> None:
        self.entered = threading.Event()
        self.release = threading.Event()
        self.steps: list[int] = []

    def __call__(self, event: StatsEvent) -> None:
        self.entered.set()
        assert self.release.wait(WAIT_S)
        self.steps.append(event.step)


def test_bus_block_timeout_in_yaml_is_every_subscribers_unless_it_sets_its_own(
    tmp_path: Path,
) -> None:
    options = RunOptions.from_dict(yaml.safe_load(BLOCK_TIMEOUT.format(results=tmp_path)))
    assert options.bus.block_timeout == 0.2
    hung, stalls = Hung(), Recorder()
    with make_bus(options) as bus:
        bus.connect(signals.subscriber_stalled, stalls, name="stalls")
        bus.connect(signals.stats, hung, name="hung")
        bus.connect(signals.stats, lambda e: None, name="named")
        bus.connect(signals.stats, lambda e: None, name="own", block_timeout=0.3)
        timeouts = {s.name: s.inbox.block_timeout for s in bus.subscriptions}  # type: ignore[union-attr]
        assert timeouts == {"stalls": 0.2, "hung": 0.2, "named": 0.1, "own": 0.3}
        bus.emit(signals.stats, stats_event(0))
        assert hung.entered.wait(WAIT_S)  # step 0 in flight: the inbox holds 2 more
        for step in range(1, 4):  # 1, 2 queued; 3 waits the YAML's 0.2 s and is dropped
            bus.emit(signals.stats, stats_event(step))
        hung.release.set()
        bus.flush(timeout=WAIT_S)
        assert bus.metrics()["hung"].dropped == 1
    assert hung.steps == [0, 1, 2]
    [stall] = stalls.of(SubscriberStalled)
    assert attrs.evolve(stall, seconds=0.0) == SubscriberStalled(
        subscriber="hung",
        signal="stats",
        seconds=0.0,
        stall_timeout=0.2,
        spool=False,
        inbox_full=True,
    )
    assert stall.seconds >= 0.2


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        (0, "expected a finite number of seconds above 0, got 0.0"),
        (-1, "expected a finite number of seconds above 0, got -1.0"),
        (float("inf"), "expected a finite number of seconds above 0, got inf"),
        (float("nan"), "expected a finite number of seconds above 0, got nan"),
        ("soon", "expected a number, got 'soon'"),
    ],
)
def test_bus_block_timeout_is_a_finite_number_of_seconds_above_zero(
    value: Any, problem: str
) -> None:
    with pytest.raises(ConfigError) as refused:
        RunOptions.from_dict({"bus": {"block_timeout": value}})
    assert str(refused.value) == f"bus.block_timeout: {problem}"


@pytest.mark.parametrize(
    ("key", "value", "problem"),
    [
        ("block_timeout", 0, "expected a finite number of seconds above 0, got 0.0"),
        ("block_timeout", -1, "expected a finite number of seconds above 0, got -1.0"),
        ("stall_timeout", float("inf"), "expected a finite number of seconds above 0, got inf"),
        ("hang_timeout", float("nan"), "expected a finite number of seconds above 0, got nan"),
        ("capacity", 0, "expected an integer of at least 1, got 0"),
        ("capacity_bytes", -5, "expected an integer of at least 1, got -5"),
        ("journal_max_bytes", 0, "expected an integer of at least 1, got 0"),
        ("max_rss_bytes", 0, "expected an integer of at least 1, got 0"),
    ],
)
def test_a_subscribers_own_sizes_and_timeouts_are_checked_like_the_buss(
    key: str, value: Any, problem: str
) -> None:
    """0 once passed as 'unset' (the bus's value was used) and a negative timeout was taken."""
    with pytest.raises(ConfigError) as refused:
        RunOptions.from_dict({"bus": {"subscribers": {"named": {key: value}}}})
    assert str(refused.value) == f"bus.subscribers.named.{key}: {problem}"


def test_connect_names_the_option_it_refuses() -> None:
    with Bus() as bus, pytest.raises(ValueError) as refused:
        bus.connect(signals.stats, lambda e: None, block_timeout=-1)
    assert str(refused.value) == (
        "block_timeout: expected a finite number of seconds above 0, got -1"
    )


class Down(StatsWriter):
    """A tracker writer whose sink is down for its first ``failures`` tries of step 1: the
    time of each try of it."""

    overflow = "spool"

    def __init__(self, failures: int) -> None:
        self.failures = failures
        self.tries: list[float] = []
        self.steps: list[int] = []

    def write_stats(self, category: str, values: Mapping[str, StatsSummary], step: int) -> None:
        if step == 1:
            self.tries.append(time.monotonic())
            if len(self.tries) <= self.failures:
                raise ConnectionError("tracker unreachable")
        self.steps.append(step)


def test_a_spool_subscriber_is_retried_on_a_fixed_interval_capped_by_retry_backoff_max_s(
    tmp_path: Path,
) -> None:
    """``retry_backoff_s`` 5 capped to 0.2 by ``retry_backoff_max_s``, and not doubled: six
    failed tries of one event are 0.2 s apart (doubling would make the last gap 6.4 s)."""
    options = RunOptions.from_dict(
        {
            "checkpoint_settings": {"results_dir": str(tmp_path), "run_id": "run"},
            "bus": {"retry_backoff_s": 5.0, "retry_backoff_max_s": 0.2},
        }
    )
    writer, failures = Down(failures=6), Recorder()
    with make_bus(options) as bus:
        bus.connect(signals.subscriber_failed, failures, name="failures")
        bus.add_writer(writer, name="tracker")
        for step in range(3):
            bus.emit(signals.stats, stats_event(step))
        bus.flush(timeout=WAIT_S)
    assert writer.steps == [0, 1, 2]
    assert [f.retry_in_s for f in failures.of(SubscriberFailed)] == [0.2]
    gaps = [later - earlier for earlier, later in itertools.pairwise(writer.tries)]
    assert len(gaps) == 6
    assert all(0.19 <= gap < 3.0 for gap in gaps), gaps
