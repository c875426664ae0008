"""The loop of a run whose behaviors share their environment (``env_settings.shared_env``):
every behavior acts in every step of the same instances.

Each trainer keeps its own loop: :meth:`~evtrain.trainers.base.Trainer.advance` collects a
rollout from its view of the shared environment (:class:`~evtrain.multiagent.shared.
BehaviorView`) and learns from it, as on copies of its own.  What changes is who takes the
step: a view's ``step`` hands the behavior's actions over and waits, and once every behavior
has handed its actions over, :meth:`SharedSteps.take_turns` steps the instances and gives each its
part.  To do so each behavior's turns (each one ``advance``) run on a thread of the
behavior's, and the loop and the turns take strict turns: exactly one of them runs at any time,
in the behaviors' order, so a run does the same thing in the same order every time (the threads
are coroutines, not parallelism).  The threads end with the loop.

A turn ends when its ``advance`` returns; the loop then does what the run does after any turn
(progress, a due checkpoint), and the behavior's next turn starts in the same step.  Each
behavior keeps its own steps, summaries and checkpoints.  A behavior that reaches its
``max_steps`` before another keeps acting with its final policy (the one it exports), learning
nothing, until every behavior is done.  A stop request (an interrupt, a subscriber's) lets the
turns in flight end, as a run on copies ends the turn in progress, then stops.

What shared environments do not support yet is refused with the options
(:mod:`evtrain.config.shared_env`), and a distributed run when the run starts.
"""

from __future__ import annotations

import copy
import functools
import threading
from collections.abc import Callable, Iterable, Mapping
from queue import SimpleQueue
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from evtrain.config.shared_env import FALLBACK, SHARED_ENV, shared_env_problems
from evtrain.errors import ConfigError
from evtrain.events.payloads import RunStatus
from evtrain.run.environments.co_players import PolicyCoPlayer

if TYPE_CHECKING:
    from evtrain.bus.reporter import StatsReporter
    from evtrain.config.options import RunOptions
    from evtrain.multiagent.copies import StepRecord
    from evtrain.multiagent.shared import BehaviorView, SharedEnvironment
    from evtrain.run.loop import ProgressHook
    from evtrain.run.parameters.curriculum import Curriculum
    from evtrain.trainers.base import Trainer
    from evtrain.unity.behaviors import UnityBehaviors, UnityBehaviorView
    from evtrain.world import World


