"""One behavior's evaluation episodes, played in a process of its own.

An :class:`Evaluator` starts a worker process (``forkserver`` where there is one, else
``spawn``: never ``fork``, which copies torch's threads and locks mid-flight) that builds
environments of its own as the training ones are built
(:func:`~evtrain.run.environments.envs.make_envs`: the same ``env_id``, factory and ``env_kwargs``,
with ``evaluation.env_kwargs`` over them) and keeps them for every evaluation.  Each evaluation
sends it a snapshot of the policy taken at the evaluation's step (pickled, on the CPU) and
later reads back each episode's return and length.  The worker steps its sub-environments one
by one rather than through the vector environment, so that it decides each reset: episode
``i`` starts from ``reset(seed=seed + i)`` on whichever environment is free, the policy acting
on one batch of every environment's observation per step
(:func:`evtrain.run.evaluation.evaluation_worker.play_episodes`).

A process, not a thread: an evaluation steps as many environments as a good part of the
training does (10 CartPole episodes of 500 steps every 10,000 steps is half as many), in
Python that holds the GIL; on a thread of the training process it took the training thread's
turns (+32 % wall time in ``benchmarks/bench_evaluation.py``), in a process it runs on a
core of its own.  The price: the worker's start (its imports, once, off the training thread)
and its memory (a second Python with torch).

A worker that fails never fails the run: one that raises, is killed, or outlasts
``evaluation.timeout`` (then it is killed) makes :meth:`Evaluator.result` raise
:class:`EvaluationFailed`, and the run replaces it with a new one for the next evaluation.  A
video that cannot be written is reported with the evaluation's returns, which still count.  The
worker ignores SIGINT, SIGTERM and SIGHUP, which a terminal, systemd or SLURM send to the whole
process group: they are the run's to handle, and the run ends the worker (SIGKILL once it no
longer answers).
"""

from __future__ import annotations

import contextlib
import io
import logging
import multiprocessing
import os
import signal
import threading
import time
from collections.abc import Callable, Mapping
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import attrs
import torch

from evtrain.config.options import EnvironmentSettings
from evtrain.errors import ConfigError
from evtrain.evaluation.settings import EvaluationSettings
from evtrain.run.evaluation.evaluation_worker import work

logger = logging.getLogger("evtrain")

_JOIN_S = 10.0
"""How long :meth:`Evaluator.close` waits for the worker to end before it is killed."""

_POLL_S = 0.1
"""How often a wait for an evaluation looks at its timeout and at a stop request."""

_FORKSERVER_GONE = 255
"""The exit code ``multiprocessing`` gives a forkserver's worker once the server is gone."""


class EvaluationFailed(RuntimeError):
    """The evaluation worker raised, ended without answering, or outlasted its timeout."""


@attrs.frozen(kw_only=True)
class Episodes:
    """What one evaluation's episodes gave, in episode order."""

    step: int
    returns: tuple[float, ...]
    lengths: tuple[int, ...]
    videos: tuple[tuple[int, Path], ...] = ()
    """The video of each recorded episode: its number and its file."""
    video_failures: tuple[str, ...] = ()
    """Why each video that could not be written was not (its file named)."""
    opponent_stats: dict[str, float] = attrs.field(factory=dict)
    """A PettingZoo behavior's stats against its opponents, by ``<label>/<stat>``."""


