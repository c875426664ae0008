"""The progress bar of ``evtrain learn`` (:class:`evtrain.run.progress.ProgressDisplay`)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from evtrain.run.learn import learn
from evtrain.run.progress import ProgressDisplay
from tests.helpers import config


def test_bar_says_saving_while_a_save_is_under_way() -> None:
    display = ProgressDisplay({"CartPole": 1024, "Pendulum": 1024})
    assert display.activity("CartPole") == ""
    with display.saving("CartPole"):
        assert display.activity("CartPole") == "saving checkpoint and exporting"
        assert display.activity("Pendulum") == ""
    assert display.activity("CartPole") == ""


class Watching(ProgressDisplay):
    """Notes what the bar says, and at which step, each time the runner starts a save."""

    def __init__(self, behaviors: dict[str, int]) -> None:
        super().__init__(behaviors)
        self.steps: dict[str, int] = {}
        self.seen: list[tuple[int, str]] = []

    def __call__(self, behavior: str, step: int, max_steps: int) -> None:
        super().__call__(behavior, step, max_steps)
        self.steps[behavior] = step

    @contextmanager
    def saving(self, behavior: str) -> Iterator[None]:
        with super().saving(behavior):
            self.seen.append((self.steps[behavior], self.activity(behavior)))
            yield


def test_run_shows_saving_on_the_bar_for_every_checkpoint_and_the_final_save(
    tmp_path: Path,
) -> None:
    display = Watching({"CartPole": 1024})
    learn(config(tmp_path), progress=display)
    saving = "saving checkpoint and exporting"
    # The periodic and the final save; the first runs in the background while training goes on.
    assert [activity for _, activity in display.seen] == [saving, saving]
    assert 512 <= display.seen[0][0] <= 1024 and display.seen[1][0] == 1024
    assert display.activity("CartPole") == ""


def test_learns_progress_hook_is_called_after_every_update_on_the_callers_thread(
    tmp_path: Path,
) -> None:
    """What the README says of ``learn(progress=)``: ``(behavior, step, max_steps)`` after
    every update (128 steps here), on the thread that called ``learn()``."""
    calls: list[tuple[str, int, int, int]] = []

    def progress(behavior: str, step: int, max_steps: int) -> None:
        calls.append((behavior, step, max_steps, threading.get_ident()))

    learn(config(tmp_path), progress=progress)
    me = threading.get_ident()
    assert calls == [("CartPole", step, 1024, me) for step in range(128, 1025, 128)]
