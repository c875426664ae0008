"""One behavior's view of a PettingZoo environment: a Gymnasium vector environment of agent slots.

A behavior trains on its own ``num_envs`` copies of the environment.  :class:`AgentSlots` wraps
them as one ``gymnasium.vector.VectorEnv`` (autoreset mode ``SAME_STEP``, what evtrain's
trainers expect) whose sub-environments are **agent slots**: per copy, one slot per learning
agent of the behavior (:attr:`AgentSlots.group_size` of them, contiguous: slot ``i`` belongs to
copy ``i // group_size``).  Every other agent of a copy (another behavior's, or in self-play
the other team's) is acted for by a co-player (:mod:`evtrain.multiagent.coplayers`).

``step`` returns ``(obs, rewards, terminated, truncated, infos)`` as a ``SAME_STEP`` vector
env does: a slot whose agent's episode ended has its final observation in
``infos["final_obs"][i]`` (mask ``infos["_final_obs"]``).  Always in ``infos``, one value per
slot:

``active``
    the slot's agent acted in this step.  False for an agent that left the episode or has not
    appeared yet: such a step is no experience (trainers drop it).  The slot shows the agent's
    last observation (zeros before it ever appeared), reward 0, neither terminated nor
    truncated.
``group_reward``
    the environment's group reward for the slot's copy (PettingZoo's per-agent infos key
    ``"group_reward"``, else 0).
``episode_over``
    the slot's copy ended its episode in this step, and was reset; every slot still active
    in it then has terminated or truncated set.

Each key of an agent's own PettingZoo info (but these names) is a key of ``infos`` too, laid
out as Gymnasium's vector environments do: a value per slot and a mask ``_<key>`` of the
slots whose agent reported it in this step (the info of the step that ended an agent's
episode included; what a behavior's ``info_stats`` read, :mod:`evtrain.trainers.info_stats`).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt
from gymnasium import spaces
from gymnasium.vector import AutoresetMode, VectorEnv
from gymnasium.vector.utils import batch_space

from evtrain.errors import ConfigError
from evtrain.multiagent.aec import AECCopies
from evtrain.multiagent.copies import (
    ACTIVE,
    EPISODE_OVER,
    GROUP_REWARD,
    Cast,
    Copies,
    EpisodeResult,
    StepRecord,
)
from evtrain.multiagent.coplayers import CoPlayer, stack
from evtrain.multiagent.mapping import AGENT_BEHAVIORS, AgentRole, agent_roles, check_behaviors
from evtrain.multiagent.parallel import ParallelCopies
from evtrain.multiagent.remote import RemoteCopy

__all__ = ["ACTIVE", "EPISODE_OVER", "GROUP_REWARD", "AgentSlots", "EpisodeResult", "api_of"]

_SEED_STREAM = 0xC0_91A7
"""Mixed into the reset seed for the random co-players' draws."""


def api_of(env: Any) -> str | None:
    """``"parallel"`` or ``"aec"`` for a PettingZoo environment, else ``None`` (also when
    PettingZoo is not installed: then nothing is one).  A copy in a process of its own
    (:class:`~evtrain.multiagent.remote.RemoteCopy`) is a Parallel one."""
    if isinstance(env, RemoteCopy):
        return "parallel"
    try:
        from pettingzoo import AECEnv, ParallelEnv
    except ImportError:
        return None
    if isinstance(env, ParallelEnv):
        return "parallel"
    if isinstance(env, AECEnv):
        return "aec"
    return None


