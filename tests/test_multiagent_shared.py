"""``env_settings.shared_env``: every behavior acts in the same instances of a PettingZoo Parallel
environment, each for its own agents in one shared step; each keeps its own steps, summaries and
checkpoints; what it does not support yet is refused by name."""

from __future__ import annotations

import logging
import threading
from pathlib import Path
from typing import Any

import attrs
import numpy as np
import onnxruntime  # type: ignore[import-untyped]  # ships no type information
import pytest

from evtrain import Bus
from evtrain.config.options import EnvironmentSettings
from evtrain.config.shared_env import shared_env_problems
from evtrain.errors import ConfigError
from evtrain.events.payloads import RunStatus, SaveEvent, StatsEvent
from evtrain.multiagent.shared import SharedEnvironment
from evtrain.run.environments.envs import make_shared_env
from evtrain.run.learn import learn
from evtrain.run.options import options_from_data
from evtrain.testing import Recorder
from tests import multiagent_envs
from tests.multiagent_envs import walkers


def test_one_shared_step_takes_every_behaviors_actions_and_gives_each_its_part() -> None:
    env = walkers()
    shared = SharedEnvironment([env], ["walker", "guide"])
    walker, guide = shared.view("walker"), shared.view("guide")
    assert (walker.num_envs, guide.num_envs) == (3, 1)  # walker_0..2 / guide_0
    obs, infos = walker.reset(seed=3)
    assert obs.tolist() == [[0, 0, -1], [0, 1, -1], [0, 0, 0]]  # walker_2 not there yet
    assert infos["active"].tolist() == [True, True, False]
    assert guide.reset(seed=5)[0].tolist() == [[0, 3, -1]]  # the episode the walkers are in
    assert env.seeds == [3]
    parts = []
    for _ in range(7):
        part = shared.step({"walker": np.array([1, 2, 0]), "guide": np.array([2])})
        parts.append(part)
    assert env.played[0] == {"walker_0": 1, "walker_1": 2, "guide_0": 2}
    assert env.played[3] == {"walker_0": 1, "walker_2": 0, "guide_0": 2}
    walker_steps = [p["walker"] for p in parts]
    assert [r.active.tolist() for r in walker_steps[:6]] == [
        [True, True, False],
        [True, True, False],  # walker_1 terminated here, leaving
        [True, False, False],
        [True, False, True],  # walker_2 appeared after step 3
        [True, False, True],
        [True, False, True],
    ]
    assert walker_steps[1].terminated.tolist() == [False, True, False]
    assert walker_steps[5].truncated.tolist() == [True, False, True]
    # the episode's end is every behavior's, and the instance was reset once for all
    assert [r.episode_over.all() for r in walker_steps] == [False] * 5 + [True, False]
    assert [p["guide"].episode_over.tolist() for p in parts] == [[False]] * 5 + [[True], [False]]
    assert [p["guide"].rewards.tolist() for p in parts] == [[2.0]] * 7
    assert env.seeds == [3, None]
    walker.close()
    assert env.closed  # the behaviors act in it together or not at all
    guide.close()


def test_a_behavior_whose_agents_all_left_waits_for_the_others_to_end_the_episode() -> None:
    env = walkers()
    shared = SharedEnvironment(
        [env], ["walker", "leaver", "guide"], agent_behaviors={"walker_1": "leaver"}
    )
    leaver = shared.view("leaver")
    leaver.reset(seed=0)
    parts = [
        shared.step({"walker": np.array([0, 0]), "leaver": np.array([1]), "guide": np.array([0])})
        for _ in range(6)
    ]
    steps = [p["leaver"] for p in parts]
    # walker_1 terminated at step 2; its slot is inactive until the walkers end the episode
    assert [r.active.tolist() for r in steps] == [[True], [True]] + [[False]] * 4
    assert [r.terminated.tolist() for r in steps] == [[False], [True]] + [[False]] * 4
    assert [r.episode_over.tolist() for r in steps] == [[False]] * 5 + [[True]]
    assert len(env.seeds) == 2  # reset once, after step 6
    assert [sorted(actions) for actions in env.played[2:]] == [["guide_0", "walker_0"]] + [
        ["guide_0", "walker_0", "walker_2"]
    ] * 3


