"""What runs in an evaluation worker process (:class:`evtrain.run.evaluation.evaluator.Evaluator`
starts it): the environments built once, each evaluation's episodes played and its videos recorded,
the answers sent back; interrupts to the process group left to the run, and the worker ended
with the run's process.
"""

from __future__ import annotations

import io
import multiprocessing
import os
import signal
import threading
import time
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import numpy as np
import torch

from evtrain.config.options import EnvironmentSettings
from evtrain.errors import ConfigError
from evtrain.evaluation.settings import EvaluationSettings
from evtrain.export import memory_size_of
from evtrain.run.environments.envs import make_envs, working_folder_importable
from evtrain.run.evaluation.matches import Opponents, game_of
from evtrain.trainers.networks.action_heads import to_env
from evtrain.trainers.networks.memory import StatefulPolicy
from evtrain.trainers.observations import policy_inputs

_IGNORED = tuple(
    getattr(signal, name) for name in ("SIGINT", "SIGTERM", "SIGHUP") if hasattr(signal, name)
)
"""The interrupts the worker ignores: sent to the process group, they are the run's."""


def work(
    conn: Connection,
    behavior: str,
    settings: EvaluationSettings,
    env_settings: EnvironmentSettings,
    behaviors: dict[str, Any],
    videos: Path,
    fixed: dict[str, bytes],
) -> None:
    """The worker: build the environments (and a PettingZoo behavior's opponents, ``fixed``
    the checkpoint opponents' policies by label), then play each evaluation sent until
    ``None`` (and record its videos)."""
    for number in _IGNORED:  # sent to the whole process group, they are the run's to handle
        signal.signal(number, signal.SIG_IGN)
    _end_with_the_run()
    # Frames are drawn off-screen: without a display SDL (pygame, which renders Gymnasium's
    # classic-control and box2d environments) would print an error for each worker.
    os.environ.setdefault("SDL_VIDEODRIVER", "dummy")
    torch.set_num_threads(1)
    working_folder_importable()
    vector = None
    try:
        vector = make_envs(env_settings, behavior=behavior, behaviors=behaviors)
        opponents = None
        if not hasattr(vector, "envs"):  # agent slots: the parent lets only those through
            try:
                opponents = _opponents(vector, settings, behavior, fixed)
            except ConfigError as error:
                conn.send(("opponents", list(error.problems)))
                return
        while (message := conn.recv()) is not None:
            step, evaluation, data = message
            policy = torch.load(io.BytesIO(data), weights_only=False)  # our own snapshot
            if opponents is not None:
                with torch.no_grad():
                    results = opponents.play(policy, episodes=settings.episodes, seed=settings.seed)
                cpu = time.process_time()
                conn.send(("done", (results.returns, results.lengths, [], [], cpu, results.stats)))
                continue
            with torch.no_grad():
                played = play_episodes(
                    policy, vector, episodes=settings.episodes, seed=settings.seed
                )
            recorded, failed = _videos(policy, vector, settings, evaluation, videos, behavior, step)
            conn.send(("done", (*played, recorded, failed, time.process_time(), {})))
    except EOFError:  # the run ended
        pass
    except ConfigError as error:  # told to the run, which raises it
        conn.send(("config", list(error.problems)))
    except Exception as error:
        conn.send(("error", f"{type(error).__name__}: {error}"))
    finally:
        if vector is not None:
            vector.close()


def _opponents(
    slots: Any, settings: EvaluationSettings, behavior: str, fixed: dict[str, bytes]
) -> Opponents:
    """A PettingZoo behavior's opponents, on the first copy of its agent slots."""
    modules = {
        label: torch.load(io.BytesIO(data), weights_only=False)  # the run's own snapshots
        for label, data in fixed.items()
    }
    where = f"behaviors.{behavior}.evaluation.opponents"
    return Opponents(game_of(slots), settings.opponent_list(), modules, where)


def _end_with_the_run() -> None:
    """End this worker as soon as the run's process is gone, whatever it is doing (an
    environment that hangs included): a run killed with ``kill -9`` leaves no worker behind."""
    parent = multiprocessing.parent_process()
    if parent is None or parent.sentinel is None:
        return

    def watch(sentinel: int) -> None:
        from multiprocessing.connection import wait

        wait([sentinel])
        os._exit(0)

    threading.Thread(target=watch, args=(parent.sentinel,), daemon=True).start()


def _videos(
    policy: torch.nn.Module,
    vector: Any,
    settings: EvaluationSettings,
    evaluation: int,
    folder: Path,
    behavior: str,
    step: int,
) -> tuple[list[tuple[int, str]], list[str]]:
    if settings.video is None:
        return [], []
    from evtrain.run.evaluation.evaluation_videos import record_videos

    return record_videos(
        policy,
        vector,
        settings=settings.video,
        evaluation=evaluation,
        episodes=settings.episodes,
        seed=settings.seed,
        folder=folder,
        behavior=behavior,
        step=step,
    )


def play_episodes(
    policy: torch.nn.Module,
    vector: Any,
    *,
    episodes: int,
    seed: int,
) -> tuple[list[float], list[int]]:
    """Play ``episodes`` episodes of ``policy`` on the sub-environments of ``vector`` (a
    ``SyncVectorEnv``, its own reset never used): episode ``i`` starts from
    ``reset(seed=seed + i)`` on the next free sub-environment.  Returns each episode's return
    and length, in episode order.
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
        stacked = concatenate(space, obs, batch)
        inputs = policy_inputs(space, stacked).values()
        tensors = [torch.as_tensor(np.asarray(x, dtype=np.float32), device=device) for x in inputs]
        batched = to_env(vector.single_action_space, act(*tensors).cpu().numpy())
        actions = list(iterate(vector.action_space, batched))
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
