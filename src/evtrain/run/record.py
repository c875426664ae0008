"""``evtrain record``: a trained policy's episodes, written as a demonstration file.

The policy is the behavior's exported one in the run folder: ``results/<run_id>/<Behavior>.onnx``
(the final export), else the newest ``<Behavior>/<Behavior>-<step>.onnx`` checkpoint export.
It acts deterministically (the most likely action, as exported) in one environment built from
the config's ``env_settings`` (``env_id``, ``env_kwargs``; ``environment_parameters`` are not
applied), reset with ``env_settings.seed`` (a drawn one when -1), for whole episodes.  The
file's format: :mod:`evtrain.trainers.demonstrations`.
"""

from __future__ import annotations

import logging
import random
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

import attrs
import numpy as np

from evtrain.config.options import RunOptions
from evtrain.errors import ConfigError, RunFolderError

if TYPE_CHECKING:
    from evtrain.export import OnnxPolicy

logger = logging.getLogger("evtrain")

_CHECKPOINT_EXPORT = re.compile(r"-(\d+)\.onnx$")


@attrs.frozen(kw_only=True)
class RecordResult:
    """What :func:`record` wrote."""

    behavior: str
    path: Path
    """The demonstration file."""
    policy: Path
    """The exported policy that acted."""
    episodes: int
    steps: int
    returns: list[float]
    """Each episode's return, in order."""


def record(
    options: RunOptions,
    *,
    episodes: int,
    output: str | Path,
    behavior: str | None = None,
) -> RecordResult:
    """Run the trained policy of ``behavior`` (the config's only behavior when ``None``) for
    ``episodes`` episodes and write them to ``output``.

    :raises ConfigError: ``episodes`` is not positive, ``behavior`` is not one of the
        config's (or is not given and there are several), the output's folder cannot be
        created.
    :raises RunFolderError: the run, or the behavior's exported policy in it, does not exist.
    """
    from evtrain.export import onnx_policy
    from evtrain.run.environments.envs import make_envs
    from evtrain.trainers.demonstrations import make_demonstrations

    if episodes < 1:
        raise ConfigError([f"--episodes: expected a positive number of episodes, got {episodes}"])
    name = _behavior(options, behavior)
    policy_path = _policy(options, name)
    output = _output_folder_made(Path(output).expanduser())
    act = onnx_policy(policy_path)
    env_settings = attrs.evolve(options.env_settings, num_envs=1, vectorization="sync")
    seed = env_settings.seed if env_settings.seed >= 0 else random.SystemRandom().randrange(2**31)
    envs = make_envs(env_settings)
    try:
        rows = _episodes(act, envs, seed, episodes)
        demo = make_demonstrations(
            observations=np.stack(rows["obs"]),
            actions=np.stack(rows["actions"]),
            rewards=rows["rewards"],
            terminated=rows["term"],
            truncated=rows["trunc"],
            behavior_name=name,
            env_id=options.env_settings.env_id,
            observation_space=envs.single_observation_space,
            action_space=envs.single_action_space,
            source={
                "run_id": options.checkpoint_settings.run_id,
                "policy": str(policy_path),
                "seed": seed,
            },
        )
    finally:
        envs.close()
    demo.write(output)
    return RecordResult(
        behavior=name,
        path=output,
        policy=policy_path,
        episodes=episodes,
        steps=len(demo),
        returns=demo.episode_returns,
    )


def _output_folder_made(output: Path) -> Path:
    """``output``, once its folder exists.

    :raises ConfigError: the folder cannot be created.
    """
    try:
        output.parent.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise ConfigError(
            [f"--output: cannot create the folder {output.parent} ({error.strerror or error})"]
        ) from None
    return output


def _episodes(act: OnnxPolicy, envs: Any, seed: int, episodes: int) -> dict[str, list[Any]]:
    """``episodes`` whole episodes of ``act`` in ``envs`` (one environment), step by step:
    observations, actions, rewards, terminated and truncated flags."""
    rows: dict[str, list[Any]] = {k: [] for k in ("obs", "actions", "rewards", "term", "trunc")}
    obs, _ = envs.reset(seed=seed)
    finished = 0
    while finished < episodes:
        action = act(np.asarray(obs, dtype=np.float32))
        next_obs, reward, terminated, truncated, _ = envs.step(action)
        step = (obs[0], action[0], reward[0], terminated[0], truncated[0])
        for key, value in zip(rows, step, strict=True):
            rows[key].append(value)
        finished += int(terminated[0] or truncated[0])
        act.reset(terminated | truncated)  # a recurrent policy's next episode: no memory
        obs = next_obs  # SAME_STEP autoreset: a finished episode's successor starts here
    return rows


def _behavior(options: RunOptions, behavior: str | None) -> str:
    names = list(options.behaviors)
    if behavior is not None:
        if behavior not in options.behaviors:
            raise ConfigError(
                [f"--behavior: {behavior!r} is not a behavior of the config; it has {names}"]
            )
        return behavior
    if len(names) != 1:
        raise ConfigError(
            [f"--behavior: the config has {len(names)} behaviors {names}; say which to record"]
        )
    return names[0]


def _policy(options: RunOptions, name: str) -> Path:
    """The behavior's final export, else its newest checkpoint export."""
    cs = options.checkpoint_settings
    run = cs.write_path
    if not run.is_dir():
        raise RunFolderError(
            f"cannot record: run {cs.run_id!r} does not exist ({run}); train it first with "
            f"evtrain learn CONFIG --run-id {cs.run_id}, or give the --run-id (and "
            "--results-dir) of a trained run"
        )
    final = run / f"{name}.onnx"
    if final.is_file():
        return final
    exports = [
        (int(match.group(1)), path)
        for path in (run / name).glob(f"{name}-*.onnx")
        if (match := _CHECKPOINT_EXPORT.search(path.name)) is not None
    ]
    if not exports:
        raise RunFolderError(
            f"cannot record behavior {name!r}: run {cs.run_id!r} has no exported policy for it "
            f"({final} or {run / name}/{name}-<step>.onnx); train the behavior in this run first"
        )
    step, path = max(exports)
    logger.info("%s: no final export in %s; recording the checkpoint of step %d", name, run, step)
    return path
