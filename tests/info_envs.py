"""Environments that report statistics in their ``info`` (``behaviors.<name>.info_stats``),
with numbers a test can predict (``env_id: tests.info_envs:tally``).

:class:`Tally` (Gymnasium): episodes of ``length`` steps; the observation is the step ``t``
(1 to ``length``).  Each step's info: ``coins`` = ``t``, ``episode`` = the episode's number
in this environment (0, 1, ...), ``is_success`` = false but at the last step of an even
episode, and ``label`` = ``"tally"`` (not a number).  A reset's info says ``coins`` = 1000 and
``is_success`` = true: a test sees at once if a reset's info were counted.

:class:`TallyWalkers` (PettingZoo Parallel): :class:`~tests.multiagent_envs.Walkers` whose
agents' infos also carry ``coins`` = 10 x step + the agent's index.

:class:`TallyCountdown` (PettingZoo AEC): :class:`~tests.multiagent_envs.Countdown` whose
players' infos carry ``left``, the counter after each move.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np

from tests.multiagent_envs import Countdown, Walkers

RESET_COINS = 1000


class Tally(gym.Env[np.ndarray, np.int64]):
    """See the module's docs; terminated at step ``length``, whatever the actions."""

    observation_space = gym.spaces.Box(0.0, 1000.0, (1,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def __init__(self, length: int = 4) -> None:
        self.length = length
        self.episode = -1
        self.t = 0

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        super().reset(seed=seed)
        self.episode += 1
        self.t = 0
        return np.zeros(1, dtype=np.float32), {"coins": RESET_COINS, "is_success": True}

    def step(self, action: np.int64) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        self.t += 1
        last = self.t == self.length
        info = {
            "coins": self.t,
            "episode": self.episode,
            "is_success": last and self.episode % 2 == 0,
            "label": "tally",
        }
        return np.array([self.t], dtype=np.float32), 1.0, last, False, info


def tally(**kwargs: Any) -> gym.Env[Any, Any]:
    return Tally(**kwargs)


class TallyWalkers(Walkers):
    """:class:`~tests.multiagent_envs.Walkers` with ``coins`` in every acting agent's info."""

    def step(self, actions: dict[str, Any]) -> tuple[dict[str, Any], ...]:
        obs, rewards, terminations, truncations, infos = super().step(actions)
        for agent, info in infos.items():
            info["coins"] = 10 * self.steps + self.possible_agents.index(agent)
        return obs, rewards, terminations, truncations, infos


def tally_walkers(**kwargs: Any) -> TallyWalkers:
    return TallyWalkers(**kwargs)


class TallyCountdown(Countdown):
    """:class:`~tests.multiagent_envs.Countdown` with ``left`` in every player's info."""

    def step(self, action: Any) -> None:
        super().step(action)
        for info in self.infos.values():
            info["left"] = self.counter
