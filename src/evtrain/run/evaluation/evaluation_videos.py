"""The videos of an evaluation's episodes (``evaluation.video``), made in the evaluation's
worker process: episode ``i`` is played again, alone, from ``reset(seed=seed + i)`` with the
policy just evaluated, each frame rendered (``render_mode="rgb_array"``) and handed to
:func:`~evtrain.evaluation.video.write_video` as it comes, so that no more than the encoder
keeps is held in memory.  For a deterministic environment the video is the evaluation's
episode ``i`` itself.

Only the newest ``video.keep`` videos of a behavior stay in its folder: each evaluation's
videos remove the oldest beyond that (:func:`prune_videos`).

A video that cannot be written (a full disk, an environment that renders no frame) is skipped
and said why, the file named: the evaluation's returns still count, the next video is tried.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import torch

from evtrain.evaluation.video import VideoSettings, write_video
from evtrain.export import memory_size_of
from evtrain.trainers.networks.action_heads import to_env
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
) -> tuple[list[tuple[int, str]], list[str]]:
    """The videos of the ``evaluation``-th evaluation's recorded episodes
    (:meth:`VideoSettings.recorded`), on the first sub-environment of ``vector``: each
    episode's number and its file; and why each video that could not be written was not."""
    written, failed = [], []
    for episode in range(episodes):
        if settings.recorded(evaluation, episode):
            frames = _frames(policy, vector, seed + episode, behavior)
            path = video_path(folder, behavior, step, episode)
            try:
                written.append((episode, str(write_video(frames, path, settings))))
            except Exception as error:  # this video only: the evaluation still counts
                target = path.with_suffix(f".{settings.format}")
                failed.append(f"{target}: {_reason(error)}")
    if written:
        prune_videos(folder, behavior, settings.keep)
    return written, failed


def prune_videos(folder: Path, behavior: str, keep: int) -> list[Path]:
    """Remove ``behavior``'s videos in ``folder`` but the newest ``keep`` (by step, then
    episode); returns what was removed.  A file that cannot be removed is left for the next
    evaluation."""
    pattern = re.compile(rf"{re.escape(behavior)}-(\d+)-episode-(\d+)\.(?:gif|mp4)")
    videos = sorted(
        (int(match[1]), int(match[2]), path)
        for path in folder.iterdir()
        if (match := pattern.fullmatch(path.name))
    )
    removed = []
    for *_, path in videos[: max(0, len(videos) - keep)]:
        with contextlib.suppress(OSError):
            path.unlink()
            removed.append(path)
    return removed


def _reason(error: Exception) -> str:
    """``error`` in a line, without the file an ``OSError`` names (the caller names it)."""
    if isinstance(error, OSError) and error.strerror:
        return f"[Errno {error.errno}] {error.strerror}"
    return f"{type(error).__name__}: {error}"


def _frames(policy: torch.nn.Module, vector: Any, seed: int, behavior: str) -> Iterator[np.ndarray]:
    """Each frame of one episode from ``reset(seed=seed)``, rendered before each step and
    after the last.

    :raises ValueError: the environment renders no frame (its ``render_mode`` is not
        ``rgb_array``).
    """
    env, space = vector.envs[0], vector.single_observation_space
    device = next(iter(policy.parameters()), torch.empty(0)).device
    act = StatefulPolicy(policy) if memory_size_of(policy) else policy
    obs, _ = env.reset(seed=seed)
    done = False
    while True:
        frame = env.render()
        if frame is None:
            raise ValueError(
                f"the evaluation environment rendered no frame (render() returned None, "
                f"render_mode {env.render_mode!r}); set render_mode: rgb_array in "
                f"behaviors.{behavior}.evaluation.env_kwargs, or remove it there"
            )
        yield frame
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
            batched = to_env(vector.single_action_space, act(*tensors).cpu().numpy())
        action = {k: v[0] for k, v in batched.items()} if isinstance(batched, dict) else batched[0]
        obs, _, terminated, truncated, _ = env.step(action)
        done = bool(terminated or truncated)
