"""Environments for tests of ``environment_parameters``: what they were set to shows in their
rewards, so a run's episode returns say which values each episode saw (also from an async
worker process).  :class:`ParameterGame` and :class:`ParameterTurns` are PettingZoo's
(Parallel and AEC) versions of :class:`ParameterEnv`, for two players, which also write the
values of each reset to a file when asked."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, ClassVar

import gymnasium as gym
import numpy as np
from pettingzoo import ParallelEnv

from evtrain import Bus, StatsEvent
from evtrain.config.environment_parameters import Constant, Uniform
from evtrain.run.learn import learn
from evtrain.testing import Recorder
from tests.multiagent_envs import TurnGame

EPISODE_LENGTH = 4


class ParameterEnv(gym.Env[np.ndarray, np.int64]):
    """Episodes of 4 steps whose every reward is ``bonus`` + ``options["tilt"]`` of the reset
    (0 without): an episode's return is 4 x (bonus + tilt).  ``num_tiles`` is an attribute for
    ML-Agents' Sorter curriculum, read by nothing."""

    observation_space = gym.spaces.Box(-1.0, 1.0, shape=(2,), dtype=np.float32)
    action_space = gym.spaces.Discrete(2)

    def __init__(self) -> None:
        self.bonus = 0.0
        self.num_tiles = 0.0
        self._tilt = 0.0
        self._t = 0

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        super().reset(seed=seed)
        self._tilt = float((options or {}).get("tilt", 0.0))
        self._t = 0
        return np.zeros(2, dtype=np.float32), {}

    def step(self, action: np.int64) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        self._t += 1
        obs = np.full(2, self._t / EPISODE_LENGTH, dtype=np.float32)
        return obs, self.bonus + self._tilt, self._t >= EPISODE_LENGTH, False, {}


def parameter_env() -> gym.Env[Any, Any]:
    """:class:`ParameterEnv` (``env_id: tests.curriculum_envs:parameter_env``)."""
    return ParameterEnv()


PLAYERS = ["player_0", "player_1"]


class _Starts:
    """The values each reset of a two-player game saw: ``bonus`` (an attribute) and
    ``options["tilt"]`` (0 without), kept in :attr:`starts` and, given ``record``, appended to
    that file as one JSON object a line (a CLI run's test reads them back)."""

    def __init__(self, record: str | None) -> None:
        self.record = record
        self.starts: list[tuple[float, float]] = []

    def start(self, bonus: float, options: dict[str, Any] | None) -> float:
        """Record an episode's start; its tilt."""
        tilt = float((options or {}).get("tilt", 0.0))
        self.starts.append((bonus, tilt))
        if self.record is not None:
            with Path(self.record).open("a") as file:
                file.write(json.dumps({"bonus": bonus, "tilt": tilt}) + "\n")
        return tilt