class SharedSteps:
    """A run's shared environment (``env_settings.shared_env``) and the loop that drives every
    behavior in it (see the module's docs).

    The environment is made when the first behavior asks for its :meth:`view` (where a run on
    copies makes a behavior's), and closed with the first view a trainer closes: a run that
    fails before a trainer holds a view has none to close.

    :param make: makes the environment.
    :param after_step: called after each step of the environment with the stats reporter of
        every behavior still learning (a Unity run's builds send statistics of their own).
    """

    def __init__(
        self,
        make: Callable[[], SharedEnvironment | UnityBehaviors],
        after_step: Callable[[Iterable[StatsReporter]], None] | None = None,
    ) -> None:
        self._make = make
        self._after_step = after_step
        self._env: SharedEnvironment | UnityBehaviors | None = None
        self._idle: dict[str, PolicyCoPlayer] = {}
        """What acts for the behaviors that learn no more (done, or stopping)."""

    @classmethod
    def of_run(
        cls,
        options: RunOptions,
        world: World,
        curriculum: Curriculum | None = None,
        interrupted: Callable[[], str | None] = lambda: None,
    ) -> SharedSteps | None:
        """The run's shared environment, to be made from ``env_settings``, each instance in
        ``curriculum``'s wrapper (``environment_parameters``; a Unity run's builds get them on
        their side channel, :mod:`~evtrain.run.environments.build_channels`); ``None`` when
        ``shared_env`` is off.

        :param interrupted: the interrupt that asked the run to stop, if any (a Unity build
            that has not connected yet is not waited for then).

        :raises ConfigError: what :func:`~evtrain.config.shared_env.shared_env_problems`
            names, or a distributed run.
        """
        if not options.env_settings.shared_env:
            return None
        from evtrain.run.environments.envs import make_shared_env

        problems = shared_env_problems(options)
        if world.size > 1:
            problems.append(
                f"{SHARED_ENV}: not supported in a distributed run ({world.size} ranks) yet; "
                f"run one process, {FALLBACK}"
            )
        if problems:
            raise ConfigError(problems)
        if options.env_settings.unity:
            from evtrain.run.environments.build_channels import BuildChannels

            builds = BuildChannels(options, curriculum, interrupted)
            return cls(builds.make, after_step=builds.record_stats)
        wrapper = None if curriculum is None else curriculum.wrapper()
        make = functools.partial(
            make_shared_env, options.env_settings, options.behaviors, wrapper=wrapper
        )
        return cls(make)

    @property
    def env(self) -> SharedEnvironment | UnityBehaviors:
        """The environment, made at the first use.

        :raises ConfigError: it cannot be shared, or its agents do not fit the behaviors.
        """
        if self._env is None:
            self._env = self._make()
        return self._env

    def view(self, behavior: str) -> BehaviorView | UnityBehaviorView:
        """Behavior ``behavior``'s environments: its view of the shared one."""
        return self.env.view(behavior)

    def take_turns(
        self,
        trainers: Mapping[str, Trainer],
        advance: Callable[[Trainer], None],
        *,
        stop_requested: Callable[[], bool],
        world: World,
        progress: ProgressHook | None,
        after: Callable[[str, Trainer], None] | None = None,
    ) -> RunStatus:
        """``advance`` every behavior, each in its view of the shared environment, until all
        reach ``max_steps`` or a stop is requested; :func:`evtrain.run.loop.take_turns`'s
        contract, but every behavior acts in every step.

        :param trainers: each trainer's environments are its :meth:`view`.
        :param after: called after each turn, once ``progress`` has its step (the runner saves
            a due checkpoint there).
        """
        workers: dict[str, _Worker] = {}
        in_turn: set[str] = set()
        """The behaviors whose turn is in flight."""
        results: dict[str, StepRecord] = {}
        """The part of the last step of each behavior whose turn waits for it."""
        stopping = False
        try:
            while True:
                actions: dict[str, npt.NDArray[Any]] = {}
                for name, trainer in trainers.items():
                    chosen = None
                    while chosen is None:
                        if name not in in_turn:
                            if stopping or trainer.should_stop:
                                break
                            if name not in workers:
                                workers[name] = _Worker(name, functools.partial(advance, trainer))
                                self.view(name).exchange = workers[name].exchange
                            in_turn.add(name)
                        chosen = workers[name].resume(results.pop(name, None))
                        if chosen is not None:
                            break
                        in_turn.discard(name)  # its advance returned: one turn done
                        if progress is not None:
                            progress(name, trainer.step, trainer.settings.max_steps)
                        if after is not None:
                            after(name, trainer)
                        stopping = stopping or world.any(stop_requested())
                    actions[name] = self._idle_actions(name, trainer) if chosen is None else chosen
                if not in_turn:
                    return RunStatus.INTERRUPTED if stopping else RunStatus.COMPLETED
                step = self.env.step(actions)
                if self._after_step is not None:
                    self._after_step([trainers[name].reporter for name in sorted(in_turn)])
                for name in in_turn:
                    results[name] = step[name]
        finally:  # nothing of the turns runs on (at the end, after a failure, an abort)
            for worker in workers.values():
                worker.cancel()

    def _idle_actions(self, name: str, trainer: Trainer) -> npt.NDArray[Any]:
        """The actions of behavior ``name``, which learns no more: its final policy's."""
        view = self.view(name)
        player = self._idle.get(name)
        if player is None:
            import torch

            trainer.wait_for_update()
            with torch.no_grad():
                frozen = copy.deepcopy(trainer.policy_module())
            player = self._idle[name] = PolicyCoPlayer(frozen, view.single_observation_space)
        actions: npt.NDArray[Any] = np.asarray(player(view.observations()))
        return actions


class _Cancelled(BaseException):
    """Raised in a turn the loop abandons (the run failed or was aborted), to unwind it."""


_CANCEL = object()


class _Worker:
    """The thread a behavior's turns run on, taking strict turns with the loop: each
    :meth:`resume` runs it until it hands over its actions for a step (:meth:`exchange`) or its
    ``advance`` returns; only then does the loop go on.  The next :meth:`resume` after an
    ``advance`` returned starts the next one."""

    def __init__(self, name: str, advance: Callable[[], None]) -> None:
        self._to_turn: SimpleQueue[Any] = SimpleQueue()
        self._to_loop: SimpleQueue[tuple[str, Any]] = SimpleQueue()
        self._thread = threading.Thread(
            target=self._main, args=(advance,), name=f"evtrain-turns-{name}", daemon=True
        )
        self._thread.start()

    def _main(self, advance: Callable[[], None]) -> None:
        while self._to_turn.get() is not _CANCEL:
            try:
                advance()
            except _Cancelled:
                return
            except BaseException as error:  # the loop's thread raises it
                self._to_loop.put(("error", error))
                return
            self._to_loop.put(("done", None))

    def exchange(self, actions: npt.NDArray[Any]) -> StepRecord:
        """(The turn's side.)  Hand ``actions`` for the next step over; its result, once the
        loop took the step."""
        self._to_loop.put(("actions", actions))
        result = self._to_turn.get()
        if result is _CANCEL:
            raise _Cancelled
        record: StepRecord = result
        return record

    def resume(self, result: StepRecord | None) -> npt.NDArray[Any] | None:
        """(The loop's side.)  Go on with the turn, ``result`` answering its last
        :meth:`exchange` (``None`` to start a turn); its actions for the next step, or ``None``
        when its ``advance`` returned.  What the ``advance`` raised is raised here."""
        self._to_turn.put(result)
        kind, value = self._to_loop.get()
        if kind == "error":
            raise value
        actions: npt.NDArray[Any] | None = value
        return actions

    def cancel(self) -> None:
        """End the thread and wait until it has: at once when it waits for the loop, else at
        its turn's next step (or when its ``advance`` returns)."""
        self._to_turn.put(_CANCEL)
        self._thread.join()
