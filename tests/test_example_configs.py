"""Every config in examples/configs/ runs through `learn` on a tiny budget."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import attrs
import pytest
import yaml

from evtrain import Bus, StatsEvent
from evtrain.run.learn import learn
from evtrain.testing import Recorder

CONFIGS = sorted(
    path
    for path in (Path(__file__).parent.parent / "examples" / "configs").glob("*.yaml")
    if not path.name.startswith("unity_")
)
"""The Unity builds' examples (``unity_*.yaml``) run against stand-in builds in
tests/unity/test_unity_samples.py."""


@pytest.mark.parametrize("path", CONFIGS, ids=[p.stem for p in CONFIGS])
def test_example_config_runs(path: Path, tmp_path: Path) -> None:
    options: dict[str, Any] = yaml.safe_load(path.read_text())
    options.pop("sweep", None)  # a sweep's config trains like any without it (test_sweep.py)
    freqs = {}
    for behavior, settings in options["behaviors"].items():
        slots = options["env_settings"]["num_envs"] * slots_per_copy(options, behavior)
        # Three summaries: every 200 steps, or every rollout's worth rounded up to 200 when the
        # environment has more slots than a 200-step rollout holds (agent slots of PettingZoo).
        freqs[behavior] = freq = 200 * -(-16 * slots // 200)
        settings.update(max_steps=3 * freq, summary_freq=freq, checkpoint_interval=10**6)
        hyperparameters = settings["hyperparameters"]
        if settings["trainer_type"] == "sac":
            hyperparameters.update(buffer_init_steps=100, batch_size=32)
            # a gradient step every 8 environment steps: 63 updates, not 500
            hyperparameters["steps_per_update"] = max(hyperparameters.get("steps_per_update", 1), 8)
        else:  # PPO, POCA: keep buffer_size = time_horizon x slots, on a shorter horizon
            settings["time_horizon"] = 16
            hyperparameters["buffer_size"] = 16 * slots
            hyperparameters["batch_size"] = min(hyperparameters["batch_size"], 32)
            # two epochs over each rollout: the loop over epochs runs, not 10 or 20 times
            hyperparameters["num_epoch"] = min(hyperparameters.get("num_epoch", 2), 2)
    options["checkpoint_settings"] = {"run_id": path.stem, "results_dir": str(tmp_path)}
    for settings in options["behaviors"].values():  # a recorded file's place: a stand-in's
        for part in (
            settings.get("reward_signals", {}).get("gail"),
            settings.get("behavioral_cloning"),
        ):
            if part is not None:
                part["demo_path"] = str(demonstrations_of(options, tmp_path))
    tracker = options.get("writers", {}).get("mlflow")
    if tracker is not None:  # its store in the test's folder, not the working directory
        tracker["tracking_uri"] = f"sqlite:///{tmp_path / 'mlflow.db'}"
    recorder = Recorder()
    with Bus() as bus:
        recorder.connect(bus)
        result = learn(options, bus)
    for behavior, freq in freqs.items():
        assert result.steps[behavior] >= 3 * freq
        stats = [e.step for e in recorder.of(StatsEvent) if e.category == behavior]
        assert stats[:3] == [freq, 2 * freq, 3 * freq]
        assert (tmp_path / path.stem / f"{behavior}.onnx").exists()


def slots_per_copy(options: dict[str, Any], behavior: str) -> int:
    """The sub-environments one copy of the config's environment makes for ``behavior``: 1 for
    a Gymnasium environment, the behavior's learning agents for a PettingZoo one
    (docs/multi-agent.md)."""
    from evtrain.config.options import RunOptions
    from evtrain.run.environments.envs import make_envs

    run = RunOptions.from_dict({**options, "env_settings": {**options["env_settings"]}})
    settings = attrs.evolve(run.env_settings, num_envs=1)
    envs = make_envs(settings, behavior=behavior, behaviors=run.behaviors)
    try:
        return int(envs.num_envs)
    finally:
        envs.close()


def demonstrations_of(options: dict[str, Any], folder: Path) -> Path:
    """Demonstrations a config's ``demo_path`` stands for (the example says how to record
    them): a short episode of its environment under random actions."""
    import gymnasium as gym
    import numpy as np

    from evtrain.trainers.demonstrations import make_demonstrations

    env_id = options["env_settings"]["env_id"]
    env = gym.wrappers.TimeLimit(gym.make(env_id).unwrapped, max_episode_steps=20)
    env.action_space.seed(0)
    obs, _ = env.reset(seed=0)
    rows: list[tuple[Any, ...]] = []
    while not rows or not (rows[-1][3] or rows[-1][4]):
        action = env.action_space.sample()
        next_obs, reward, terminated, truncated, _ = env.step(action)
        rows.append((obs, action, reward, terminated, truncated))
        obs = next_obs
    columns = [np.array(column) for column in zip(*rows, strict=True)]
    demo = make_demonstrations(
        observations=columns[0],
        actions=columns[1],
        rewards=columns[2],
        terminated=columns[3],
        truncated=columns[4],
        behavior_name="stand-in",
        env_id=env_id,
        observation_space=env.observation_space,
        action_space=env.action_space,
        source={},
    )
    return demo.write(folder / "demo.npz")
