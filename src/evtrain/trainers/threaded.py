"""``threaded: true``: a trainer's update runs on a thread of its own while the environments step.

ML-Agents' meaning: "Allow environments to step while updating the model. This might result
in a training speedup, especially when using SAC."  Here the training thread keeps stepping
the environments (and recording episodes, counting steps, writing summaries) while one
:class:`UpdateThread` per behavior runs the update that was handed to it; torch releases the
GIL inside its kernels, so the two overlap as far as the update's Python overhead allows.

The environments act with an :class:`ActingCopy` of the networks, never with the networks the
update is writing: that copy is refreshed from the trained networks each time the training
thread has waited for an update (:meth:`evtrain.trainers.base.Trainer.wait_for_update`), so
acting lags the training by the one update in flight.  What the update reads (the rollout
batch, SAC's replay buffer) is not written while it runs: PPO hands it a batch of its own,
SAC stores the transitions stepped meanwhile once the update is done.  A trainer draws its
actions from a generator of its own in threaded mode (``Trainer.act_generator``) so that the
two threads never draw from one generator in an order that depends on timing: a threaded run
is as reproducible as an unthreaded one.

An exception raised by the update is kept and raised on the training thread at the next
wait, with a note naming the behavior; never lost, never raised twice.

:class:`ThreadedUpdates` does this for a trainer, which has one
(:attr:`~evtrain.trainers.base.Trainer.update_runner`): a loop hands its update to
:meth:`ThreadedUpdates.run` and refreshes its acting copies when told they caught up; without
``threaded`` the update runs at once and nothing else happens, as before.
"""

from __future__ import annotations

import copy
import logging
import threading
import weakref
from collections.abc import Callable
from typing import Any, Generic, TypeVar

import torch
from torch import nn

from evtrain.errors import ConfigError
from evtrain.timers import hierarchical_timer
from evtrain.world import World

__all__ = ["ActingCopy", "ThreadedUpdates", "UpdateThread"]

logger = logging.getLogger("evtrain")

M = TypeVar("M", bound=nn.Module)

_POLL_S = 0.05
"""How often a waiting training thread checks that the worker thread is still alive."""
_ACTING_SEED = 0x5EED
"""Added to the seed of a threaded trainer's :attr:`~ThreadedUpdates.act_generator`."""


class ThreadedUpdates:
    """What a trainer does with ``threaded: true``: the update on the behavior's
    :class:`UpdateThread`, waited for by whoever reads the trained networks.  A trainer *has*
    one (:attr:`evtrain.trainers.base.Trainer.update_runner`); without ``threaded`` it runs each
    update on the calling thread and waits for nothing.

    :param caught_up: called once no update is running after a wait (or after the networks
        were replaced): the owner refreshes the copies its environments act with.
    :raises ConfigError: ``threaded`` in a distributed run.
    """

    def __init__(
        self,
        behavior_name: str,
        threaded: bool,
        *,
        world: World,
        device: torch.device,
        seed: int,
        generator: torch.Generator,
        caught_up: Callable[[], None],
    ) -> None:
        self._caught_up = caught_up
        self.thread: UpdateThread | None = None
        """Where the updates run with ``threaded: true``; ``None``: on the calling thread."""
        self.act_generator = generator
        """The action draws of the environments' steps: ``generator`` itself, or with
        ``threaded`` a generator of their own, so that the update thread's draws and theirs
        never interleave in an order that depends on timing."""
        if not threaded:
            return
        if world.size > 1:
            raise ConfigError(
                [
                    f"behaviors.{behavior_name}.threaded: true is not supported in a "
                    f"distributed run (world size {world.size}): the update's all-reduces "
                    "would interleave with the environment steps' collectives; set threaded: "
                    "false (every rank steps its environments already)"
                ]
            )
        self.thread = UpdateThread(f"evtrain-update[{behavior_name}]", behavior_name)
        weakref.finalize(self, self.thread.shutdown)
        self.act_generator = torch.Generator(device).manual_seed(seed + _ACTING_SEED)

    def wait(self) -> None:
        """With ``threaded: true``: wait until the update running on the update thread is done
        (re-raising what it raised), then bring the networks the environments act with up to
        date.  Nothing otherwise.

        Whoever reads the trained networks calls it first: a summary, ``state_dict`` and the
        final summary do, and the runner before it exports a policy.
        """
        if self.thread is None:
            return
        with hierarchical_timer("wait_for_update"):
            self.thread.wait()
        self._refresh()

    def close(self) -> None:
        """End the update thread (``threaded: true``) once its update is done; an error that
        update raised is logged, not raised (a run closes its trainers while it ends, maybe on
        an error of its own)."""
        if self.thread is not None:
            self.thread.close()

    def run(self, update: Callable[..., None], *args: Any) -> None:
        """``update(*args)`` now, or with ``threaded`` on the update thread: then it returns at
        once, and the loop goes on stepping the environments with the networks of before the
        update (see ``caught_up``) until it waits for it."""
        if self.thread is None:
            update(*args)
        else:
            self.thread.start(lambda: update(*args))

    def loaded(self) -> None:
        """The networks were replaced (a checkpoint loaded, rank 0's broadcast): with
        ``threaded``, the acting copies follow."""
        if self.thread is not None:
            self._refresh()

    def _refresh(self) -> None:
        self._caught_up()


