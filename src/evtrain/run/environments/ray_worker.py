"""What runs inside a Ray actor of ``vectorization: ray``: a share of the run's environments,
stepped together in one remote call (:class:`EnvWorker`), and how it builds them
(:class:`EnvMaker`).

Ray is not imported here: the driver (:mod:`evtrain.run.environments.ray_envs`) makes
:class:`EnvWorker` an actor class with ``ray.remote``; the actor's process imports this module by
name, so it must find evtrain (and the environment's module) as the driver does: Ray puts the
driver's working folder on the actor's ``sys.path``, the rest comes from where ``ray start`` ran.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import attrs


@attrs.frozen(kw_only=True)
class EnvMaker:
    """Makes one sub-environment, as ``sync`` and ``async`` vectorization do: ``factory``
    (``module:callable``) or ``gymnasium.make(env_id)``, with ``env_kwargs``, then ``wrapper``
    (the run's ``environment_parameters``).  Pickled to every actor."""

    env_id: str
    env_kwargs: Mapping[str, Any]
    factory: Callable[..., Any] | None = None
    wrapper: Callable[[Any], Any] | None = None

    def __call__(self) -> Any:
        import gymnasium as gym

        if self.factory is None:
            env = gym.make(self.env_id, **self.env_kwargs)
        else:
            env = self.factory(**self.env_kwargs)
        return env if self.wrapper is None else self.wrapper(env)


StepResult = tuple[Any, float, bool, bool, dict[str, Any], tuple[Any, dict[str, Any]] | None]
"""One sub-environment's step: observation, reward, terminated, truncated, info, and for an
episode that ended (and was reset in the same step) its final observation and info."""


class EnvWorker:
    """``count`` environments made by ``maker``, in one process (a Ray actor).

    After a restart Ray runs the constructor again: the environments are new and not reset,
    and :meth:`step` answers ``None`` until :meth:`reset` is called, so the driver learns of
    the restart even when the actor died between two of its calls.
    """

    def __init__(self, maker: EnvMaker, count: int) -> None:
        self.envs = [maker() for _ in range(count)]
        self.ready = False

    def describe(self) -> tuple[str, int, Any, Any]:
        """The actor's node id, its process id, and its environments' spaces."""
        import ray

        env = self.envs[0]
        node = ray.get_runtime_context().get_node_id()
        return node, os.getpid(), env.observation_space, env.action_space

    def reset(
        self, seeds: Sequence[int | None], options: dict[str, Any] | None
    ) -> list[tuple[Any, dict[str, Any]]]:
        """Reset every environment, environment ``i`` with ``seeds[i]``."""
        out = [
            env.reset(seed=seed, options=options)
            for env, seed in zip(self.envs, seeds, strict=True)
        ]
        self.ready = True
        return out

    def step(self, actions: Sequence[Any]) -> list[StepResult] | None:
        """Step environment ``i`` with ``actions[i]``, resetting those whose episode ended in
        the same step (Gymnasium's ``SAME_STEP`` autoreset); ``None`` when the environments
        were not reset since the actor (re)started."""
        if not self.ready:
            return None
        results: list[StepResult] = []
        for env, action in zip(self.envs, actions, strict=True):
            obs, reward, terminated, truncated, info = env.step(action)
            final = None
            if terminated or truncated:
                final = (obs, info)
                obs, info = env.reset()
            results.append((obs, float(reward), bool(terminated), bool(truncated), info, final))
        return results

    def call(self, name: str, args: Sequence[Any], kwargs: Mapping[str, Any]) -> list[Any]:
        """Each environment's ``name`` (a wrapper's attribute too), called with ``args`` and
        ``kwargs`` when it is a method, as Gymnasium's ``VectorEnv.call``."""
        results = []
        for env in self.envs:
            found = env.get_wrapper_attr(name)
            results.append(found(*args, **kwargs) if callable(found) else found)
        return results

    def set_attr(self, name: str, values: Sequence[Any]) -> None:
        """Set ``name`` on environment ``i`` to ``values[i]``."""
        for env, value in zip(self.envs, values, strict=True):
            env.set_wrapper_attr(name, value)

    def close(self) -> None:
        for env in self.envs:
            env.close()