class AgentSlots(VectorEnv[Any, Any, Any]):
    """The learning agents of ``behavior`` in copies ``envs`` of a PettingZoo environment, as
    one vector environment (see the module's docs).

    :param envs: the copies, each a ``pettingzoo.ParallelEnv`` (or a
        :class:`~evtrain.multiagent.remote.RemoteCopy` of one) or each a ``pettingzoo.AECEnv``;
        closed by :meth:`close`.
    :param agent_behaviors: ``env_settings.agent_behaviors``: behaviors (``"name"`` or
        ``"name?team=N"``) of agents whose id does not name theirs.
    :param behaviors: every behavior the run trains: each must have agents, and every agent's
        behavior settings; ``None`` checks only that ``behavior`` has agents.
    :param self_play: ``behavior`` trains one team at a time (:attr:`learning_team`).
    :param self_play_behaviors: the behaviors of the run that self-play (``behavior`` itself
        may be among them): the teams of the others (:attr:`self_play_teams`) are those
        ``behavior``'s may play against.
    :param env_name: how errors name the environment (``env_settings.env_id``).
    :raises ConfigError: the mapping does not fit the environment, the behavior's agents do
        not share their spaces, self-play teams differ in size, or a turn-based (AEC) game
        would have more than one learning agent per copy.
    """

    def __init__(
        self,
        envs: Sequence[Any],
        behavior: str,
        *,
        agent_behaviors: Mapping[str, str] | None = None,
        behaviors: Collection[str] | None = None,
        self_play: bool = False,
        self_play_behaviors: Collection[str] = (),
        env_name: str = "the environment",
    ) -> None:
        if not envs:
            raise ValueError("AgentSlots needs at least one copy of the environment")
        api = api_of(envs[0])
        if api is None:
            raise TypeError(f"{envs[0]!r} is not a PettingZoo ParallelEnv or AECEnv")
        self.behavior = behavior
        self.api = api
        """Which PettingZoo API the copies step through: ``"parallel"`` or ``"aec"``."""
        self.copies = len(envs)
        """Copies of the environment."""
        self.group_size = 0
        """Learning slots per copy."""
        first = envs[0]
        playing = {*self_play_behaviors, *([behavior] if self_play else [])}
        roles = agent_roles(list(first.possible_agents), agent_behaviors or {}, playing)
        if behaviors is not None:
            check_behaviors(roles, behaviors)
        elif all(r.behavior != behavior for r in roles.values()):
            check_behaviors(roles, [behavior, *(r.behavior for r in roles.values())])
        observation_spaces, action_spaces = behavior_spaces(first, roles)
        self.teams: list[int] = sorted({r.team for r in roles.values() if r.behavior == behavior})
        """The behavior's teams (one, 0, without ``?team=`` or self-play)."""
        self.self_play_teams: dict[int, list[str]] = {}
        """Every team of self-playing agents (of this behavior and of the others that
        self-play), with the behaviors of its agents."""
        for role in sorted(roles.values(), key=lambda r: r.team):
            if role.behavior in playing:
                names = self.self_play_teams.setdefault(role.team, [])
                if role.behavior not in names:
                    names.append(role.behavior)
        self._cast = Cast(
            behavior=behavior,
            roles=roles,
            observation_spaces=observation_spaces,
            action_spaces=action_spaces,
            self_play=self_play,
            learning_team=self.teams[0] if self_play else None,
        )
        self.group_size = learning_group_size(self._cast, self.teams, env_name)
        if api == "aec" and self.group_size != 1:
            raise ConfigError([_one_learner(self._cast, env_name)])
        copies_type = ParallelCopies if api == "parallel" else AECCopies
        self._copies: Copies = copies_type(self._cast, envs, self.group_size)
        self.num_envs = self.copies * self.group_size
        self.single_observation_space = observation_spaces[behavior]
        self.single_action_space = action_spaces[behavior]
        self.observation_space = batch_space(self.single_observation_space, self.num_envs)
        self.action_space = batch_space(self.single_action_space, self.num_envs)
        self.metadata = {"autoreset_mode": AutoresetMode.SAME_STEP}

    # -- who plays ------------------------------------------------------------------------------

    @property
    def co_players(self) -> dict[str, CoPlayer]:
        """Who acts for the agents this behavior does not train, keyed ``"<behavior>?team=<N>"``
        or ``"<behavior>"`` (looked up in that order; neither: uniformly random legal
        actions).  Changes apply from the next step."""
        return self._cast.co_players

    @co_players.setter
    def co_players(self, players: Mapping[str, CoPlayer]) -> None:
        self._cast.co_players = dict(players)

    @property
    def co_player_behaviors(self) -> list[str]:
        """The other behaviors whose agents play in this behavior's copies."""
        found = (r.behavior for r in self._cast.roles.values() if r.behavior != self.behavior)
        return list(dict.fromkeys(found))

    @property
    def rivals(self) -> list[str]:
        """The other self-playing behaviors whose agents are this self-playing behavior's
        opponents (its own self-play decides who acts for them, not their current policy)."""
        if not self._cast.self_play:
            return []
        found = (b for names in self.self_play_teams.values() for b in names)
        return [b for b in dict.fromkeys(found) if b != self.behavior]

    @property
    def roles(self) -> dict[str, AgentRole]:
        """Every agent's behavior and team."""
        return dict(self._cast.roles)

    @property
    def learning_team(self) -> int | None:
        """The team that learns from each copy's next episode on (``None``: no self-play,
        every agent of the behavior learns)."""
        return self._cast.learning_team

    def set_learning_team(self, team: int) -> None:
        """Train team ``team`` from each copy's next episode on (never mid-episode).

        :raises ValueError: the behavior has no self-play, or no team ``team``.
        """
        if not self._cast.self_play:
            raise ValueError(f"behavior {self.behavior!r} has no self_play: every agent learns")
        if team not in self.teams:
            raise ValueError(f"behavior {self.behavior!r} has teams {self.teams}, not {team}")
        self._cast.learning_team = team

    @property
    def episode_listeners(self) -> list[Callable[[EpisodeResult], None]]:
        """Called once per copy episode end, with its :class:`EpisodeResult`."""
        return self._cast.listeners

    @property
    def acting(self) -> npt.NDArray[np.bool_]:
        """The slots whose agent acts at the next step (the others show a stale observation:
        trainers keep it out of their observation normaliser)."""
        return self._copies.acting()

    @property
    def copy_envs(self) -> list[Any]:
        """The copies of the environment (an evaluation plays on them directly)."""
        return [copy.env for copy in self._copies.copies]

    def learners(self, copy: int) -> list[str]:
        """The agents of copy ``copy``'s slots in its current episode."""
        return list(self._copies.copies[copy].learners)

    # -- the vector environment -------------------------------------------------------------------

    def reset(
        self, *, seed: int | list[int] | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Any, dict[str, Any]]:
        """Start a new episode in every copy; copy ``k`` is seeded with ``seed + k``."""
        if isinstance(seed, list):
            seed = seed[0]
        if seed is not None:
            self._cast.rng = np.random.default_rng([seed, _SEED_STREAM])
        record = self._copies.reset(seed)
        return self._batch(record), record.infos()

    def step(
        self, actions: Any
    ) -> tuple[Any, npt.NDArray[Any], npt.NDArray[Any], npt.NDArray[Any], dict[str, Any]]:
        actions = np.asarray(actions)
        if actions.shape[:1] != (self.num_envs,):
            raise ValueError(
                f"expected one action per slot ({self.num_envs}), got an array of shape "
                f"{actions.shape}"
            )
        record = self._copies.step(actions)
        return (
            self._batch(record),
            record.rewards,
            record.terminated,
            record.truncated,
            record.infos(),
        )

    def call(self, name: str, *args: Any, **kwargs: Any) -> tuple[Any, ...]:
        """Call method ``name`` of every copy with ``args`` and ``kwargs`` (an attribute that
        is not callable: take its value), as a Gymnasium vector environment's ``call`` does
        for its sub-environments, but one result per **copy**, in order, not per slot: a
        copy's slots share its environment.  How a run's ``environment_parameters`` reach the
        wrappers around the copies."""
        results = []
        for copy in self._copies.copies:
            if isinstance(copy.env, RemoteCopy):
                results.append(copy.env.call(name, *args, **kwargs))
                continue
            found = getattr(copy.env, name)
            results.append(found(*args, **kwargs) if callable(found) else found)
        return tuple(results)

    def close_extras(self, **kwargs: Any) -> None:
        self._copies.close()

    def _batch(self, record: StepRecord) -> Any:
        return stack(record.obs, self.single_observation_space)

    def __repr__(self) -> str:
        return (
            f"AgentSlots({self.behavior!r}, {self.copies} copies x {self.group_size} slots, "
            f"{self.api})"
        )


