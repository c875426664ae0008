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
