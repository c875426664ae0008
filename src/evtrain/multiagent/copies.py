"""What the copies of a PettingZoo environment behind one ``AgentSlots`` share, whichever API
they step through (:mod:`~evtrain.multiagent.parallel`, :mod:`~evtrain.multiagent.aec`).

:class:`Cast` is the behavior's view of the agents (roles, spaces, co-players, the learning
team); :class:`Copy` one copy's episode; :class:`StepRecord` what one vector step returns, slot
by slot; :class:`Copies` the part of stepping both APIs share: asking the co-players for
actions (one call per co-player for all the copies), starting and ending a copy's episode.
"""

from __future__ import annotations

import abc
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import attrs
import numpy as np
import numpy.typing as npt
from gymnasium import spaces

from evtrain.multiagent.coplayers import CoPlayer, RandomCoPlayer, blank, co_player_keys, stack
from evtrain.multiagent.mapping import AgentRole

ACTIVE = "active"
"""``infos`` key: the slot's agent acted in this step (bool per slot)."""
GROUP_REWARD = "group_reward"
"""``infos`` key (and PettingZoo per-agent infos key): the copy's group reward this step."""
EPISODE_OVER = "episode_over"
"""``infos`` key: the slot's copy ended its episode in this step, and was reset."""
RESERVED = frozenset({ACTIVE, GROUP_REWARD, EPISODE_OVER, "final_obs"})
"""The ``infos`` keys :class:`~evtrain.multiagent.slots.AgentSlots` sets itself; an agent's
info keys of these names are not passed on (``group_reward`` is, as the copy's group
reward)."""


@attrs.frozen(kw_only=True)
class EpisodeResult:
    """How one copy's episode ended, for the learning team (self-play's win/draw/loss)."""

    team: int | None
    """The learning team of the episode (``None``: the behavior has no self-play)."""
    reward: float
    """Sum over the learning agents of the reward each got at the step its episode ended, plus
    the group reward of the episode's last step (ML-Agents' ghost trainer reads the last
    step's reward and group reward alike: a team game may score through either)."""
    copy: int
    """Which copy of the environment."""


@attrs.define(kw_only=True)
class Cast:
    """The agents as one behavior sees them: which ones it trains, and who acts for the rest."""

    behavior: str
    roles: dict[str, AgentRole]
    """Every possible agent's behavior and team, in the environment's order."""
    observation_spaces: dict[str, spaces.Space[Any]]
    """Per behavior: the observation space all its agents share."""
    action_spaces: dict[str, spaces.Space[Any]]
    self_play: bool
    learning_team: int | None
    """Requested for each copy's next episode (``None``: every agent of the behavior learns)."""
    co_players: dict[str, CoPlayer] = attrs.field(factory=dict)
    rng: np.random.Generator = attrs.field(factory=np.random.default_rng)
    """Draws the random co-players' actions."""
    listeners: list[Callable[[EpisodeResult], None]] = attrs.field(factory=list)

    def learners(self, team: int | None) -> list[str]:
        """The learning agents of an episode with learning team ``team``, one per slot."""
        return [
            agent
            for agent, role in self.roles.items()
            if role.behavior == self.behavior and (team is None or role.team == team)
        ]

    def co_player(self, agent: str) -> tuple[str, CoPlayer]:
        """(key, co-player) acting for ``agent``; a random one when no key is set."""
        role = self.roles[agent]
        for key in co_player_keys(role.behavior, role.team):
            found = self.co_players.get(key)
            if found is not None:
                return key, found
        return f"random {role.behavior}", RandomCoPlayer(
            self.action_spaces[role.behavior], self.rng
        )


@attrs.define(kw_only=True)
class Copy:
    """One copy of the environment, in its current episode."""

    env: Any
    team: int | None = None
    """The learning team of this episode."""
    learners: list[str] = attrs.field(factory=list)
    """The agent of each of this copy's slots in this episode."""
    last_obs: dict[str, Any] = attrs.field(factory=dict)
    """Each agent's latest observation (kept after it leaves: an inactive slot shows it)."""
    left: set[str] = attrs.field(factory=set)
    """The learners whose episode ended in this episode."""
    ended_reward: float = 0.0
    """Sum of the learners' rewards at the steps their episodes ended."""
    since_move: float = 0.0
    """Turn-based games: the learner's reward since its last move."""


class StepRecord:
    """One vector step (or reset), filled slot by slot."""

    def __init__(self, num_slots: int) -> None:
        self.obs: list[Any] = [None] * num_slots
        self.rewards = np.zeros(num_slots, dtype=np.float64)
        self.terminated = np.zeros(num_slots, dtype=np.bool_)
        self.truncated = np.zeros(num_slots, dtype=np.bool_)
        self.active = np.zeros(num_slots, dtype=np.bool_)
        self.group_reward = np.zeros(num_slots, dtype=np.float64)
        self.episode_over = np.zeros(num_slots, dtype=np.bool_)
        self.final_obs = np.full(num_slots, None, dtype=object)
        self.has_final = np.zeros(num_slots, dtype=np.bool_)
        self.agent_infos: dict[str, tuple[npt.NDArray[Any], npt.NDArray[np.bool_]]] = {}
        """The agents' own info keys: per key, (value per slot, mask of the slots with one)."""

    def add_info(self, i: int, info: Any) -> None:
        """Slot ``i``'s agent reported ``info`` (its PettingZoo info) in this step: each key
        becomes a vector info key, as Gymnasium's vector environments lay them out (the slots'
        own keys, :data:`ACTIVE` and the others, win over an agent's)."""
        if not isinstance(info, Mapping) or not info:
            return
        for key, value in info.items():
            if not isinstance(key, str) or key in RESERVED or key.startswith("_"):
                continue
            found = self.agent_infos.get(key)
            if found is None:
                n = len(self.obs)
                found = np.full(n, None, dtype=object), np.zeros(n, dtype=np.bool_)
                self.agent_infos[key] = found
            found[0][i] = value
            found[1][i] = True

    def infos(self) -> dict[str, Any]:
        """The vector step's ``infos``."""
        infos: dict[str, Any] = {
            ACTIVE: self.active,
            GROUP_REWARD: self.group_reward,
            EPISODE_OVER: self.episode_over,
        }
        if self.has_final.any():
            infos["final_obs"] = self.final_obs
            infos["_final_obs"] = self.has_final
        for key, (values, mask) in self.agent_infos.items():
            infos[key] = values
            infos["_" + key] = mask
        return infos


