"""A stand-in for Ray's actor calls, in this process, for what a real cluster cannot be made to
do at a chosen moment: be slow to see that an actor died.

When an actor's process dies, the driver learns it from the call that was running (Ray raises
``ActorUnavailableError`` while the actor has restarts left).  Ray's control store learns it
from the node, and until it has published the restart, calls the driver sends go to the dead
process and fail the same way — each retry of a call (``max_task_retries``) too.  On a busy
machine that window outlasts a retry or two: the race behind one death counted twice.

:class:`StandInRay` plays that: its actors run
:class:`~evtrain.run.environments.ray_worker.EnvWorker` here;
:meth:`StandInRay.kill_during_next_step` makes an actor's next ``step`` die, its process replaced by
a new one, with the next ``stale`` call attempts failing as Ray's would before it caught up.  The
exceptions are Ray's own.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any

from ray import exceptions

from evtrain.run.environments.ray_worker import EnvMaker, EnvWorker

_pids = itertools.count(1000)


class _Ref:
    """A finished call: its value, or the exception ``get`` raises."""

    def __init__(self, call: Callable[[], Any]) -> None:
        try:
            self.value, self.error = call(), None
        except exceptions.RayActorError as error:
            self.value, self.error = None, error


class _Method:
    def __init__(self, actor: _Actor, name: str, retries: int = 0) -> None:
        self.actor, self.name, self.retries = actor, name, retries

    def options(self, *, max_task_retries: int) -> _Method:
        return _Method(self.actor, self.name, max_task_retries)

    def remote(self, *args: Any) -> _Ref:
        return _Ref(lambda: self.actor.invoke(self.name, args, self.retries))


class _Actor:
    """An ``EnvWorker`` whose process can die; ``pid`` names the process now."""

    def __init__(self, maker: EnvMaker, count: int) -> None:
        self.maker, self.count = maker, count
        self.worker = EnvWorker(maker, count)
        self.pid = next(_pids)
        self.dies_in_step: int | None = None
        """Set: the next ``step`` dies, and this many call attempts after it fail."""
        self.stale = 0
        """Call attempts that still fail because Ray has not seen the restart."""

    def __getattr__(self, name: str) -> _Method:
        return _Method(self, name)

    def invoke(self, name: str, args: tuple[Any, ...], retries: int) -> Any:
        attempt = 0
        while self.stale:  # each attempt goes to the dead process: one retry spent
            self.stale -= 1
            if retries != -1 and attempt >= retries:
                raise exceptions.ActorUnavailableError("RpcError: Socket closed", None)
            attempt += 1
        if name == "step" and self.dies_in_step is not None:
            self.stale, self.dies_in_step = self.dies_in_step, None
            self.worker = EnvWorker(self.maker, self.count)  # Ray runs the constructor again
            self.pid = next(_pids)
            raise exceptions.ActorUnavailableError("RpcError: Socket closed", None)
        if name == "describe":
            env = self.worker.envs[0]
            return "standin-node", self.pid, env.observation_space, env.action_space
        return getattr(self.worker, name)(*args)


class StandInRay:
    """The few calls :class:`~evtrain.run.environments.ray_envs.RayVectorEnv` makes of the ``ray``
    module."""

    exceptions = exceptions

    def __init__(self) -> None:
        self.actors: list[_Actor] = []

    def remote(self, cls: type[EnvWorker]) -> StandInRay:
        return self  # the actor class: options(...).remote(maker, count) makes an actor

    def options(self, **_: Any) -> _ActorClass:
        return _ActorClass(self)

    def kill(self, actor: _Actor, *, no_restart: bool) -> None:
        pass

    def get(self, refs: Any, timeout: float | None = None) -> Any:
        if isinstance(refs, list):
            return [self.get(ref) for ref in refs]
        if refs.error is not None:
            raise refs.error
        return refs.value

    def kill_during_next_step(self, index: int, stale: int) -> None:
        """Actor ``index`` dies in its next ``step``; the ``stale`` call attempts after it fail
        as they do before Ray has seen the death."""
        self.actors[index].dies_in_step = stale


class _ActorClass:
    def __init__(self, ray: StandInRay) -> None:
        self.ray = ray

    def remote(self, maker: EnvMaker, count: int) -> _Actor:
        actor = _Actor(maker, count)
        self.ray.actors.append(actor)
        return actor
