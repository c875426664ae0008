"""evtrain's demonstration files: the format round trip, and every error of the loader."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest

from evtrain import ConfigError
from evtrain.trainers.demonstrations import (
    FORMAT_VERSION,
    Demonstrations,
    load_demonstrations,
    make_demonstrations,
)
from tests.trainers.helpers import cartpole_demo

KEY = "behaviors.B.reward_signals.gail.demo_path"


CARTPOLE = gym.make("CartPole-v1")


def load(path: Path, env: gym.Env[Any, Any] = CARTPOLE) -> Demonstrations:
    return load_demonstrations(path, env.observation_space, env.action_space, key=KEY)


def test_a_file_round_trips_its_arrays_and_metadata(tmp_path: Path) -> None:
    demo = cartpole_demo(episodes=2, max_steps=50)
    path = demo.write(tmp_path / "demo.npz")
    # a plain npz of plain arrays: readable without pickle
    with np.load(path, allow_pickle=False) as archive:
        assert sorted(archive.files) == [
            "actions",
            "metadata",
            "observations",
            "rewards",
            "terminated",
            "truncated",
        ]
        assert archive["observations"].shape == (100, 4)
        assert archive["actions"].dtype == np.int64
    loaded = load(path)
    for name in ("observations", "actions", "rewards", "terminated", "truncated"):
        assert np.array_equal(getattr(loaded, name), getattr(demo, name)), name
    assert loaded.episode_returns == [50.0, 50.0]
    assert np.flatnonzero(loaded.truncated).tolist() == [49, 99]
    metadata = dict(loaded.metadata)
    assert metadata.pop("created").endswith("+00:00")
    assert metadata == {
        "format": "evtrain-demonstrations",
        "format_version": FORMAT_VERSION,
        "behavior_name": "CartPole",
        "env_id": "CartPole-v1",
        "observation_space": {
            "type": "Box",
            "shape": [4],
            "dtype": "float32",
            "low": [-4.800000190734863, "-inf", -0.41887903213500977, "-inf"],
            "high": [4.800000190734863, "inf", 0.41887903213500977, "inf"],
        },
        "action_space": {"type": "Discrete", "n": 2, "start": 0},
        "episodes": 2,
        "steps": 100,
        "mean_return": 50.0,
        "source": {"controller": "obs[2] + 0.5 obs[3] > 0"},
        "evtrain_version": "0.1.0",
    }


def test_a_folder_joins_its_files_in_name_order(tmp_path: Path) -> None:
    first = cartpole_demo(episodes=1, seed=1, max_steps=30)
    second = cartpole_demo(episodes=2, seed=2, max_steps=20)
    second.write(tmp_path / "b.npz")
    first.write(tmp_path / "a.npz")
    (tmp_path / "notes.txt").write_text("not a demonstration")
    joined = load(tmp_path)
    assert len(joined) == 70
    assert np.array_equal(joined.observations[:30], first.observations)
    assert np.array_equal(joined.observations[30:], second.observations)
    assert joined.episode_returns == [30.0, 20.0, 20.0]
    assert joined.metadata["episodes"] == 3
    assert joined.metadata["files"] == [str(tmp_path / "a.npz"), str(tmp_path / "b.npz")]


def problem(path: Path, env: gym.Env[Any, Any] = CARTPOLE) -> str:
    with pytest.raises(ConfigError) as info:
        load(path, env)
    (line,) = info.value.problems
    return line


def test_missing_paths_and_folders_without_files_name_the_key_and_the_fix(
    tmp_path: Path,
) -> None:
    missing = tmp_path / "nowhere.npz"
    assert problem(missing) == (
        f"{KEY}: {missing} does not exist; give a demonstration file written by evtrain record "
        "(.npz), or a folder of them"
    )
    assert problem(tmp_path) == (
        f"{KEY}: {tmp_path} is a folder without demonstration files (.npz); record some with "
        "evtrain record CONFIG --run-id ID --episodes N --output FILE"
    )
    (tmp_path / "Expert.demo").write_bytes(b"\x00unity")
    assert problem(tmp_path) == (
        f"{KEY}: {tmp_path} is a folder without demonstration files (.npz) (ML-Agents' Unity "
        ".demo files cannot be read); record some with evtrain record CONFIG --run-id ID "
        "--episodes N --output FILE"
    )
    assert problem(tmp_path / "Expert.demo") == (
        f"{KEY}: {tmp_path / 'Expert.demo'} is an ML-Agents .demo file, recorded by Unity; "
        "evtrain reads its own demonstrations (.npz): record them with evtrain record CONFIG "
        "--run-id ID --episodes N --output FILE"
    )


def rewrite(path: Path, **changes: Any) -> Path:
    """``path``'s archive with some arrays (or ``metadata`` fields) changed."""
    with np.load(path, allow_pickle=False) as archive:
        arrays = {name: archive[name] for name in archive.files}
    metadata = json.loads(str(arrays.pop("metadata")[()]))
    metadata.update(changes.pop("metadata", {}))
    arrays.update(changes)
    np.savez(path, **arrays, metadata=np.array(json.dumps(metadata)))
    return path


