"""Small builders shared by the tests."""

from __future__ import annotations

import threading

from evtrain import StatsEvent, StatsSummary


def stats_event(step: int, category: str = "CartPole", **values: float) -> StatsEvent:
    summaries = {k: StatsSummary(full_dist=[v]) for k, v in values.items()}
    return StatsEvent(category=category, step=step, values=summaries, rank=0, time=0.0)


class Gate:
    """A subscriber that blocks on its first event until opened."""

    def __init__(self) -> None:
        self.entered = threading.Event()
        self.open = threading.Event()
        self.steps: list[int] = []

    def __call__(self, event: StatsEvent) -> None:
        self.entered.set()
        assert self.open.wait(10)
        self.steps.append(event.step)
