"""A minimal environment of agent slots for the tests of self-play: what the ghost controller
needs of :class:`~evtrain.multiagent.slots.AgentSlots` (teams, co-players, episode listeners),
on a game whose winner is known without PettingZoo.

The game, a duel: both teams show a number from 0 to 2 at once, the higher one wins (+1, the
other -1), equal numbers draw (0).  An episode is that one move.  The learning team's agent is
the slot; the other team's agent is acted for by ``co_players[behavior]`` (or plays uniformly at
random without one), which sees the same observation: which team it plays.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import attrs
import numpy as np
from gymnasium import spaces
from gymnasium.vector import AutoresetMode, VectorEnv
from gymnasium.vector.utils import batch_space


@attrs.frozen(kw_only=True)
class EpisodeResult:
    """How a copy's episode ended for its learning team."""

    team: int
    reward: float
    copy: int


class DuelSlots(VectorEnv[Any, Any, Any]):
    """``copies`` copies of the duel, one learning slot each (``group_size`` 1).

    :param teams: the behavior's teams (self-play needs two; other counts test the refusal).
    """

    def __init__(self, copies: int = 4, behavior: str = "duel", teams: tuple[int, ...] = (0, 1)):
        self.metadata = {"autoreset_mode": AutoresetMode.SAME_STEP}
        self.num_envs = copies
        self.group_size = 1
        self.behavior = behavior
        self.single_observation_space = spaces.Box(0.0, 1.0, (2,), np.float32)
        self.single_action_space = spaces.Discrete(3)
        self.observation_space = batch_space(self.single_observation_space, copies)
        self.action_space = batch_space(self.single_action_space, copies)
        self.teams = list(teams)
        self.learning_team: int | None = self.teams[0]
        self.co_players: dict[str, Callable[[Any], Any]] = {}
        self.episode_listeners: list[Callable[[Any], None]] = []
        self.opponent_moves: list[np.ndarray] = []
        """Every batch of moves the co-player made, in order."""
        self._team = np.full(copies, self.teams[0])
        self._rng = np.random.default_rng(0)

    def set_learning_team(self, team: int) -> None:
        """``team`` learns from each copy's next episode on."""
        self.learning_team = team

    def _obs(self) -> np.ndarray:
        obs = np.zeros((self.num_envs, 2), dtype=np.float32)
        obs[np.arange(self.num_envs), self._team % 2] = 1.0
        return obs

    def reset(
        self, *, seed: int | list[int] | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        if isinstance(seed, int):
            self._rng = np.random.default_rng(seed)
        self._team[:] = self.learning_team
        return self._obs(), {}

    def step(self, actions: Any) -> tuple[Any, Any, Any, Any, dict[str, Any]]:
        obs = self._obs()
        opponent = self.co_players.get(self.behavior)
        if opponent is None:
            moves = self._rng.integers(0, 3, size=self.num_envs)
        else:
            moves = np.asarray(opponent(1.0 - obs)).astype(np.int64)
        self.opponent_moves.append(moves)
        rewards = np.sign(np.asarray(actions) - moves).astype(np.float64)
        done = np.ones(self.num_envs, dtype=np.bool_)
        for copy in range(self.num_envs):
            result = EpisodeResult(team=int(self._team[copy]), reward=rewards[copy], copy=copy)
            for listener in self.episode_listeners:
                listener(result)
        infos = {
            "final_obs": np.array(list(obs), dtype=object),
            "_final_obs": done.copy(),
            "active": np.ones(self.num_envs, dtype=np.bool_),
            "group_reward": np.zeros(self.num_envs),
            "episode_over": done.copy(),
        }
        self._team[:] = self.learning_team  # the next episodes
        return self._obs(), rewards, done, np.zeros_like(done), infos

    def close_extras(self, **kwargs: Any) -> None:
        pass


def one_team_across_behaviors(copies: int = 2) -> DuelSlots:
    """Duel copies where the behavior is one team, against another self-playing behavior's
    (``Goalie``): the attributes ``AgentSlots`` has across behaviors."""
    envs = DuelSlots(copies)
    envs.teams = [0]
    envs.self_play_teams = {0: ["duel"], 1: ["Goalie"]}  # type: ignore[attr-defined]
    envs.rivals = ["Goalie"]  # type: ignore[attr-defined]
    return envs
