"""Hierarchical timers: where a run's time goes, as the tree in ``run_logs/timers.json``.

::

    from evtrain import timers

    with timers.hierarchical_timer("rollout"):
        ...

    @timers.timed
    def update(self) -> None: ...

A timer opened inside another becomes its child, so the tree follows the call structure
(``root → train → advance → update``); the same name under the same parent adds to one
node (``total`` seconds, ``count`` intervals).  Each thread nests its own timers, starting at
the root; a name timed on two threads at once adds both intervals to one node.

:func:`timer_tree` gives the tree in ML-Agents' ``timers.json`` format — ``name`` (root only),
``total``, ``count``, ``self`` (total minus the children's), ``children`` — including the time
so far of timers still open, so a file written mid-run is meaningful.  ``evtrain learn`` starts
each run with :func:`reset_timers`; the default gauge writer writes the tree.

A timer costs about a microsecond: time whole phases (a rollout, an update, a save), not a
single environment step.
"""

from __future__ import annotations

import functools
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import Any, ParamSpec, TypeVar

P = ParamSpec("P")
R = TypeVar("R")


class TimerNode:
    """One timer: its accumulated time, how often it ran, the timers opened inside it."""

    __slots__ = ("children", "count", "total")

    def __init__(self) -> None:
        self.children: dict[str, TimerNode] = {}
        self.total = 0.0
        """Seconds, over the finished intervals."""
        self.count = 0
        """Finished intervals."""


class TimerStack:
    """A tree of timers with one stack of open timers per thread."""

    def __init__(self) -> None:
        self.root = TimerNode()
        self.start = time.perf_counter()
        """When the tree was started; the root's total is the time since."""
        self._local = threading.local()
        self._lock = threading.Lock()
        self._stacks: list[list[tuple[TimerNode, float]]] = []

    def _stack(self) -> list[tuple[TimerNode, float]]:
        try:
            stack: list[tuple[TimerNode, float]] = self._local.stack
        except AttributeError:
            stack = self._local.stack = []
            with self._lock:
                self._stacks.append(stack)
        return stack

    @contextmanager
    def timer(self, name: str) -> Iterator[None]:
        """Time the block as ``name``, a child of the timer open on this thread (or the root)."""
        stack = self._stack()
        parent = stack[-1][0] if stack else self.root
        node = parent.children.get(name)
        if node is None:
            node = parent.children.setdefault(name, TimerNode())
        start = time.perf_counter()
        stack.append((node, start))
        try:
            yield
        finally:
            stack.pop()
            node.total += time.perf_counter() - start
            node.count += 1

    def tree(self) -> dict[str, Any]:
        """The tree in ``timers.json``'s format; open timers count their time so far."""
        now = time.perf_counter()
        running: dict[int, float] = {}
        with self._lock:
            stacks = [list(stack) for stack in self._stacks]
        for stack in stacks:
            for node, start in stack:
                running[id(node)] = running.get(id(node), 0.0) + now - start
        tree = self._node_dict(self.root, now - self.start, 1, running)
        return {"name": "root", **tree}

    def _node_dict(
        self, node: TimerNode, total: float, count: int, running: dict[int, float]
    ) -> dict[str, Any]:
        children: dict[str, Any] = {}
        for name, child in list(node.children.items()):
            children[name] = self._node_dict(
                child, child.total + running.get(id(child), 0.0), child.count, running
            )
        child_total = sum(c["total"] for c in children.values())
        result: dict[str, Any] = {
            "total": total,
            "count": count,
            "self": max(0.0, total - child_total),
        }
        if children:
            result["children"] = children
        return result


_timers = TimerStack()


def get_timer_stack() -> TimerStack:
    """The timers of the current run (the process's, outside ``evtrain learn``)."""
    return _timers


def reset_timers() -> TimerStack:
    """Start a new tree (``evtrain learn`` does, for each run) and return it."""
    global _timers
    _timers = TimerStack()
    return _timers


def hierarchical_timer(name: str) -> AbstractContextManager[None]:
    """Time a block as ``name`` in the current run's tree (see the module docs)."""
    return _timers.timer(name)


def timed(func: Callable[P, R]) -> Callable[P, R]:
    """Time every call of ``func`` as its qualified name (``PPOTrainer._update``)."""
    name = func.__qualname__

    @functools.wraps(func)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        with _timers.timer(name):
            return func(*args, **kwargs)

    return wrapper


def timer_tree() -> dict[str, Any]:
    """The current run's tree in ``timers.json``'s format."""
    return _timers.tree()