def turn_threads() -> list[str]:
    """The threads behaviors' turns run on (:mod:`evtrain.run.environments.shared_steps`)
    still alive."""
    return [t.name for t in threading.enumerate() if t.name.startswith("evtrain-turns-")]


def behavior(buffer_size: int, max_steps: int, summary_freq: int) -> dict[str, Any]:
    return {
        "trainer_type": "ppo",
        "hyperparameters": {"batch_size": 12, "buffer_size": buffer_size, "num_epoch": 1},
        "network_settings": {"hidden_units": 8, "num_layers": 1},
        "max_steps": max_steps,
        "time_horizon": 12,
        "summary_freq": summary_freq,
        "checkpoint_interval": 10**6,
        "keep_checkpoints": 1,
    }


def shared_run(results: Path) -> dict[str, Any]:
    """Walkers (3 slots) and a guide (1) in one instance of ``Walkers``, 12 steps a rollout
    each: a walkers' rollout counts 22 steps (an episode of 6 steps has 11 walker steps), the
    guide's 12.  The guide is done after 2 rollouts, the walkers after 3 (a checkpoint due
    after the second)."""
    return {
        "behaviors": {
            "walker": {**behavior(36, 66, 22), "checkpoint_interval": 44},
            "guide": behavior(12, 24, 12),
        },
        "env_settings": {
            "env_id": "tests.multiagent_envs:made_walkers",
            "shared_env": True,
            "seed": 1,
        },
        "checkpoint_settings": {"run_id": "run", "results_dir": str(results)},
    }


def guide_observations(played: list[dict[str, Any]], steps: range) -> np.ndarray:
    """What the guide saw before each step of ``steps`` (1-based): ``[step in the episode, its
    index 3, its last action]``, episodes of 6 steps."""
    rows = []
    for step in steps:
        t = (step - 1) % 6
        last = -1.0 if t == 0 else float(played[step - 2]["guide_0"])
        rows.append([t, 3.0, last])
    return np.array(rows, dtype=np.float32)


def test_two_behaviors_train_in_one_instance_each_acting_in_every_step(tmp_path: Path) -> None:
    played = []
    for attempt in range(2):
        multiagent_envs.MADE.clear()
        recorder = Recorder()
        with Bus() as bus:
            recorder.connect(bus)
            result = learn(shared_run(tmp_path / str(attempt)), bus)
        assert result.status is RunStatus.COMPLETED
        assert result.steps == {"walker": 66, "guide": 24}
        (env,) = multiagent_envs.MADE  # one instance for both behaviors, the whole run
        assert env.closed
        assert turn_threads() == []  # ended with the loop
        # 3 walker rollouts of 12 steps; the guide acted in every one of the 36
        assert len(env.played) == 36
        assert all("guide_0" in actions and "walker_0" in actions for actions in env.played)
        stats = [(e.category, e.step) for e in recorder.of(StatsEvent)]
        assert stats == [
            ("walker", 22),
            ("guide", 12),
            ("walker", 44),
            ("guide", 24),
            ("walker", 66),
        ]
        saves = {(e.category, e.step, e.path.name) for e in recorder.of(SaveEvent)}
        # a checkpoint due after a turn, and the final ones
        assert {
            ("walker", 44, "walker-44.pt"),
            ("walker", 66, "walker-66.pt"),
            ("guide", 24, "guide-24.pt"),
        } <= saves
        run = tmp_path / str(attempt) / "run"
        for name in ("walker", "guide"):
            assert (run / name / "checkpoint.pt").is_file()
            assert (run / f"{name}.onnx").is_file()
        played.append(env.played)
    # the turns take strict turns with the loop: the same run, action for action
    assert played[0] == played[1]
    # done after step 24, the guide kept acting with its final (exported) policy
    session = onnxruntime.InferenceSession(
        str(tmp_path / "0" / "run" / "guide.onnx"), providers=["CPUExecutionProvider"]
    )
    late = range(25, 37)
    expected = session.run(None, {"obs": guide_observations(played[0], late)})[0]
    assert [int(played[0][step - 1]["guide_0"]) for step in late] == expected.tolist()


