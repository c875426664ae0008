"""Imitation through the runner and the CLI: `evtrain record`, GAIL and behavioral cloning in
real PPO and SAC runs (stats read back from TensorBoard), resuming them, SAC with curiosity
and RND."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import yaml

from evtrain import ConfigError, RunOptions
from evtrain.cli import main
from evtrain.errors import RunFolderError
from evtrain.run.checkpoints.checkpoint import load_checkpoint
from evtrain.run.learn import learn
from evtrain.run.options import options_from_data
from evtrain.run.record import record
from evtrain.trainers.demonstrations import load_demonstrations
from tests.helpers import config, run_config, run_evtrain
from tests.helpers import tensorboard_steps as scalar_steps
from tests.trainers.helpers import cartpole_demo

CARTPOLE = gym.make("CartPole-v1")


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder with ``run.yaml`` and its finished run ``teacher`` in ``results/``."""
    root = tmp_path_factory.mktemp("trained")
    options = config(root, run_id="teacher", max_steps=512)
    options["checkpoint_settings"]["results_dir"] = "results"
    (root / "run.yaml").write_text(yaml.safe_dump(options))
    learn(
        {
            **options,
            "checkpoint_settings": {"run_id": "teacher", "results_dir": str(root / "results")},
        }
    )
    return root


def test_record_writes_the_trained_policys_episodes(trained: Path) -> None:
    result = run_evtrain(
        "record",
        "run.yaml",
        "--run-id",
        "teacher",
        "--episodes",
        "3",
        "--output",
        "demos/teacher.npz",
        cwd=trained,
        process=True,  # the command as a user runs it (the other record tests, in process)
    )
    assert result.returncode == 0, result.stderr
    demo = load_demonstrations(
        trained / "demos/teacher.npz",
        CARTPOLE.observation_space,
        CARTPOLE.action_space,
        key="demo_path",
    )
    returns = demo.episode_returns
    assert len(returns) == 3 and len(demo) == sum(returns)  # CartPole pays 1 a step
    assert result.stdout == (
        f"CartPole: recorded 3 episodes ({len(demo):,} steps, mean return "
        f"{sum(returns) / 3:.1f}) with results/teacher/CartPole.onnx to demos/teacher.npz\n"
    )
    assert demo.metadata["source"] == {
        "run_id": "teacher",
        "policy": "results/teacher/CartPole.onnx",
        "seed": 3,
    }
    assert (demo.metadata["behavior_name"], demo.metadata["env_id"]) == ("CartPole", "CartPole-v1")
    # the deterministic policy of the export: the same seed records the same episodes
    again = record(
        options_from_data(
            {
                **yaml.safe_load((trained / "run.yaml").read_text()),
                "checkpoint_settings": {
                    "run_id": "teacher",
                    "results_dir": str(trained / "results"),
                },
            }
        ),
        episodes=3,
        output=trained / "again.npz",
    )
    assert again.returns == returns


def test_record_without_the_run_or_the_behavior_exits_2(trained: Path) -> None:
    missing = run_evtrain(
        "record",
        "run.yaml",
        "--run-id",
        "nobody",
        "--episodes",
        "1",
        "--output",
        "x.npz",
        cwd=trained,
    )
    assert (missing.returncode, missing.stdout) == (2, "")
    assert missing.stderr == (
        "evtrain: error: cannot record: run 'nobody' does not exist (results/nobody); train it "
        "first with evtrain learn CONFIG --run-id nobody, or give the --run-id (and "
        "--results-dir) of a trained run\n"
    )
    # the same command's other refusals, in process (main() is what the command runs)
    args = ["record", str(trained / "run.yaml"), "--output", str(trained / "x.npz")]
    results = ["--results-dir", str(trained / "results")]
    assert main([*args, "--run-id", "teacher", "--episodes", "1", "--behavior", "Walker"]) == 2
    empty = trained / "results/empty"
    empty.mkdir()
    assert main([*args, "--run-id", "empty", "--episodes", "1", *results]) == 2
    assert main([*args, "--run-id", "teacher", "--episodes", "0", *results]) == 2
    assert not (trained / "x.npz").exists()


def test_record_errors_name_what_is_missing(trained: Path) -> None:
    data = yaml.safe_load((trained / "run.yaml").read_text())
    data["checkpoint_settings"]["results_dir"] = str(trained / "results")
    options = options_from_data(data)
    with pytest.raises(ConfigError) as info:
        record(options, episodes=1, output=trained / "x.npz", behavior="Walker")
    assert info.value.problems == (
        "--behavior: 'Walker' is not a behavior of the config; it has ['CartPole']",
    )
    with pytest.raises(ConfigError) as info:
        record(options, episodes=0, output=trained / "x.npz")
    assert info.value.problems == ("--episodes: expected a positive number of episodes, got 0",)
    (trained / "results/unexported").mkdir()
    data["checkpoint_settings"]["run_id"] = "unexported"
    with pytest.raises(RunFolderError) as folder_info:
        record(options_from_data(data), episodes=1, output=trained / "x.npz")
    run = trained / "results/unexported"
    assert str(folder_info.value) == (
        f"cannot record behavior 'CartPole': run 'unexported' has no exported policy for it "
        f"({run}/CartPole.onnx or {run}/CartPole/CartPole-<step>.onnx); train the behavior in "
        "this run first"
    )