def behavior_spaces(
    env: Any, roles: Mapping[str, AgentRole]
) -> tuple[dict[str, spaces.Space[Any]], dict[str, spaces.Space[Any]]]:
    """Each behavior's observation and action space, which all its agents must share."""
    observation: dict[str, spaces.Space[Any]] = {}
    action: dict[str, spaces.Space[Any]] = {}
    first: dict[str, str] = {}
    for agent, role in roles.items():
        pair = (env.observation_space(agent), env.action_space(agent))
        b = role.behavior
        if b not in first:
            first[b] = agent
            observation[b], action[b] = pair
        elif pair != (observation[b], action[b]):
            raise ConfigError(
                [
                    f"{AGENT_BEHAVIORS}: agents {first[b]} and {agent} of behavior {b!r} have "
                    f"different spaces (observation {observation[b]} and {pair[0]}, action "
                    f"{action[b]} and {pair[1]}); one behavior's agents share one network: "
                    "map them to different behaviors"
                ]
            )
    return observation, action


def learning_group_size(cast: Cast, teams: list[int], env_name: str) -> int:
    """Learning slots per copy: the behavior's agents, or with self-play one team's."""
    if not cast.self_play:
        return len(cast.learners(None))
    sizes = {team: len(cast.learners(team)) for team in teams}
    if len(set(sizes.values())) > 1:
        listed = ", ".join(f"team {t}: {', '.join(cast.learners(t))}" for t in teams)
        raise ConfigError(
            [
                f"{AGENT_BEHAVIORS}: the self-play teams of behavior {cast.behavior!r} in "
                f"{env_name} differ in size ({listed}); each team learns in turn on the same "
                "slots: give every team as many agents"
            ]
        )
    return sizes[teams[0]]


def _one_learner(cast: Cast, env_name: str) -> str:
    agents = cast.learners(cast.learning_team)
    return (
        f"{AGENT_BEHAVIORS}: {env_name} is a turn-based (AEC) game, and behavior "
        f"{cast.behavior!r} would have {len(agents)} learning agents in each copy "
        f"({', '.join(agents)}); evtrain trains one agent per copy of a turn-based game: give "
        f"the agents different behaviors ({AGENT_BEHAVIORS}: {{{agents[0]}: ..., {agents[1]}: "
        f"...}}), or make them teams with behaviors.{cast.behavior}.self_play"
    )