def test_a_ppo_and_a_sac_behavior_train_in_one_instance_each_with_its_algorithm(
    tmp_path: Path,
) -> None:
    options = shared_run(tmp_path)
    options["behaviors"]["guide"] = {
        "trainer_type": "sac",  # a turn of one step
        "hyperparameters": {"batch_size": 8, "buffer_size": 100, "buffer_init_steps": 8},
        "network_settings": {"hidden_units": 8, "num_layers": 1},
        "max_steps": 24,
        "summary_freq": 12,
    }
    multiagent_envs.MADE.clear()
    recorder = Recorder()
    with Bus() as bus:
        recorder.connect(bus)
        result = learn(options, bus)
    assert result.steps == {"walker": 66, "guide": 24}
    (env,) = multiagent_envs.MADE
    assert len(env.played) == 36
    assert all("guide_0" in actions for actions in env.played)
    stats = {e.category: e for e in recorder.of(StatsEvent)}  # each behavior's last
    assert "Losses/Q1 Loss" in stats["guide"].values  # SAC learned
    assert "Losses/Value Loss" in stats["walker"].values  # and PPO
    for name in ("walker", "guide"):
        assert (tmp_path / "run" / name / "checkpoint.pt").is_file()


def test_what_a_shared_environment_does_not_support_yet_is_refused_by_name(
    tmp_path: Path,
) -> None:
    options = shared_run(tmp_path)
    options["env_settings"]["vectorization"] = "async"
    with pytest.raises(ConfigError) as info:
        learn(options)
    assert info.value.problems == (
        "env_settings.vectorization: 'async' is not supported in a shared environment "
        "(env_settings.shared_env) yet; use vectorization: sync (the num_envs instances still "
        "step together)",
    )
    assert not (tmp_path / "run").exists()  # said before the run folder is touched
    options = shared_run(tmp_path)
    memory = {"memory_size": 8, "sequence_length": 4}
    options["behaviors"]["walker"]["network_settings"]["memory"] = memory
    with pytest.raises(ConfigError) as info:
        learn(options)
    assert info.value.problems == (
        "behaviors.walker.network_settings.memory: not supported with a PettingZoo environment "
        "yet: an agent's memory would run on through the steps it is out of its episode; remove "
        "network_settings.memory",
    )


def test_a_plugins_trainer_type_is_refused_in_a_shared_environment(tmp_path: Path) -> None:
    options = options_from_data(shared_run(tmp_path))
    walker = attrs.evolve(options.behaviors["walker"], trainer_type="custom")
    options = attrs.evolve(options, behaviors={**options.behaviors, "walker": walker})
    assert shared_env_problems(options) == [
        "behaviors.walker.trainer_type: 'custom' does not train in a shared environment "
        "(env_settings.shared_env) yet (ppo, sac, poca, mappo do); use one of them, or remove "
        "env_settings.shared_env (each behavior then trains on copies of its own)"
    ]


@pytest.mark.parametrize(
    ("env_id", "kind"),
    [
        ("tests.multiagent_envs:countdown", "a turn-based (AEC) game"),
        ("CartPole-v1", "a Gymnasium environment"),
    ],
)
def test_only_a_parallel_environment_can_be_shared(env_id: str, kind: str) -> None:
    settings = EnvironmentSettings(env_id=env_id, shared_env=True)
    with pytest.raises(ConfigError) as info:
        make_shared_env(settings, {"player": None})
    assert info.value.problems == (
        f"env_settings.shared_env: {env_id!r} is {kind}; behaviors share the instances of a "
        "PettingZoo Parallel environment only (every agent acts in every step): remove "
        "shared_env",
    )


