"""The videos of an evaluation's episodes (``evaluation.video``), made in the evaluation's
worker process: episode ``i`` is played again, alone, from ``reset(seed=seed + i)`` with the
policy just evaluated, each frame rendered (``render_mode="rgb_array"``) and handed to
:func:`~evtrain.evaluation.video.write_video` as it comes, so that no more than the encoder
keeps is held in memory.  For a deterministic environment the video is the evaluation's
episode ``i`` itself.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import torch

from evtrain.evaluation.video import VideoSettings, write_video
from evtrain.export import memory_size_of
from evtrain.trainers.networks.memory import StatefulPolicy
from evtrain.trainers.observations import policy_inputs


def video_path(folder: Path, behavior: str, step: int, episode: int) -> Path:
    """``<folder>/<Behavior>-<step>-episode-<i>`` (``write_video`` adds the suffix)."""
    return folder / f"{behavior}-{step}-episode-{episode}"


def record_videos(
    policy: torch.nn.Module,
    vector: Any,
    *,
    settings: VideoSettings,
    evaluation: int,
    episodes: int,
    seed: int,
    folder: Path,
    behavior: str,
    step: int,
) -> list[tuple[int, str]]:
    """The videos of the ``evaluation``-th evaluation's recorded episodes
    (:meth:`VideoSettings.recorded`), on the first sub-environment of ``vector``: each
    episode's number and its file."""
    written = []
    for episode in range(episodes):
        if settings.recorded(evaluation, episode):
            frames = _frames(policy, vector, seed + episode)
            path = write_video(frames, video_path(folder, behavior, step, episode), settings)
            written.append((episode, str(path)))
    return written


def _frames(policy: torch.nn.Module, vector: Any, seed: int) -> Iterator[np.ndarray]:
    """Each frame of one episode from ``reset(seed=seed)``, rendered before each step and
    after the last."""
    env, space = vector.envs[0], vector.single_observation_space
    device = next(iter(policy.parameters()), torch.empty(0)).device
    act = StatefulPolicy(policy) if memory_size_of(policy) else policy
    obs, _ = env.reset(seed=seed)
    done = False
    while True:
        yield env.render()
        if done:
            return
        batch = (
            {k: np.asarray(v)[None] for k, v in obs.items()}
            if isinstance(obs, dict)
            else np.asarray(obs)[None]
        )
        inputs = policy_inputs(space, batch).values()
        tensors = [torch.as_tensor(np.asarray(x, dtype=np.float32), device=device) for x in inputs]
        with torch.no_grad():
            action = act(*tensors).cpu().numpy()[0]
        obs, _, terminated, truncated, _ = env.step(action)
        done = bool(terminated or truncated)