def test_files_that_are_no_demonstrations_are_refused(tmp_path: Path) -> None:
    garbage = tmp_path / "garbage.npz"
    garbage.write_bytes(b"not a zip")
    assert problem(garbage).startswith(f"{KEY}: {garbage} is not an evtrain demonstration file (")
    other = tmp_path / "other.npz"
    np.savez(other, x=np.zeros(3))
    assert problem(other) == (
        f"{KEY}: {other} is not an evtrain demonstration file (it lacks observations, actions, "
        "rewards, terminated, truncated, metadata); record one with evtrain record"
    )
    demo = cartpole_demo(episodes=1, max_steps=10)
    foreign = rewrite(demo.write(tmp_path / "foreign.npz"), metadata={"format": "something"})
    assert problem(foreign) == (
        f"{KEY}: {foreign} is not an evtrain demonstration file (no format "
        "'evtrain-demonstrations')"
    )
    newer = rewrite(demo.write(tmp_path / "newer.npz"), metadata={"format_version": 99})
    assert problem(newer) == (
        f"{KEY}: {newer} has format_version 99; this evtrain reads version 1 or earlier: "
        "upgrade evtrain"
    )
    cut = rewrite(
        demo.write(tmp_path / "cut.npz"),
        terminated=np.zeros(10, dtype=bool),
        truncated=np.zeros(10, dtype=bool),
    )
    assert problem(cut) == (
        f"{KEY}: {cut} is not a valid demonstration file: its last step ends no episode (a "
        "demonstration holds whole episodes)"
    )
    short = rewrite(demo.write(tmp_path / "short.npz"), rewards=np.zeros(9, dtype=np.float32))
    assert problem(short) == (
        f"{KEY}: {short} is not a valid demonstration file: its arrays differ in length "
        "(observations 10, actions 10, rewards 9, terminated 10, truncated 10)"
    )


def test_spaces_that_differ_from_the_environment_are_named(tmp_path: Path) -> None:
    path = cartpole_demo(episodes=1, max_steps=10).write(tmp_path / "cartpole.npz")
    assert problem(path, gym.make("Acrobot-v1")) == (
        f"{KEY}: {path} was recorded in CartPole-v1, whose spaces differ from this behavior's "
        "environment: observation space shape [4] (this environment: [6]); action space n 2 "
        "(this environment: 3). Record demonstrations in this environment (evtrain record), "
        "or train in the one they come from (env_settings.env_id)"
    )
    assert problem(path, gym.make("Pendulum-v1")) == (
        f"{KEY}: {path} was recorded in CartPole-v1, whose spaces differ from this behavior's "
        "environment: observation space shape [4] (this environment: [3]); action space type "
        "Discrete (this environment: Box). Record demonstrations in this environment (evtrain "
        "record), or train in the one they come from (env_settings.env_id)"
    )


def test_making_demonstrations_of_a_partial_episode_is_refused() -> None:
    env = gym.make("CartPole-v1")
    with pytest.raises(ValueError, match="its last step ends no episode"):
        make_demonstrations(
            observations=np.zeros((2, 4)),
            actions=np.zeros(2, dtype=np.int64),
            rewards=[1.0, 1.0],
            terminated=[False, False],
            truncated=[False, False],
            behavior_name="CartPole",
            env_id="CartPole-v1",
            observation_space=env.observation_space,
            action_space=env.action_space,
            source={},
        )
