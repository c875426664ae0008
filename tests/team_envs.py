"""A team game for the ML-Agents self-play samples: soccer on a grid, PettingZoo's Parallel API.

``env_id: tests.team_envs:soccer`` stands in for ML-Agents' SoccerTwos (two teams of two, one
behavior) and, with ``blue=("Striker", 2), purple=("Goalie", 1)``, for StrikersVsGoalie (two
behaviors, one a team of its own).  No Unity, no pygame: numpy only.

The field is ``width x height`` cells; blue attacks the right-hand goal (``x == width``),
purple the left-hand one (``x == -1``).  Each player moves one cell a step (``Discrete(5)``:
stay, up, down, left, right); moving onto the ball kicks it two cells on in that direction.  A
goal ends the episode: +1 to every player of the scoring team, -1 to every player of the
other; ``max_cycles`` steps without a goal truncate it (0 each).  With ``group_reward=True``
the goal is a **group reward** instead, as in ML-Agents' SoccerTwos for POCA
(``AddGroupReward``): each player's infos say ``group_reward`` +1 or -1, its own reward is 0.

Each player observes its own position, the ball's, then its teammates' and its opponents'
(``x`` in ``[0, 1]``, ``y`` in ``[0, 1]``), **mirrored for purple**: every player sees itself
attacking to the right, so one policy can play either side, as SoccerTwos' agents do.
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np
import numpy.typing as npt
from gymnasium import spaces
from pettingzoo import ParallelEnv

MOVES = np.array([(0, 0), (0, -1), (0, 1), (-1, 0), (1, 0)])
"""The actions' steps ``(dx, dy)``: stay, up, down, left, right."""

Observation = npt.NDArray[np.float32]


class Soccer(ParallelEnv):  # type: ignore[misc]  # pettingzoo ships no type information
    """Two teams on a grid; see the module's docstring."""

    metadata: ClassVar[dict[str, Any]] = {"name": "evtrain_soccer_v0", "render_modes": []}

    def __init__(
        self,
        blue: tuple[str, int] = ("blue", 2),
        purple: tuple[str, int] = ("purple", 2),
        *,
        width: int = 9,
        height: int = 5,
        max_cycles: int = 60,
        group_reward: bool = False,
    ) -> None:
        self.width, self.height, self.max_cycles = width, height, max_cycles
        self.group_reward = group_reward
        self.blue = [f"{blue[0]}_{i}" for i in range(blue[1])]
        self.purple = [f"{purple[0]}_{i}" for i in range(purple[1])]
        if set(self.blue) & set(self.purple):
            raise ValueError("the two teams need different names")
        self.possible_agents = [*self.blue, *self.purple]
        self.agents: list[str] = []
        size = 2 * (2 + len(self.possible_agents) - 1)
        self._observation_space = spaces.Box(0.0, 1.0, (size,), np.float32)
        self._action_space = spaces.Discrete(len(MOVES))
        self._rng = np.random.default_rng()
        self._positions: dict[str, npt.NDArray[np.int64]] = {}
        self._ball = np.zeros(2, dtype=np.int64)
        self._cycle = 0

    def observation_space(self, agent: str) -> spaces.Box:
        return self._observation_space

    def action_space(self, agent: str) -> spaces.Discrete:
        return self._action_space

    def reset(
        self, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[dict[str, Observation], dict[str, dict[str, Any]]]:
        if seed is not None:
            self._rng = np.random.default_rng(seed)
        self.agents = list(self.possible_agents)
        self._cycle = 0
        self._ball = np.array([self.width // 2, self._rng.integers(self.height)])
        for team, column in ((self.blue, 1), (self.purple, self.width - 2)):
            rows = self._rng.choice(self.height, size=len(team), replace=len(team) > self.height)
            for agent, row in zip(team, rows, strict=True):
                self._positions[agent] = np.array([column, row])
        return self._observations(), {agent: {} for agent in self.agents}

    def step(
        self, actions: dict[str, int]
    ) -> tuple[
        dict[str, Observation],
        dict[str, float],
        dict[str, bool],
        dict[str, bool],
        dict[str, dict[str, Any]],
    ]:
        self._cycle += 1
        order = self._rng.permutation(len(self.agents))
        for index in order:
            agent = self.agents[index]
            move = MOVES[int(actions[agent])] * (1 if agent in self.blue else -1)
            target = self._positions[agent] + move
            if not (0 <= target[0] < self.width and 0 <= target[1] < self.height):
                continue
            if (target == self._ball).all():
                self._ball = self._ball + 2 * move
                self._ball[1] = np.clip(self._ball[1], 0, self.height - 1)
                self._ball[0] = np.clip(self._ball[0], -1, self.width)
            self._positions[agent] = target
        scored = 1 if self._ball[0] >= self.width else -1 if self._ball[0] < 0 else 0
        scores = {a: float(scored if a in self.blue else -scored) for a in self.agents}
        rewards = dict.fromkeys(self.agents, 0.0) if self.group_reward else scores
        done = scored != 0
        truncated = not done and self._cycle >= self.max_cycles
        observations = self._observations()
        terminations = dict.fromkeys(self.agents, done)
        truncations = dict.fromkeys(self.agents, truncated)
        infos: dict[str, dict[str, Any]] = {agent: {} for agent in self.agents}
        if self.group_reward:
            infos = {agent: {"group_reward": scores[agent]} for agent in self.agents}
        if done or truncated:
            self.agents = []
        return observations, rewards, terminations, truncations, infos

    def _observations(self) -> dict[str, Observation]:
        return {agent: self._observe(agent) for agent in self.possible_agents}

    def _observe(self, agent: str) -> Observation:
        mine, theirs = (self.blue, self.purple) if agent in self.blue else (self.purple, self.blue)
        others = [a for a in mine if a != agent] + theirs
        points = [self._positions[agent], self._ball, *(self._positions[a] for a in others)]
        scale = np.array([self.width - 1, self.height - 1], dtype=np.float32)
        xy = np.clip(np.array(points, dtype=np.float32) / scale, 0.0, 1.0)
        if agent not in self.blue:  # purple sees the field mirrored: it attacks to the right
            xy[:, 0] = 1.0 - xy[:, 0]
        row: Observation = xy.reshape(-1)
        return row


def soccer(
    blue: tuple[str, int] | list[Any] = ("blue", 2),
    purple: tuple[str, int] | list[Any] = ("purple", 2),
    **kwargs: Any,
) -> Soccer:
    """The game, teams given as ``(name, players)`` (YAML gives them as lists)."""
    return Soccer((str(blue[0]), int(blue[1])), (str(purple[0]), int(purple[1])), **kwargs)