def test_a_stop_lets_the_turns_in_flight_end_the_others_acting_meanwhile(tmp_path: Path) -> None:
    options = shared_run(tmp_path)
    options["behaviors"]["guide"] = behavior(24, 48, 24)  # a turn of 24 steps
    multiagent_envs.MADE.clear()
    with Bus() as bus:

        def stop_after_the_first_turn(name: str, step: int, max_steps: int) -> None:
            bus.request_stop(f"{name} reached {step}")

        result = learn(options, bus, progress=stop_after_the_first_turn)
    assert result.status is RunStatus.STOPPED
    assert result.stop_reason == "walker reached 22"  # its turn of 12 steps ended first
    # the guide's turn in flight ended, the walkers acting (without learning) meanwhile
    assert result.steps == {"walker": 22, "guide": 24}
    (env,) = multiagent_envs.MADE
    assert len(env.played) == 24
    for name in ("walker", "guide"):
        assert (tmp_path / "run" / name / "checkpoint.pt").is_file()


def test_a_shared_run_resumes_each_behavior_from_its_own_checkpoint(tmp_path: Path) -> None:
    learn(shared_run(tmp_path))
    options = shared_run(tmp_path)
    options["behaviors"]["walker"]["max_steps"] = 88  # one rollout more each
    options["behaviors"]["guide"]["max_steps"] = 36
    options["checkpoint_settings"]["resume"] = True
    multiagent_envs.MADE.clear()
    recorder = Recorder()
    with Bus() as bus:
        recorder.connect(bus)
        result = learn(options, bus)
    assert result.steps == {"walker": 88, "guide": 36}
    (env,) = multiagent_envs.MADE
    assert len(env.played) == 12  # both rollouts in the same 12 steps
    assert [(e.category, e.step) for e in recorder.of(StatsEvent)] == [
        ("walker", 88),
        ("guide", 36),
    ]


def test_a_failure_ends_every_behaviors_turn(tmp_path: Path) -> None:
    options = shared_run(tmp_path)
    options["env_settings"]["env_id"] = "tests.multiagent_envs:Failing"  # fails at step 3
    with pytest.raises(ValueError, match="walkers broke at step 3"):
        learn(options)
    assert turn_threads() == []


def test_inference_runs_every_behaviors_policy_in_the_shared_instance(tmp_path: Path) -> None:
    learn(shared_run(tmp_path))
    options = shared_run(tmp_path)
    options["checkpoint_settings"]["inference"] = True
    multiagent_envs.MADE.clear()
    recorder = Recorder()
    with Bus() as bus:
        recorder.connect(bus)
        result = learn(options, bus)
    assert result.steps == {"walker": 66, "guide": 24}  # counted afresh, as on copies
    (env,) = multiagent_envs.MADE
    assert len(env.played) == 36  # the walkers' 66 steps; the guide acting in all of them
    assert all("guide_0" in actions for actions in env.played)
    stats = [(e.category, e.step) for e in recorder.of(StatsEvent)]
    assert stats == [
        ("walker/inference", 22),  # both at step 12 of the instance
        ("guide/inference", 12),
        ("walker/inference", 44),
        ("guide/inference", 24),
        ("walker/inference", 66),
    ]


def test_environment_parameters_reach_the_shared_instances_and_their_lessons_move(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    options = shared_run(tmp_path)
    criteria = {
        "behavior": "guide",
        "measure": "reward",
        "threshold": 4.0,  # the guide's mean return is 5 at its first summary
        "min_lesson_length": 2,
        "signal_smoothing": False,
    }
    options["environment_parameters"] = {
        "max_cycles": {
            "curriculum": [
                {"name": "long", "value": 6, "completion_criteria": criteria},
                {"name": "short", "value": 3},
            ]
        }
    }
    multiagent_envs.MADE.clear()
    with caplog.at_level(logging.INFO, logger="evtrain"):
        result = learn(options)
    assert result.steps["guide"] == 24
    assert "Parameter 'max_cycles' is now in lesson 1 ('short') after guide's step 12" in (
        caplog.text
    )
    (env,) = multiagent_envs.MADE  # the one instance every behavior acts in
    assert env.max_cycles == 3
    # 3 episodes of 6 steps (the third started before the lesson moved), then of 3 steps
    assert len(env.seeds) == 1 + 3 + (len(env.played) - 18) // 3, (env.seeds, len(env.played))
