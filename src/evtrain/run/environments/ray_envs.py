"""``vectorization: ray``: the run's ``num_envs`` environments in Ray actors ("workers", each
an :class:`~evtrain.run.environments.ray_worker.EnvWorker`), behind a Gymnasium ``VectorEnv``.

One vector step sends each worker its environments' actions in one remote call, all calls at
once, and then gathers them: a step costs one round trip per worker, not per environment.
Workers are placed with Ray's ``SPREAD`` strategy, over the cluster's nodes, each reserving
``env_settings.ray.cpus_per_worker`` CPUs.  The trainers see what ``sync`` gives them: the
``SAME_STEP`` autoreset, ``final_obs``/``final_info`` in the infos, environment ``i`` reset
with ``seed + i`` (so ``sync`` and ``ray`` step through the same trajectories), and ``call``
reaching every environment (lesson changes of ``environment_parameters``).

A worker whose process dies is restarted by Ray (``max_restarts``); its environments are made
anew and reset, and that step reports each of their episodes as **truncated**, its final
observation the last one the trainer saw, its reward 0.  Calls that changed the environments
(``set_attr``, and ``call`` of a method whose name starts with ``set_``, as the curriculum's
``set_environment_parameters``) are replayed on the new ones first.  Each loss is logged and
counted (:meth:`RayVectorEnv.take_worker_restarts`; the trainers report it as
``Environment/Worker Restarts``) — once per death, however many calls Ray failed before it saw
the death; a worker lost once more than ``max_restarts`` stops the run with
:class:`~evtrain.errors.EnvWorkerError`.

Ray is imported only here, when a run asks for it.
"""

from __future__ import annotations

import contextlib
import copy
import logging
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from gymnasium.vector import AutoresetMode, VectorEnv
from gymnasium.vector.utils import batch_space, concatenate, create_empty_array, iterate

from evtrain.config.options import EnvironmentSettings, RaySettings
from evtrain.errors import ConfigError, EnvWorkerError
from evtrain.extras import install_hint
from evtrain.run.environments.ray_worker import EnvMaker, EnvWorker, StepResult

logger = logging.getLogger("evtrain")

RESTART_TIMEOUT_S = 600.0
"""How long a lost worker may take to answer from its new process (Ray starts one slowly on a
busy node) before the run stops."""


def import_ray() -> Any:
    """The ``ray`` module, or a one-line :class:`ConfigError` saying how to install it."""
    try:
        import ray
    except ImportError:
        raise ConfigError(
            [
                "env_settings.vectorization: 'ray' needs Ray, which is not installed; "
                f"{install_hint('ray')} (or use vectorization: async)"
            ]
        ) from None
    return ray


def connect(settings: RaySettings) -> Any:
    """Ray, connected to ``settings.address`` (or a Ray of its own in this process) unless
    this process is connected already."""
    ray = import_ray()
    if ray.is_initialized():
        return ray
    try:
        if settings.address is None:
            ray.init(address="local", include_dashboard=False, logging_level=logging.WARNING)
        else:
            ray.init(address=settings.address, logging_level=logging.WARNING)
    except (ConnectionError, ValueError, RuntimeError) as error:
        raise ConfigError(
            [
                f"env_settings.ray.address: cannot connect to Ray at {settings.address!r} "
                f"({type(error).__name__}: {error}); start its head with ray start --head, or "
                "set address: null for a Ray of its own in this process"
            ]
        ) from None
    return ray