@pytest.fixture(scope="module")
def expert(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Demonstrations of CartPole kept up for 100 steps, 4 episodes."""
    return cartpole_demo(episodes=4, max_steps=100).write(
        tmp_path_factory.mktemp("expert") / "cartpole.npz"
    )


GAIL_TAGS = (
    "Policy/GAIL Reward",
    "Policy/GAIL Value Estimate",
    "Losses/GAIL Loss",
    "Policy/GAIL Policy Estimate",
    "Policy/GAIL Expert Estimate",
    "Policy/GAIL Beta",
    "Losses/GAIL KL Loss",
    "Losses/Pretraining Loss",
    "Policy/Extrinsic Value Estimate",
)


def test_ppo_with_gail_and_cloning_reports_ml_agents_stats_and_resumes(
    tmp_path: Path, expert: Path
) -> None:
    imitation: dict[str, Any] = {
        "reward_signals": {
            "extrinsic": {"strength": 1.0},
            "gail": {"demo_path": str(expert), "strength": 0.1, "use_vail": True},
        },
        "behavioral_cloning": {"demo_path": str(expert), "steps": 768, "batch_size": 64},
    }
    learn(config(tmp_path, max_steps=512, **imitation))
    folder = tmp_path / "results/run/CartPole"
    state = load_checkpoint(folder / "checkpoint.pt")
    assert sorted(state["reward_signals"]) == ["gail"]
    assert state["reward_signals"]["gail"]["model"]["beta"].shape == ()
    # 4 updates of 3 epochs x 6 minibatches of the 400 demonstration steps
    assert int(state["behavioral_cloning"]["optimizer"]["state"][0]["step"]) == 4 * 3 * 6
    resumed = config(tmp_path, max_steps=1024, **imitation)
    resumed["checkpoint_settings"]["resume"] = True
    assert learn(resumed).steps == {"CartPole": 1024}
    for tag in GAIL_TAGS:
        assert scalar_steps(folder, tag) == [256, 512, 768, 1024], tag
    # cloning stops at its steps (768): ML-Agents reports a loss of 0 from then on
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    accumulator = EventAccumulator(str(folder), size_guidance={"scalars": 0})
    accumulator.Reload()
    losses = [s.value for s in accumulator.Scalars("Losses/Pretraining Loss")]
    assert all(loss > 0 for loss in losses[:2]) and losses[3] == 0.0
    state = load_checkpoint(folder / "checkpoint.pt")
    assert int(state["behavioral_cloning"]["optimizer"]["state"][0]["step"]) == 5 * 3 * 6


def pendulum_demo(tmp_path: Path) -> Path:
    """One episode of Pendulum (200 steps) under random actions."""
    from evtrain.trainers.demonstrations import make_demonstrations

    env = gym.make("Pendulum-v1")
    rng = np.random.default_rng(0)
    rows: dict[str, list[Any]] = {k: [] for k in ("obs", "act", "rew", "term", "trunc")}
    obs, _ = env.reset(seed=0)
    for _ in range(200):
        action = rng.uniform(-2.0, 2.0, size=1).astype(np.float32)
        next_obs, reward, terminated, truncated, _ = env.step(action)
        for key, value in zip(rows, (obs, action, reward, terminated, truncated), strict=True):
            rows[key].append(value)
        obs = next_obs
    demo = make_demonstrations(
        observations=np.stack(rows["obs"]),
        actions=np.stack(rows["act"]),
        rewards=rows["rew"],
        terminated=rows["term"],
        truncated=rows["trunc"],
        behavior_name="Pendulum",
        env_id="Pendulum-v1",
        observation_space=env.observation_space,
        action_space=env.action_space,
        source={},
    )
    return demo.write(tmp_path / "pendulum.npz")


def sac_config(tmp_path: Path, max_steps: int, **behavior: Any) -> dict[str, Any]:
    settings = {
        "trainer_type": "sac",
        "hyperparameters": {"batch_size": 32, "buffer_size": 2000, "buffer_init_steps": 100},
        "network_settings": {"hidden_units": 16, "normalize": True},
        "max_steps": max_steps,
        "time_horizon": 50,
        "summary_freq": 200,
        "checkpoint_interval": 10**6,
        **behavior,
    }
    return {
        "behaviors": {"Pendulum": settings},
        "env_settings": {"env_id": "Pendulum-v1", "num_envs": 2, "seed": 5},
        "checkpoint_settings": {"run_id": "sac", "results_dir": str(tmp_path / "results")},
    }


SAC_TAGS = (
    "Policy/GAIL Reward",
    "Losses/GAIL Loss",
    "Policy/GAIL Policy Estimate",
    "Policy/GAIL Expert Estimate",
    "Policy/Curiosity Reward",
    "Losses/Curiosity Forward Loss",
    "Losses/Curiosity Inverse Loss",
    "Policy/Rnd Reward",
    "Losses/RND Loss",
    "Losses/Pretraining Loss",
    "Losses/Q1 Loss",
)


def test_sac_with_every_reward_provider_and_cloning_reports_them_and_resumes(
    tmp_path: Path,
) -> None:
    demo = str(pendulum_demo(tmp_path))
    extras: dict[str, Any] = {
        "reward_signals": {
            "gail": {"demo_path": demo, "strength": 0.1, "use_actions": True},
            "curiosity": {"strength": 0.1},
            "rnd": {"strength": 0.1, "network_settings": {"hidden_units": 16, "num_layers": 1}},
        },
        "behavioral_cloning": {"demo_path": demo, "samples_per_update": 64},
        "hyperparameters": {
            "batch_size": 32,
            "buffer_size": 2000,
            "buffer_init_steps": 100,
            "reward_signal_steps_per_update": 4,
        },
    }
    learn(sac_config(tmp_path, 400, **extras))
    folder = tmp_path / "results/sac/Pendulum"
    state = load_checkpoint(folder / "checkpoint.pt")
    assert sorted(state["reward_signals"]) == ["curiosity", "gail", "rnd"]
    # 300 steps after buffer_init_steps: a model update per 4 (reward_signal_steps_per_update);
    # a cloning update per 50 steps x 2 environments, at steps 100, 200, 300, 400
    assert (state["signal_updates"], state["cloning_updates"]) == (75, 4)
    assert int(state["reward_signals"]["rnd"]["optimizer"]["state"][0]["step"]) == 75
    resumed = sac_config(tmp_path, 600, **extras)
    resumed["checkpoint_settings"]["resume"] = True
    assert learn(resumed).steps == {"Pendulum": 600}
    for tag in SAC_TAGS:
        steps = scalar_steps(folder, tag)
        # Pendulum's episodes are 200 steps: both environments' first end at step 400
        expected = [400] if tag.endswith(" Reward") else [200, 400, 600]
        assert steps == expected, tag
    state = load_checkpoint(folder / "checkpoint.pt")
    assert (state["signal_updates"], state["cloning_updates"]) == (125, 6)


@pytest.mark.parametrize("signal", ["curiosity", "rnd"])
def test_sac_trains_with_one_reward_provider(tmp_path: Path, signal: str) -> None:
    options = sac_config(tmp_path, 300, reward_signals={signal: {"strength": 0.5}})
    options["behaviors"]["Pendulum"]["hyperparameters"]["reward_signal_steps_per_update"] = 4
    learn(options)
    state = load_checkpoint(tmp_path / "results/sac/Pendulum/checkpoint.pt")
    assert list(state["reward_signals"]) == [signal]
    assert state["signal_updates"] == 200 // 4
    name = {"curiosity": "Curiosity Forward", "rnd": "RND"}[signal]
    assert scalar_steps(tmp_path / "results/sac/Pendulum", f"Losses/{name} Loss") == [200, 300]


def test_demonstrations_of_another_environment_stop_the_run_with_exit_2(
    tmp_path: Path, expert: Path
) -> None:
    options = sac_config(tmp_path, 300, behavioral_cloning={"demo_path": str(expert)})
    result = run_config(tmp_path, options)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    # (the lines before are the hyperparameters the trainer logged before it read the file)
    assert result.stderr.splitlines()[-1] == (
        f"evtrain: error: behaviors.Pendulum.behavioral_cloning.demo_path: {expert} was "
        "recorded in CartPole-v1, whose spaces differ from this behavior's environment: "
        "observation space shape [4] (this environment: [3]); action space type Discrete (this "
        "environment: Box). Record demonstrations in this environment (evtrain record), or "
        "train in the one they come from (env_settings.env_id)"
    )


def test_gail_and_cloning_need_a_demo_path() -> None:
    with pytest.raises(ConfigError) as info:
        RunOptions.from_dict(
            {"behaviors": {"B": {"reward_signals": {"gail": {}}, "behavioral_cloning": {}}}}
        )
    assert info.value.problems == (
        "behaviors.B.reward_signals.gail.demo_path: required key is missing",
        "behaviors.B.behavioral_cloning.demo_path: required key is missing",
    )