class UpdateThread:
    """Runs one update at a time on a daemon worker thread (started with the first update).

    :param name: the thread's name (``evtrain-update[<behavior>]``) and, in the note added to
        an error the update raises, what ran it.
    """

    def __init__(self, name: str, behavior: str) -> None:
        self.name = name
        self.behavior = behavior
        self._cond = threading.Condition()
        self._job: Callable[[], None] | None = None
        self._running = False
        """An update was handed over and has not finished."""
        self._error: BaseException | None = None
        self._closed = False
        self._thread: threading.Thread | None = None

    @property
    def busy(self) -> bool:
        """An update is running (or handed over and about to)."""
        with self._cond:
            return self._running

    def start(self, update: Callable[[], None]) -> None:
        """Hand ``update`` to the worker thread and return at once.

        :raises RuntimeError: an update is still running (:meth:`wait` for it first), or the
            thread was closed.
        """
        with self._cond:
            if self._running:
                raise RuntimeError(f"{self.name}: an update is still running; wait for it first")
            if self._closed:
                raise RuntimeError(f"{self.name} is closed")
            self._job = update
            self._running = True
            if self._thread is None:
                self._thread = threading.Thread(target=self._work, name=self.name, daemon=True)
                self._thread.start()
            self._cond.notify_all()

    def wait(self) -> bool:
        """Until the update handed over last has finished; returns whether one was running.

        Interruptible (Ctrl-C raises ``KeyboardInterrupt`` here; the update goes on).

        :raises BaseException: what the update raised, once, with a note naming the behavior.
        :raises RuntimeError: the worker thread died without finishing the update.
        """
        with self._cond:
            waited = self._running
            while self._running:
                thread = self._thread
                if thread is not None and not thread.is_alive():
                    raise RuntimeError(f"{self.name} died during an update")
                self._cond.wait(_POLL_S)
            error, self._error = self._error, None
        if error is not None:
            raise error
        return waited

    def close(self) -> None:
        """Wait for the update still running, then end the worker thread.  An error it raised
        is logged, not raised: a run closes its trainers while ending already (on an error of
        its own, possibly), and :meth:`wait` is where errors are raised."""
        try:
            self.wait()
        except Exception:
            logger.exception("The update of %s failed while the run was ending", self.behavior)
        self.shutdown()
        if self._thread is not None:
            self._thread.join(_POLL_S)  # idle now: it ends at once

    def shutdown(self) -> None:
        """End the worker thread once it is idle, without waiting (safe from any thread, e.g. a
        finalizer)."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()

    def _work(self) -> None:
        while True:
            with self._cond:
                while self._job is None and not self._closed:
                    self._cond.wait()
                if self._job is None:
                    return
                job, self._job = self._job, None
            error: BaseException | None = None
            try:
                # The worker's own timer tree: ``update_thread`` at the root of timers.json.
                with hierarchical_timer("update_thread"):
                    job()
            except BaseException as raised:  # raised on the training thread instead
                error = raised
                if hasattr(raised, "add_note"):  # Python 3.11+
                    raised.add_note(
                        f"(raised by the update of behavior {self.behavior!r} on its own thread, "
                        "threaded: true)"
                    )
            finally:
                del job  # the trainer's bound method: let a dropped trainer be collected
                with self._cond:
                    self._error = error
                    self._running = False
                    self._cond.notify_all()


class ActingCopy(Generic[M]):
    """A frozen copy of ``source`` that the environments act with while ``source`` trains.

    Parameters and buffers are copied once (``copy.deepcopy``: views of one flat parameter
    stay views of one copied buffer) and then refreshed in place by :meth:`refresh`; the copy
    needs no gradients.
    """

    def __init__(self, source: M) -> None:
        with torch.no_grad():
            module = copy.deepcopy(source).requires_grad_(False)
        for parameter in module.parameters():
            parameter.grad = None
        self.module: M = module
        """The copy to act with."""
        self._pairs = [
            (mine, theirs) for mine, theirs in zip(_tensors(module), _tensors(source), strict=True)
        ]

    @torch.no_grad()
    def refresh(self) -> None:
        """Make the copy equal to ``source`` again (call it while nothing writes ``source``)."""
        for mine, theirs in self._pairs:
            mine.copy_(theirs)


def _tensors(module: nn.Module) -> list[torch.Tensor]:
    return [*module.parameters(), *module.buffers()]
