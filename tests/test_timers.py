"""Hierarchical timers: nesting, counts, self time, open timers, threads, reset."""

from __future__ import annotations

import threading
import time

import pytest

from evtrain import timers
from evtrain.timers import TimerStack


def test_nested_timers_build_a_tree_with_counts_and_self_time() -> None:
    stack = TimerStack()
    for _ in range(3):
        with stack.timer("advance"):
            with stack.timer("rollout"):
                time.sleep(0.002)
            with stack.timer("update"):
                time.sleep(0.004)
    with stack.timer("save"):
        pass

    tree = stack.tree()
    assert tree["name"] == "root" and tree["count"] == 1
    assert list(tree["children"]) == ["advance", "save"]
    advance = tree["children"]["advance"]
    assert advance["count"] == 3
    assert {n: c["count"] for n, c in advance["children"].items()} == {"rollout": 3, "update": 3}
    rollout, update = advance["children"]["rollout"], advance["children"]["update"]
    assert rollout["total"] >= 0.006 and update["total"] >= 0.012
    assert "children" not in rollout and rollout["self"] == rollout["total"]
    assert advance["self"] == pytest.approx(advance["total"] - rollout["total"] - update["total"])
    assert tree["total"] >= advance["total"] + tree["children"]["save"]["total"]


def test_open_timers_count_their_time_so_far() -> None:
    stack = TimerStack()
    with stack.timer("train"):
        time.sleep(0.01)
        inside = stack.tree()["children"]["train"]
    assert inside["count"] == 0 and inside["total"] >= 0.01  # running, not finished yet
    assert stack.tree()["children"]["train"]["count"] == 1


def test_each_thread_nests_from_the_root() -> None:
    stack = TimerStack()
    seen = threading.Event()

    def worker() -> None:
        with stack.timer("worker"):
            seen.wait(5)

    thread = threading.Thread(target=worker)
    with stack.timer("main"):
        thread.start()
        time.sleep(0.01)
        tree = stack.tree()  # another thread's open timer shows, under the root
        seen.set()
        thread.join()
    assert set(tree["children"]) == {"main", "worker"}
    assert tree["children"]["worker"]["total"] > 0
    assert set(stack.tree()["children"]) == {"main", "worker"}


def test_a_timer_records_the_interval_when_its_block_raises() -> None:
    stack = TimerStack()
    with pytest.raises(ValueError), stack.timer("failing"):
        raise ValueError("boom")
    with stack.timer("next"):  # the stack is back at the root
        pass
    assert {n: c["count"] for n, c in stack.tree()["children"].items()} == {
        "failing": 1,
        "next": 1,
    }


def test_module_functions_use_the_current_run_and_reset_starts_anew() -> None:
    first = timers.reset_timers()

    @timers.timed
    def work(x: int) -> int:
        return x * 2

    assert work(21) == 42
    with timers.hierarchical_timer("block"):
        work(1)
    tree = timers.timer_tree()
    name = work.__qualname__
    assert tree["children"][name]["count"] == 1
    assert tree["children"]["block"]["children"][name]["count"] == 1
    second = timers.reset_timers()
    assert second is timers.get_timer_stack() and second is not first
    assert "children" not in timers.timer_tree()
    assert first.tree()["children"]["block"]["count"] == 1  # a writer holding it keeps it