class Evaluator:
    """Plays one behavior's evaluations, one at a time, in a worker process of its own."""

    def __init__(
        self,
        behavior: str,
        settings: EvaluationSettings,
        env_settings: EnvironmentSettings,
        behaviors: Mapping[str, Any],
        videos: Path,
        fixed: Mapping[str, torch.nn.Module] | None = None,
    ) -> None:
        """:param videos: the folder of the videos (``evaluation.video``).
        :param fixed: the checkpoint opponents' policies by label (on the CPU)."""
        self.behavior = behavior
        self.timeout = settings.timeout
        kwargs = {**env_settings.env_kwargs, **settings.env_kwargs}
        if settings.video is not None:
            kwargs.setdefault("render_mode", "rgb_array")
        snapshots = {}
        for label, module in (fixed or {}).items():
            buffer = io.BytesIO()
            torch.save(module, buffer)
            snapshots[label] = buffer.getvalue()
        # Against opponents the episodes are played one after another on one copy.
        copies = 1 if settings.opponents else min(settings.num_envs, settings.episodes)
        built = attrs.evolve(
            env_settings,
            num_envs=copies,
            vectorization="sync",  # stepped one by one in the worker
            env_kwargs=kwargs,
        )
        context = _context()
        self._conn, child = context.Pipe()
        self._process = context.Process(
            target=work,
            args=(child, behavior, settings, built, dict(behaviors), videos, snapshots),
            name=f"evtrain-evaluation-{behavior}",
            daemon=True,
        )
        # Started on a thread of its own: the first start of a forkserver waits for the server
        # to import torch and the environments (more than a second), which would hold the
        # training thread back; the first evaluation is due later anyway.
        self._start_error: BaseException | None = None
        self._starter = threading.Thread(
            target=self._start_process, args=(child,), name=f"evtrain-evaluation-start-{behavior}"
        )
        self._starter.start()
        self.running: int | None = None
        """The step of the evaluation in flight, if any."""
        self._deadline = 0.0
        self.worker_cpu_s = 0.0
        """The worker's CPU seconds as of its last evaluation (its start included)."""

    def _start_process(self, child: Connection) -> None:
        try:
            self._process.start()
        except BaseException as error:  # raised on the training thread, at the first start()
            self._start_error = error
        finally:
            child.close()

    def _started(self) -> None:
        """Wait until the worker process is started.

        :raises BaseException: what starting it raised.
        """
        self._starter.join()
        if self._start_error is not None:
            raise self._start_error

    def start(self, step: int, policy: torch.nn.Module, evaluation: int) -> None:
        """Send the worker the ``evaluation``-th evaluation (counted from 0, which says whether
        it is recorded) of ``policy`` (a snapshot nothing else changes).

        :raises RuntimeError: one is still in flight (take its :meth:`result` first).
        :raises EvaluationFailed: the worker has ended (it raised, or was killed).
        """
        if self.running is not None:
            raise RuntimeError(f"an evaluation of {self.behavior} is still running")
        self._started()
        if self._conn.poll():  # the worker failed on its own (building its environments)
            self._raise(*self._receive())
        buffer = io.BytesIO()
        on_cpu = policy if _device_of(policy).type == "cpu" else _cpu_copy(policy)
        torch.save(on_cpu, buffer)
        self._send((step, evaluation, buffer.getvalue()))
        self.running = step
        self._deadline = time.monotonic() + self.timeout

    def result(self, *, wait: bool, stop: Callable[[], bool] = lambda: False) -> Episodes | None:
        """The evaluation in flight once it is done, else ``None``: with ``wait``, waited for
        until it is done or ``stop()`` is true (a signal asked the run to stop).

        :raises EvaluationFailed: the worker raised (its message), ended, or outlasted
            ``evaluation.timeout`` (it is then killed); no evaluation is in flight after it.
        """
        if self.running is None:
            return None
        while not self._conn.poll(self._poll_s(wait)):
            if time.monotonic() >= self._deadline:
                self.running = None
                self._kill()
                raise EvaluationFailed(
                    f"the evaluation of {self.behavior} took more than {self.timeout:g} s "
                    f"(behaviors.{self.behavior}.evaluation.timeout); its worker was killed"
                )
            if not wait or stop():
                return None
        step, self.running = self.running, None
        kind, value = self._receive()
        self._raise(kind, value)
        returns, lengths, videos, failures, self.worker_cpu_s, stats = value
        return Episodes(
            step=step,
            returns=tuple(returns),
            lengths=tuple(lengths),
            videos=tuple((episode, Path(path)) for episode, path in videos),
            video_failures=tuple(failures),
            opponent_stats=dict(stats),
        )

    def close(self) -> None:
        """End the worker (an evaluation in flight is dropped) and its environments."""
        self._starter.join()
        if self._start_error is not None:  # no worker to end
            self._conn.close()
            return
        if self.running is None:
            with contextlib.suppress(OSError, ValueError):
                self._conn.send(None)
            self._process.join(_JOIN_S)
        self._kill()
        self._conn.close()
        self.running = None

    def _poll_s(self, wait: bool) -> float:
        """How long to poll: not at all without ``wait``, else until the next look at the
        stop request, or the deadline if sooner."""
        return min(_POLL_S, max(0.0, self._deadline - time.monotonic())) if wait else 0.0

    def _kill(self) -> None:
        """SIGKILL the worker if it still runs (it ignores SIGTERM), and reap it.

        A forkserver killed by a signal to the process group answers for its workers no more
        (their exit code reads 255): the worker is then killed by its pid."""
        if self._process.is_alive():
            self._process.kill()
            self._process.join(_JOIN_S)
        elif self._process.exitcode == _FORKSERVER_GONE and self._process.pid is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self._process.pid, signal.SIGKILL)

    def _receive(self) -> tuple[str, Any]:
        """The worker's next message.

        :raises EvaluationFailed: it ended without one (killed, or its pipe broke).
        """
        try:
            message: tuple[str, Any] = self._conn.recv()
        except (EOFError, OSError):
            self.running = None
            raise EvaluationFailed(self._ended()) from None
        return message

    def _send(self, message: Any) -> None:
        try:
            self._conn.send(message)
        except (OSError, ValueError):
            with contextlib.suppress(OSError):
                if self._conn.poll():  # why it ended
                    self._raise(*self._receive())
            raise EvaluationFailed(self._ended()) from None

    def _raise(self, kind: str, value: Any) -> None:
        """Raise what the worker reported, if it is an error: a :class:`ConfigError` for the
        environments' options, else :class:`EvaluationFailed`."""
        if kind == "config":
            where = f"behaviors.{self.behavior}.evaluation"
            raise ConfigError(
                [
                    f"{where}: the evaluation environments could not be built: {problem} "
                    f"(check {where}.env_kwargs over env_settings.env_kwargs)"
                    for problem in value
                ]
            )
        if kind == "opponents":  # each names its opponents[i] and the fix
            raise ConfigError(list(value))
        if kind == "error":
            raise EvaluationFailed(f"the evaluation of {self.behavior} failed: {value}")

    def _ended(self) -> str:
        self._process.join(1.0)
        return (
            f"the evaluation process of {self.behavior} ended without answering (exit code "
            f"{self._process.exitcode}); its error, if any, is in the log above"
        )


FORKSERVER_PRELOAD = "evtrain.run.evaluation.forkserver_preload"
"""Preloaded last by the forkserver: it freezes what the server imported, so that the server
exits without walking torch's objects (the module's docstring)."""


def _context() -> Any:
    """``forkserver`` (its server imports the worker's module once, torch with it: each worker forks
    from there ready to run), else ``spawn``."""
    if "forkserver" not in multiprocessing.get_all_start_methods():
        return multiprocessing.get_context("spawn")
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload([work.__module__, FORKSERVER_PRELOAD])
    return context


def _device_of(policy: torch.nn.Module) -> torch.device:
    return next(iter(policy.parameters()), torch.empty(0)).device


def _cpu_copy(policy: torch.nn.Module) -> torch.nn.Module:
    import copy

    return copy.deepcopy(policy).cpu()
