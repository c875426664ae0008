"""Registration functions that tests point real ``EntryPoint`` objects at."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from evtrain import Bus, RunOptions, StatsSummary, StatsWriter, signals
from evtrain.distributed import Initializer


class ListWriter(StatsWriter):
    def __init__(self, run_id: str) -> None:
        self.run_id = run_id
        self.steps: list[int] = []

    def write_stats(self, category: str, values: Mapping[str, StatsSummary], step: int) -> None:
        self.steps.append(step)


def good(run_options: RunOptions) -> list[StatsWriter]:
    return [ListWriter(run_options.checkpoint_settings.run_id)]


def raises(run_options: RunOptions) -> list[StatsWriter]:
    raise OSError("disk is read-only")


def not_a_list(run_options: RunOptions) -> Any:
    return ListWriter("x")


def list_of_junk(run_options: RunOptions) -> Any:
    return [print]


def interrupts(run_options: RunOptions) -> list[StatsWriter]:
    raise KeyboardInterrupt


saved: list[int] = []


def save_subscriber(run_options: RunOptions, bus: Bus) -> None:
    bus.connect(signals.save, lambda event: saved.append(event.step), name="fixture-save")


NOT_CALLABLE = 42


class FixtureInitializer(Initializer):
    """Records its calls; sets up nothing."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    def load(self, options: RunOptions) -> None:
        self.calls.append(f"load {options.checkpoint_settings.run_id}")

    def teardown(self) -> None:
        self.calls.append("teardown")


def fixture_initializer() -> Initializer:
    return FixtureInitializer()


def broken_initializer() -> Initializer:
    raise OSError("no network")


def not_an_initializer() -> Any:
    return 42