def worker_count(settings: EnvironmentSettings, ray: Any) -> int:
    """``ray.workers``, or one per CPU of the cluster (as ``cpus_per_worker`` counts them), at
    most ``num_envs``.

    :raises ConfigError: more workers than environments.
    """
    wanted = settings.ray.workers
    if wanted is None:
        cpus = float(ray.cluster_resources().get("CPU", 1.0))
        per = settings.ray.cpus_per_worker
        wanted = int(cpus // per) if per > 0 else settings.num_envs
        return max(1, min(wanted, settings.num_envs))
    if wanted > settings.num_envs:
        raise ConfigError(
            [
                f"env_settings.ray.workers: {wanted} workers for num_envs {settings.num_envs}: "
                "each worker needs at least one environment; set workers to at most num_envs "
                "(or null: one per CPU of the cluster)"
            ]
        )
    return wanted


def make_ray_envs(settings: EnvironmentSettings, maker: EnvMaker) -> RayVectorEnv:
    """``settings.num_envs`` environments made by ``maker`` in Ray workers."""
    ray = connect(settings.ray)
    return RayVectorEnv(maker, settings.num_envs, worker_count(settings, ray), settings.ray)


def _shares(num_envs: int, workers: int) -> list[range]:
    """Which environments each worker holds: consecutive, as even as can be."""
    base, extra = divmod(num_envs, workers)
    shares, start = [], 0
    for w in range(workers):
        end = start + base + (1 if w < extra else 0)
        shares.append(range(start, end))
        start = end
    return shares


class RayVectorEnv(VectorEnv[Any, Any, Any]):
    """``num_envs`` environments made by ``maker``, in ``workers`` Ray actors (see the module).

    :param settings: the actors' CPUs and restarts.
    :raises EnvWorkerError: a worker could not make its environments.
    """

    def __init__(self, maker: EnvMaker, num_envs: int, workers: int, settings: RaySettings) -> None:
        ray = import_ray()
        self._ray = ray
        self.settings = settings
        self.num_envs = num_envs
        self.metadata = {"autoreset_mode": AutoresetMode.SAME_STEP}
        self.render_mode = None
        self.shares = _shares(num_envs, workers)
        """The environments of each worker."""
        actor = ray.remote(EnvWorker).options(
            num_cpus=settings.cpus_per_worker,
            max_restarts=settings.max_restarts,
            max_task_retries=0,
            scheduling_strategy="SPREAD",
        )
        self.workers = [actor.remote(maker, len(share)) for share in self.shares]
        try:
            described = self._gather([w.describe.remote() for w in self.workers], "construction")
        except EnvWorkerError:
            for worker in self.workers:
                ray.kill(worker, no_restart=True)
            raise
        self.nodes = [node for node, *_ in described]
        """The Ray node id of each worker."""
        self._pids: list[int] = [pid for _, pid, *_ in described]
        """The process of each worker that last answered."""
        _, _, self.single_observation_space, self.single_action_space = described[0]
        self.observation_space = batch_space(self.single_observation_space, num_envs)
        self.action_space = batch_space(self.single_action_space, num_envs)
        self._observations: Any = create_empty_array(self.single_observation_space, n=num_envs)
        self._env_obs: list[Any] = [None] * num_envs
        self._seeds: list[int | None] = [None] * num_envs
        self._restarts = [0] * workers
        self._untaken = 0
        self._replayed: list[Callable[[Any, range, int], Any]] = []
        """What changed the environments, replayed on a restarted worker's new ones."""
        logger.info(
            "Ray environment workers: %s",
            "; ".join(
                f"worker {w} (environments {_span(share)}) on node {node[:8]} pid {pid}"
                for w, (share, (node, pid, *_)) in enumerate(
                    zip(self.shares, described, strict=True)
                )
            ),
        )

    # -- the VectorEnv API -------------------------------------------------------------------

    def reset(
        self,
        *,
        seed: int | Sequence[int | None] | None = None,
        options: dict[str, Any] | None = None,
    ) -> tuple[Any, dict[str, Any]]:
        if seed is None:
            self._seeds = [None] * self.num_envs
        elif isinstance(seed, int):
            self._seeds = [seed + i for i in range(self.num_envs)]
        else:
            self._seeds = list(seed)
        refs = [
            w.reset.remote([self._seeds[i] for i in share], options)
            for w, share in zip(self.workers, self.shares, strict=True)
        ]
        infos: dict[str, Any] = {}
        for share, resets in zip(self.shares, self._gather(refs, "reset"), strict=True):
            for i, (obs, info) in zip(share, resets, strict=True):
                self._env_obs[i] = obs
                infos = self._add_info(infos, info, i)
        return self._batched(), infos

    def step(
        self, actions: Any
    ) -> tuple[
        Any, np.ndarray[Any, Any], np.ndarray[Any, Any], np.ndarray[Any, Any], dict[str, Any]
    ]:
        per_env = list(iterate(self.action_space, actions))
        refs = [
            w.step.remote([per_env[i] for i in share])
            for w, share in zip(self.workers, self.shares, strict=True)
        ]
        rewards = np.zeros(self.num_envs, dtype=np.float64)
        terminated = np.zeros(self.num_envs, dtype=np.bool_)
        truncated = np.zeros(self.num_envs, dtype=np.bool_)
        infos: dict[str, Any] = {}
        for w, ref in enumerate(refs):
            results = self._result(ref)
            if results is None:
                results = self._restarted(w)
            for i, (obs, reward, term, trunc, info, final) in zip(
                self.shares[w], results, strict=True
            ):
                if final is not None:
                    final_info = {"final_obs": final[0], "final_info": final[1]}
                    infos = self._add_info(infos, final_info, i)
                self._env_obs[i] = obs
                rewards[i], terminated[i], truncated[i] = reward, term, trunc
                infos = self._add_info(infos, info, i)
        return self._batched(), rewards, terminated, truncated, infos

    def call(self, name: str, *args: Any, **kwargs: Any) -> tuple[Any, ...]:
        def send(worker: Any, share: range, retries: int = 0) -> Any:
            return worker.call.options(max_task_retries=retries).remote(name, args, kwargs)

        if name.startswith("set_"):
            self._replayed.append(send)
        answers = self._gather(self._send(send), f"call({name!r})")
        return tuple(value for values in answers for value in values)

    def get_attr(self, name: str) -> tuple[Any, ...]:
        return self.call(name)

    def set_attr(self, name: str, values: list[Any] | tuple[Any, ...] | Any) -> None:
        if not isinstance(values, (list, tuple)):
            values = [values] * self.num_envs

        def send(worker: Any, share: range, retries: int = 0) -> Any:
            method = worker.set_attr.options(max_task_retries=retries)
            return method.remote(name, [values[i] for i in share])

        self._replayed.append(send)
        self._gather(self._send(send), f"set_attr({name!r})")

    def close_extras(self, **kwargs: Any) -> None:
        for worker in self.workers:
            with contextlib.suppress(self._ray.exceptions.RayActorError):
                self._ray.get(worker.close.remote())  # one gone already has nothing to close
            self._ray.kill(worker, no_restart=True)

    # -- restarts ----------------------------------------------------------------------------

    def take_worker_restarts(self) -> int:
        """Workers lost (and restarted) since the last call: the trainers report it with each
        summary as ``Environment/Worker Restarts``."""
        taken, self._untaken = self._untaken, 0
        return taken

    def _result(self, ref: Any) -> list[StepResult] | None:
        """A worker's step, ``None`` when it was lost (during the call or before it)."""
        try:
            results: list[StepResult] | None = self._ray.get(ref)
        except self._ray.exceptions.RayActorError:
            return None
        return results

    def _restarted(self, w: int) -> list[StepResult]:
        """Worker ``w``'s step after it was lost: its new environments reset, each episode
        truncated (see the module).

        One death is counted once.  Calls Ray sends before it has seen the death fail too
        (``ActorUnavailableError``): those are the same loss, so the worker is asked for its
        process id, with retries until it answers from its new process, and a loss is counted
        again only when a process that answered is gone.  Ray says when the worker is gone for
        good (``ActorDiedError``: its ``max_restarts`` are spent)."""
        ray, worker, share = self._ray, self.workers[w], self.shares[w]
        self._lost(w)
        answered = False  # whether the new process answered (so that its death is another)
        deadline = time.monotonic() + RESTART_TIMEOUT_S
        while True:
            try:
                describe = worker.describe.options(max_task_retries=-1)
                left = max(0.0, deadline - time.monotonic())
                _, pid, *_ = ray.get(describe.remote(), timeout=left)
                if answered and pid != self._pids[w]:
                    self._lost(w)
                self._pids[w], answered = pid, True
                resets = self._renew(w, self._restarts[w])
            except ray.exceptions.ActorUnavailableError:
                if time.monotonic() < deadline:
                    continue  # lost again, or Ray not caught up yet: the process id says which
                raise self._not_back(w) from None
            except ray.exceptions.RayActorError:
                self._restarts[w] = max(self._restarts[w], self.settings.max_restarts + 1)
                raise self._spent(w) from None
            except ray.exceptions.GetTimeoutError:
                raise self._not_back(w) from None
            return [
                (obs, 0.0, False, True, info, (self._env_obs[i], {}))
                for i, (obs, info) in zip(share, resets, strict=True)
            ]

    def _lost(self, w: int) -> None:
        """Count one loss of worker ``w``; log it, or raise past ``max_restarts``."""
        self._restarts[w] += 1
        self._untaken += 1
        restarts = self._restarts[w]
        if restarts > self.settings.max_restarts:
            raise self._spent(w)
        logger.warning(
            "Ray environment worker %d (environments %s) was lost; restarted (%d of "
            "env_settings.ray.max_restarts %d): its episodes end truncated",
            w,
            _span(self.shares[w]),
            restarts,
            self.settings.max_restarts,
        )

    def _not_back(self, w: int) -> EnvWorkerError:
        return EnvWorkerError(
            f"Ray environment worker {w} (environments {_span(self.shares[w])}) was lost and "
            f"did not come back within {RESTART_TIMEOUT_S:.0f} s; find out why its process "
            "cannot start (its Ray logs: ray logs, or the session's logs folder)"
        )

    def _spent(self, w: int) -> EnvWorkerError:
        return EnvWorkerError(
            f"Ray environment worker {w} (environments {_span(self.shares[w])}) was lost "
            f"{self._restarts[w]} time(s), more than env_settings.ray.max_restarts "
            f"({self.settings.max_restarts}) allows; raise it, or find out why its "
            "process dies (its Ray logs: ray logs, or the session's logs folder)"
        )

    def _renew(self, w: int, restarts: int) -> list[tuple[Any, dict[str, Any]]]:
        """Replay the changing calls on worker ``w``'s new environments, then reset them, each
        with a seed drawn from its own and the restart's number.  Sent once the new process
        answered: a call that fails now means it was lost again."""
        worker, share = self.workers[w], self.shares[w]
        for send in self._replayed:
            self._ray.get(send(worker, share, 0))
        seeds = [_restart_seed(self._seeds[i], restarts) for i in share]
        resets: list[tuple[Any, dict[str, Any]]] = self._ray.get(worker.reset.remote(seeds, None))
        return resets

    # -- helpers -----------------------------------------------------------------------------

    def _gather(self, refs: list[Any], doing: str) -> list[Any]:
        """Every worker's answer; a worker lost outside a step is an error."""
        answers = []
        for w, ref in enumerate(refs):
            try:
                answers.append(self._ray.get(ref))
            except self._ray.exceptions.RayActorError as error:
                raise EnvWorkerError(
                    f"Ray environment worker {w} (environments {_span(self.shares[w])}) failed "
                    f"during {doing} (the environment's module and packages must be importable "
                    f"on every node; what happened there is in its Ray logs): {error}"
                ) from None
        return answers

    def _send(self, send: Callable[[Any, range, int], Any]) -> list[Any]:
        return [
            send(worker, share, 0) for worker, share in zip(self.workers, self.shares, strict=True)
        ]

    def _batched(self) -> Any:
        self._observations = concatenate(
            self.single_observation_space, self._env_obs, self._observations
        )
        return copy.deepcopy(self._observations)


def _span(share: range) -> str:
    return f"{share.start}-{share.stop - 1}" if len(share) > 1 else str(share.start)


def _restart_seed(seed: int | None, restarts: int) -> int | None:
    if seed is None:
        return None
    return int(np.random.SeedSequence([seed, restarts]).generate_state(1)[0])
