from __future__ import annotations

from collections.abc import Mapping

import pytest

from evtrain import Bus, RankFilter, StatsSummary, StatsWriter, get_rank, rank_zero_only, signals
from evtrain.testing import Recorder
from tests.helpers import stats_event


class FileLike(StatsWriter):
    ranks = frozenset({0})

    def write_stats(self, category: str, values: Mapping[str, StatsSummary], step: int) -> None:
        raise AssertionError("must not run on rank 1")


def test_rank_comes_from_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("RANK", raising=False)
    assert get_rank() == 0
    monkeypatch.setenv("RANK", "3")
    assert get_rank() == 3
    monkeypatch.setenv("RANK", "x")
    with pytest.raises(ValueError, match="RANK environment variable must be an integer, got 'x'"):
        get_rank()


def test_ranks_filter_connects_nothing_on_other_ranks() -> None:
    with Bus(rank=1) as bus:
        recorder = Recorder()
        handle = bus.connect(signals.stats, recorder, ranks=[0])
        writer_handle = bus.add_writer(FileLike())
        everywhere = Recorder()
        bus.connect(signals.stats, everywhere)
        assert not handle.active and handle.name is None and not writer_handle.active
        bus.emit(signals.stats, stats_event(1))
        bus.flush()
        assert recorder.events == [] and len(everywhere.events) == 1
        assert list(bus.metrics()) == ["evtrain.testing.Recorder"]


def test_rank_filter_wrapper_is_honoured_at_connect(monkeypatch: pytest.MonkeyPatch) -> None:
    recorder = Recorder()
    with Bus(rank=0) as bus:
        assert bus.connect(signals.stats, rank_zero_only(recorder)).active
        bus.emit(signals.stats, stats_event(1))
    with Bus(rank=2) as bus:
        assert not bus.connect(signals.stats, RankFilter(recorder, {0, 1})).active
    assert len(recorder.events) == 1
    # Called directly, the wrapper checks the rank itself.
    monkeypatch.setenv("RANK", "1")
    rank_zero_only(recorder)(stats_event(2))
    assert len(recorder.events) == 1