class ParameterGame(ParallelEnv):  # type: ignore[misc]  # an untyped base class
    """:class:`ParameterEnv` for two players at once (PettingZoo's Parallel API): episodes of 4
    steps in which every player gets ``bonus`` + ``options["tilt"]`` at every step."""

    metadata: ClassVar[dict[str, Any]] = {"name": "parameter_game_v0"}

    def __init__(self, record: str | None = None) -> None:
        self.possible_agents = list(PLAYERS)
        self.agents: list[str] = []
        self.bonus = 0.0
        self.log = _Starts(record)
        self._tilt = 0.0
        self._t = 0

    def observation_space(self, agent: str) -> gym.spaces.Space[Any]:
        return ParameterEnv.observation_space

    def action_space(self, agent: str) -> gym.spaces.Space[Any]:
        return ParameterEnv.action_space

    def reset(
        self, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        self._tilt = self.log.start(self.bonus, options)
        self._t = 0
        self.agents = list(self.possible_agents)
        return {a: np.zeros(2, dtype=np.float32) for a in self.agents}, {a: {} for a in self.agents}

    def step(self, actions: dict[str, Any]) -> tuple[dict[str, Any], ...]:
        self._t += 1
        obs = {a: np.full(2, self._t / EPISODE_LENGTH, dtype=np.float32) for a in self.agents}
        done = self._t >= EPISODE_LENGTH
        rewards = dict.fromkeys(self.agents, self.bonus + self._tilt)
        terminations = dict.fromkeys(self.agents, done)
        truncations = dict.fromkeys(self.agents, False)
        infos: dict[str, dict[str, Any]] = {a: {} for a in self.agents}
        if done:
            self.agents = []
        return obs, rewards, terminations, truncations, infos


class ParameterTurns(TurnGame):
    """:class:`ParameterEnv` for two players taking turns (PettingZoo's AEC API): 4 moves each,
    every move giving its player ``bonus`` + ``options["tilt"]``."""

    metadata: ClassVar[dict[str, Any]] = {"name": "parameter_turns_v0", "is_parallelizable": False}

    def __init__(self, record: str | None = None) -> None:
        super().__init__()
        self.possible_agents = list(PLAYERS)
        self.bonus = 0.0
        self.log = _Starts(record)
        self._tilt = 0.0
        self._moves = 0

    def observation_space(self, agent: str) -> gym.spaces.Space[Any]:
        return ParameterEnv.observation_space

    def action_space(self, agent: str) -> gym.spaces.Space[Any]:
        return ParameterEnv.action_space

    def observe(self, agent: str) -> Any:
        return np.full(2, self._moves / (2 * EPISODE_LENGTH), dtype=np.float32)

    def reset(self, seed: int | None = None, options: dict[str, Any] | None = None) -> None:
        self._tilt = self.log.start(self.bonus, options)
        self._moves = 0
        self.agents = list(self.possible_agents)
        self._start_turns()

    def step(self, action: Any) -> None:
        agent = self.agent_selection
        if self.terminations[agent] or self.truncations[agent]:
            self._was_dead_step(action)
            return
        self._clear_rewards()
        self._cumulative_rewards[agent] = 0.0
        self._moves += 1
        self.rewards[agent] = self.bonus + self._tilt
        if self._moves >= 2 * EPISODE_LENGTH:
            self.terminations = dict.fromkeys(self.agents, True)
        self.agent_selection = self._selector.next()
        self._accumulate_rewards()


def parameter_game(record: str | None = None) -> ParameterGame:
    """:class:`ParameterGame` (``env_id: tests.curriculum_envs:parameter_game``)."""
    return ParameterGame(record)


def parameter_turns(record: str | None = None) -> ParameterTurns:
    """:class:`ParameterTurns` (``env_id: tests.curriculum_envs:parameter_turns``)."""
    return ParameterTurns(record)


def run_options(tmp_path: Path, parameters: dict[str, Any], **env: Any) -> dict[str, Any]:
    """PPO on :class:`ParameterEnv`: 2 envs x 8 steps per update, a summary every 32 steps
    (4 episodes of each env), 128 steps."""
    return {
        "behaviors": {
            "B": {
                "trainer_type": "ppo",
                "hyperparameters": {"batch_size": 16, "buffer_size": 16, "num_epoch": 1},
                "network_settings": {"hidden_units": 8, "num_layers": 1},
                "max_steps": 128,
                "time_horizon": 8,
                "summary_freq": 32,
                "checkpoint_interval": 64,
                "keep_checkpoints": 1,
            }
        },
        "env_settings": {
            "env_id": "tests.curriculum_envs:parameter_env",
            "num_envs": 2,
            "seed": 1,
            **env,
        },
        "checkpoint_settings": {"run_id": "run", "results_dir": str(tmp_path / "results")},
        "environment_parameters": parameters,
    }


REWARD = "Environment/Cumulative Reward"


def progress(threshold: float, **more: Any) -> dict[str, Any]:
    return {"behavior": "B", "measure": "progress", "threshold": threshold, **more}


CURRICULUM = {
    "bonus": {
        "curriculum": [
            {"name": "one", "value": 1.0, "completion_criteria": progress(0.2)},
            {"name": "two", "value": 2.0, "completion_criteria": progress(0.5)},
            {
                "name": "draw",
                "value": {
                    "sampler_type": "uniform",
                    "sampler_parameters": {"min_value": 3, "max_value": 4},
                },
            },
        ]
    },
    "tilt": 0.5,  # ParameterEnv has no attribute tilt: it reads it from its reset options
}


def returns(recorder: Recorder) -> list[list[float]]:
    """The episode returns of each summary, sorted."""
    return [sorted(e.values[REWARD].full_dist) for e in recorder.of(StatsEvent)]


def recorded_run(options: dict[str, Any]) -> Recorder:
    recorder = Recorder()
    with Bus() as bus:
        recorder.connect(bus)
        learn(options, bus)
    return recorder


def check_curriculum_returns(periods: list[list[float]]) -> None:
    """Returns are 4 x (bonus + tilt 0.5).  A lesson applies from each environment's next
    reset: the episode it began in the step that ended the summary's last keeps the old one."""
    assert periods[0] == [6.0] * 8  # lesson "one"; moves on at 32 (progress 0.25 > 0.2)
    assert periods[1] == [6.0] * 2 + [10.0] * 6  # "two"; 0.5 is not > 0.5
    assert periods[2] == [10.0] * 8  # moves on at 96
    assert periods[3][:2] == [10.0] * 2
    drawn = periods[3][2:]  # "draw": 4 x (U[3, 4) + 0.5), a fresh value each episode
    assert len(drawn) == 6 and all(14.0 <= r < 18.0 for r in drawn)
    assert len(set(drawn)) == 6


SAMPLERS = {"bonus": Uniform(min_value=1.0, max_value=2.0), "tilt": Constant(value=0.5)}