class Copies(abc.ABC):
    """The copies of one environment, stepped through one PettingZoo API."""

    def __init__(self, cast: Cast, envs: Sequence[Any], group_size: int) -> None:
        self.cast = cast
        self.copies = [Copy(env=env) for env in envs]
        self.group_size = group_size
        self.num_slots = len(envs) * group_size
        for copy in self.copies:
            self.start_episode(copy)

    @abc.abstractmethod
    def reset(self, seed: int | None) -> StepRecord:
        """Start every copy's episode (copy ``k`` seeded with ``seed + k``)."""

    @abc.abstractmethod
    def step(self, actions: npt.NDArray[Any]) -> StepRecord:
        """One step of every slot's agent (``actions`` one row per slot)."""

    @abc.abstractmethod
    def acting(self) -> npt.NDArray[np.bool_]:
        """The slots whose agent acts at the next step."""

    def close(self) -> None:
        for copy in self.copies:
            copy.env.close()

    # -- shared by both APIs ---------------------------------------------------------------

    def co_actions(self, requests: Sequence[tuple[str, Any]]) -> list[Any]:
        """The co-players' actions for ``(agent, observation)`` requests of any copies: one
        call per co-player with all the observations it acts on, stacked."""
        groups: dict[str, tuple[CoPlayer, str, list[int]]] = {}
        for index, (agent, _) in enumerate(requests):
            key, player = self.cast.co_player(agent)
            groups.setdefault(key, (player, self.cast.roles[agent].behavior, []))[2].append(index)
        actions: list[Any] = [None] * len(requests)
        for key, (player, behavior, indices) in groups.items():
            space = self.cast.action_spaces[behavior]
            obs = stack([requests[i][1] for i in indices], self.cast.observation_spaces[behavior])
            chosen = np.asarray(player(obs))
            if chosen.shape[:1] != (len(indices),):
                raise ValueError(
                    f"co-player {key!r} returned actions of shape {chosen.shape} for "
                    f"{len(indices)} observations; it must return one action per observation"
                )
            if isinstance(space, spaces.Box):
                chosen = np.clip(chosen.reshape(-1, *space.shape), space.low, space.high)
            for row, index in enumerate(indices):
                actions[index] = chosen[row]
        return actions

    def start_episode(self, copy: Copy) -> None:
        """The copy's new episode takes the requested learning team and its learners."""
        copy.team = self.cast.learning_team
        copy.learners = self.cast.learners(copy.team)
        copy.left = set()
        copy.ended_reward = 0.0

    def end_slot(
        self, record: StepRecord, k: int, j: int, *, terminated: bool, truncated: bool
    ) -> None:
        """Slot ``j`` of copy ``k`` ended its agent's episode in this step (its reward is in
        ``record`` already): its final observation and its share of the episode's result."""
        copy = self.copies[k]
        agent = copy.learners[j]
        i = k * self.group_size + j
        record.terminated[i] = terminated
        record.truncated[i] = truncated
        record.final_obs[i] = copy.last_obs[agent]
        record.has_final[i] = True
        copy.left.add(agent)
        copy.ended_reward += float(record.rewards[i])

    def end_episode(self, record: StepRecord, k: int) -> None:
        """Copy ``k``'s episode is over: every slot says so, the listeners hear the result."""
        copy = self.copies[k]
        record.episode_over[self.slots(k)] = True
        last_group_reward = float(record.group_reward[k * self.group_size])
        result = EpisodeResult(team=copy.team, reward=copy.ended_reward + last_group_reward, copy=k)
        for listener in self.cast.listeners:
            listener(result)

    def observe(self, record: StepRecord, k: int) -> None:
        """Each of copy ``k``'s slots shows its agent's latest observation (zeros before the
        agent ever appeared)."""
        copy = self.copies[k]
        space = self.cast.observation_spaces[self.cast.behavior]
        for j, agent in enumerate(copy.learners):
            obs = copy.last_obs.get(agent)
            record.obs[k * self.group_size + j] = blank(space) if obs is None else obs

    def slots(self, k: int) -> slice:
        """Copy ``k``'s slots."""
        return slice(k * self.group_size, (k + 1) * self.group_size)


def group_reward(infos: Mapping[str, Any], learners: Sequence[str]) -> float:
    """The group reward of a step for the learning agents ``learners``: the first one's
    ``"group_reward"`` info, else 0 (in a team game each team's infos carry its own)."""
    for agent in learners:
        info = infos.get(agent)
        if isinstance(info, Mapping) and GROUP_REWARD in info:
            return float(info[GROUP_REWARD])
    return 0.0
