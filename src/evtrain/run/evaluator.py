"""One behavior's evaluation episodes, played off the training thread.

An :class:`Evaluator` holds environments of its own, built as the training ones are
(:func:`~evtrain.run.envs.make_envs`: the same ``env_id``, factory and ``env_kwargs``, with
``evaluation.env_kwargs`` over them), and plays each evaluation on a thread of its own with a
snapshot of the policy taken at the evaluation's step.  It steps its sub-environments one by
one rather than through the vector environment, so that it decides each reset: episode ``i``
starts from ``reset(seed=seed + i)`` on whichever environment is free, the policy acting on
one batch of every environment's observation per step.

A thread, not a process: the snapshot needs no pickling, the environments are built once, and
the work is small beside training's (tens of batched forward passes per episode, in which
torch releases the GIL); ``benchmarks/bench_evaluation.py`` measures what it costs.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import attrs
import numpy as np
import torch

from evtrain.config.options import EnvironmentSettings
from evtrain.errors import ConfigError
from evtrain.evaluation.settings import EvaluationSettings
from evtrain.export import memory_size_of
from evtrain.run.envs import make_envs
from evtrain.trainers.networks.memory import StatefulPolicy
from evtrain.trainers.observations import policy_inputs


class EvaluationCancelled(Exception):
    """The run ended (or was interrupted) during an evaluation: its episodes are dropped."""


@attrs.frozen(kw_only=True)
class Episodes:
    """What one evaluation's episodes gave, in episode order."""

    step: int
    returns: tuple[float, ...]
    lengths: tuple[int, ...]


class Evaluator:
    """Plays one behavior's evaluations, one at a time, on a thread of its own.

    :raises ConfigError: the environment is a PettingZoo one (not evaluated yet).
    """

    def __init__(
        self,
        behavior: str,
        settings: EvaluationSettings,
        env_settings: EnvironmentSettings,
        behaviors: Mapping[str, Any],
    ) -> None:
        from gymnasium.vector import SyncVectorEnv

        self.behavior = behavior
        self.settings = settings
        kwargs = {**env_settings.env_kwargs, **settings.env_kwargs}
        built = attrs.evolve(
            env_settings,
            num_envs=min(settings.num_envs, settings.episodes),
            vectorization="sync",  # stepped here, one by one, on the evaluation's thread
            env_kwargs=kwargs,
        )
        self.vector = make_envs(built, behavior=behavior, behaviors=behaviors)
        if not isinstance(self.vector, SyncVectorEnv):
            self.vector.close()
            raise ConfigError(
                [
                    f"behaviors.{behavior}.evaluation: evaluating a PettingZoo environment "
                    f"({env_settings.env_id!r}) is not supported by evtrain yet; remove "
                    "evaluation, or evaluate a Gymnasium environment"
                ]
            )
        self._cancelled = threading.Event()
        self._pool = ThreadPoolExecutor(1, thread_name_prefix=f"evtrain-evaluation-{behavior}")
        self.running: Future[Episodes] | None = None
        """The evaluation in flight, if any."""

    def start(self, step: int, policy: torch.nn.Module) -> None:
        """Play an evaluation with ``policy`` (a snapshot nothing else changes) on the thread.

        :raises RuntimeError: one is still in flight (take its :meth:`result` first).
        """
        if self.running is not None:
            raise RuntimeError(f"an evaluation of {self.behavior} is still running")
        self.running = self._pool.submit(self._play, step, policy)

    def result(self, *, wait: bool) -> Episodes | None:
        """The evaluation in flight once it is done (waited for with ``wait``), else ``None``.

        :raises BaseException: what the evaluation raised.
        """
        running = self.running
        if running is None or (not wait and not running.done()):
            return None
        self.running = None
        return running.result()

    def close(self) -> None:
        """Stop the evaluation in flight (its episodes are dropped), end the thread, close the
        environments."""
        self._cancelled.set()
        self._pool.shutdown(wait=True, cancel_futures=True)
        self.running = None
        self.vector.close()

    def _play(self, step: int, policy: torch.nn.Module) -> Episodes:
        with torch.no_grad():
            returns, lengths = play_episodes(
                policy,
                self.vector,
                episodes=self.settings.episodes,
                seed=self.settings.seed,
                cancelled=self._cancelled,
            )
        return Episodes(step=step, returns=tuple(returns), lengths=tuple(lengths))


def play_episodes(
    policy: torch.nn.Module,
    vector: Any,
    *,
    episodes: int,
    seed: int,
    cancelled: threading.Event | None = None,
) -> tuple[list[float], list[int]]:
    """Play ``episodes`` episodes of ``policy`` on the sub-environments of ``vector`` (a
    ``SyncVectorEnv``, its own reset never used): episode ``i`` starts from
    ``reset(seed=seed + i)`` on the next free sub-environment.  Returns each episode's return
    and length, in episode order.

    :raises EvaluationCancelled: ``cancelled`` was set.
    """
    from gymnasium.vector.utils import concatenate, create_empty_array, iterate

    envs = vector.envs
    space = vector.single_observation_space
    device = next(iter(policy.parameters()), torch.empty(0)).device
    act = StatefulPolicy(policy) if memory_size_of(policy) else policy
    returns, lengths = [0.0] * episodes, [0] * episodes
    playing: list[int | None] = [None] * len(envs)  # the episode each environment plays
    obs: list[Any] = [None] * len(envs)
    started = 0
    for j, env in enumerate(envs[:episodes]):
        obs[j], _ = env.reset(seed=seed + j)
        playing[j], started = j, j + 1
    for j in range(started, len(envs)):  # more environments than episodes: never stepped
        obs[j] = obs[0]
    batch: Any = create_empty_array(space, len(envs))  # an array, or a Dict space's dict
    while any(e is not None for e in playing):
        if cancelled is not None and cancelled.is_set():
            raise EvaluationCancelled
        stacked = concatenate(space, obs, batch)
        inputs = policy_inputs(space, stacked).values()
        tensors = [torch.as_tensor(np.asarray(x, dtype=np.float32), device=device) for x in inputs]
        actions = list(iterate(vector.action_space, act(*tensors).cpu().numpy()))
        ended = np.zeros(len(envs), dtype=np.bool_)
        for j, env in enumerate(envs):
            episode = playing[j]
            if episode is None:
                continue
            obs[j], reward, terminated, truncated, _ = env.step(actions[j])
            returns[episode] += float(reward)
            lengths[episode] += 1
            if terminated or truncated:
                ended[j] = True
                playing[j] = started if started < episodes else None
                if started < episodes:
                    obs[j], _ = env.reset(seed=seed + started)
                    started += 1
        if isinstance(act, StatefulPolicy):
            act.forget(ended)
    return returns, lengths
