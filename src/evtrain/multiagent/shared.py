"""Every behavior in the same instances of a PettingZoo Parallel environment: one shared step.

With ``env_settings.shared_env`` a run does not give each behavior copies of its own (with
co-players acting for the other behaviors' agents, :mod:`~evtrain.multiagent.slots`): it makes
``num_envs`` instances of the environment once, and in each step every behavior acts for its
own agents in every instance (what a Unity build does: one build serves all its behaviors).

:class:`SharedEnvironment` steps the instances with every behavior's actions at once and gives
each behavior its part of the result; :meth:`SharedEnvironment.view` is one behavior's part as a
Gymnasium vector environment of agent slots (:class:`BehaviorView`), with the layout, the
``infos`` keys and the rules of :class:`~evtrain.multiagent.slots.AgentSlots` (slot ``i``
belongs to instance ``i // group_size``; an agent that left, or has not appeared yet, has an
inactive slot).  An instance's episode is over when ``env.agents`` is empty: every behavior's
slots of it say ``episode_over``, and the instance is reset once for all of them.  A behavior
whose agents all left waits, its slots inactive, for the others to end the episode.

The view gives a group trainer (``poca``, ``mappo``) its groups: the ``group_size`` slots of an
instance, with the instance's ``group_reward`` and ``episode_over``.  A self-playing behavior
(``self_play``) whose agents form two teams has, as
:class:`~evtrain.multiagent.slots.AgentSlots` has, ``teams``, ``set_learning_team``,
``co_players`` and ``episode_listeners`` (what :class:`~evtrain.trainers.ghost.teams.TeamSlots`
asks): its slots are the learning team's agents, chosen at each instance's episode start, and
the other team's agents act with the behavior's co-player (its ghost opponent); each instance's
episode end is reported to the listeners.  Self-play between two behaviors' teams is refused.

A trainer steps its view as any vector environment, but the step is the behaviors' together:
the view hands its actions to :attr:`BehaviorView.exchange`, which the run's loop sets
(:mod:`evtrain.run.environments.shared_steps`) and which returns once every behavior has acted.
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
from evtrain.multiagent.copies import Cast, EpisodeResult, StepRecord
from evtrain.multiagent.coplayers import CoPlayer, stack
from evtrain.multiagent.mapping import AgentRole, agent_roles, check_behaviors
from evtrain.multiagent.parallel import ParallelCopies
from evtrain.multiagent.slots import behavior_spaces, learning_group_size

__all__ = ["BehaviorView", "SharedEnvironment", "view_reset"]

Exchange = Callable[[npt.NDArray[Any]], StepRecord]
"""A behavior's actions in, its part of the shared step out (see :attr:`BehaviorView.exchange`)."""


class SharedEnvironment:
    """Instances ``envs`` of a ``pettingzoo.ParallelEnv`` in which every behavior of
    ``behaviors`` acts for its agents (see the module's docs).

    :param envs: the instances; closed by :meth:`close`.
    :param behaviors: every behavior the run trains: each must have agents, and every agent's
        behavior must be one of them.
    :param agent_behaviors: ``env_settings.agent_behaviors``.
    :raises ConfigError: the mapping does not fit the environment, or one behavior's agents do
        not share their spaces.
    """

    def __init__(
        self,
        envs: Sequence[Any],
        behaviors: Sequence[str],
        *,
        agent_behaviors: Mapping[str, str] | None = None,
        self_play: Collection[str] = (),
        env_name: str = "the environment",
    ) -> None:
        if not envs:
            raise ValueError("SharedEnvironment needs at least one instance of the environment")
        self.envs = list(envs)
        first = self.envs[0]
        self.roles = agent_roles(list(first.possible_agents), agent_behaviors or {}, self_play)
        """Every agent's behavior and team."""
        check_behaviors(self.roles, behaviors)
        observation_spaces, action_spaces = behavior_spaces(first, self.roles)
        self.copies: dict[str, ParallelCopies] = {}
        """Per behavior, its slots in the instances (its learners, their last observations,
        which of them left)."""
        for behavior in behaviors:
            teams = sorted({r.team for r in self.roles.values() if r.behavior == behavior})
            plays = behavior in self_play
            if plays and len(teams) == 1:
                check_one_behavior_per_game(behavior, self.roles, self_play)
            cast = Cast(
                behavior=behavior,
                roles=self.roles,
                observation_spaces=observation_spaces,
                action_spaces=action_spaces,
                self_play=plays,
                learning_team=teams[0] if plays else None,
            )
            size = learning_group_size(cast, teams, env_name)
            self.copies[behavior] = ParallelCopies(cast, self.envs, size)
        self.latest: dict[str, StepRecord] = {}
        """Each behavior's part of the last reset or step (empty before the first reset)."""
        self._views = {
            behavior: BehaviorView(self, behavior, observation_spaces, action_spaces)
            for behavior in behaviors
        }
        self._closed = False

    def view(self, behavior: str) -> BehaviorView:
        """Behavior ``behavior``'s slots, as a vector environment."""
        return self._views[behavior]

    def reset(self, seed: int | None) -> dict[str, StepRecord]:
        """Start every instance's episode (instance ``k`` seeded with ``seed + k``)."""
        records = {b: StepRecord(c.num_slots) for b, c in self.copies.items()}
        for k, env in enumerate(self.envs):
            obs, _ = env.reset(seed=None if seed is None else seed + k)
            self._started(k, obs)
            for behavior, copies in self.copies.items():
                copies.mark_present(records[behavior], k)
        return self._observed(records)

    def step(self, actions: Mapping[str, npt.NDArray[Any]]) -> dict[str, StepRecord]:
        """One step of every instance: each behavior's ``actions`` (one row per slot of its
        view) for its agents there to act; returns each behavior's part of the step."""
        records = {b: StepRecord(c.num_slots) for b, c in self.copies.items()}
        joint: list[dict[str, Any]] = [{} for _ in self.envs]
        for behavior, copies in self.copies.items():
            chosen = np.asarray(actions[behavior])
            if chosen.shape[:1] != (copies.num_slots,):
                raise ValueError(
                    f"expected one action per slot of behavior {behavior!r} "
                    f"({copies.num_slots}), got an array of shape {chosen.shape}"
                )
            copies.learners_act(records[behavior], chosen, joint)
        self._opponents_act(joint)
        for k, env in enumerate(self.envs):
            result = env.step(joint[k])
            for behavior, copies in self.copies.items():
                copies.record_step(records[behavior], k, result)
            if env.agents:
                continue
            for behavior, copies in self.copies.items():
                copies.end_episode(records[behavior], k)
            obs, _ = env.reset(seed=None)
            self._started(k, obs)
        return self._observed(records)

    def close(self) -> None:
        """Close every instance (once)."""
        if self._closed:
            return
        self._closed = True
        for env in self.envs:
            env.close()

    def _opponents_act(self, joint: list[dict[str, Any]]) -> None:
        """The agents no behavior acts for in this step (a self-playing behavior's team that
        does not learn) act with their behavior's co-players (its self-play opponent): one call
        per co-player for all the instances."""
        wanted: dict[str, list[tuple[int, str]]] = {}
        for k, env in enumerate(self.envs):
            for agent in env.agents:
                if agent not in joint[k]:
                    wanted.setdefault(self.roles[agent].behavior, []).append((k, agent))
        for behavior, agents in wanted.items():
            copies = self.copies[behavior]
            requests = [(agent, copies.copies[k].last_obs[agent]) for k, agent in agents]
            for (k, agent), action in zip(agents, copies.co_actions(requests), strict=True):
                joint[k][agent] = action

    def _started(self, k: int, obs: Mapping[str, Any]) -> None:
        """Instance ``k`` started an episode with observations ``obs``."""
        for copies in self.copies.values():
            copy = copies.copies[k]
            copies.start_episode(copy)
            copy.last_obs.update(obs)

    def _observed(self, records: dict[str, StepRecord]) -> dict[str, StepRecord]:
        """Every slot shows its agent's latest observation; ``records`` become :attr:`latest`."""
        for behavior, copies in self.copies.items():
            for k in range(len(self.envs)):
                copies.observe(records[behavior], k)
        self.latest = records
        return records


class BehaviorView(VectorEnv[Any, Any, Any]):
    """One behavior's agent slots in a :class:`SharedEnvironment`: a vector environment
    (autoreset mode ``SAME_STEP``) whose ``step`` is that behavior's part of the shared step.

    ``reset`` resets the shared environment at the first call of any view, with that call's
    seed; later calls give the current observations (one behavior cannot restart the episode
    the others are in).  ``close`` closes the shared environment: the behaviors act in it
    together or not at all (a run closes each trainer's environments at its end, or when one
    of them fails to build).
    """

    def __init__(
        self,
        shared: SharedEnvironment,
        behavior: str,
        observation_spaces: Mapping[str, spaces.Space[Any]],
        action_spaces: Mapping[str, spaces.Space[Any]],
    ) -> None:
        self.shared = shared
        self.behavior = behavior
        self._copies = shared.copies[behavior]
        self.group_size = self._copies.group_size
        """Slots per instance: the behavior's agents."""
        self.num_envs = self._copies.num_slots
        self.single_observation_space = observation_spaces[behavior]
        self.single_action_space = action_spaces[behavior]
        self.observation_space = batch_space(self.single_observation_space, self.num_envs)
        self.action_space = batch_space(self.single_action_space, self.num_envs)
        self.metadata = {"autoreset_mode": AutoresetMode.SAME_STEP}
        self.exchange: Exchange = self._unconnected
        """Takes this behavior's actions for one shared step and returns its part of the step
        once every behavior has acted: set by the loop that drives the behaviors
        (:mod:`evtrain.run.environments.shared_steps`)."""
        self.teams: list[int] = sorted(
            {r.team for r in shared.roles.values() if r.behavior == behavior}
        )
        """The behavior's teams (one, 0, without ``?team=`` or self-play)."""

    # -- self-play: what evtrain.trainers.ghost.teams.TeamSlots asks ----------------------------

    @property
    def learning_team(self) -> int | None:
        """The team that learns from each instance's next episode on (``None``: no self-play,
        every agent of the behavior learns)."""
        return self._copies.cast.learning_team

    def set_learning_team(self, team: int) -> None:
        """Train team ``team`` from each instance's next episode on (never mid-episode); the
        other team's agents act with :attr:`co_players`.

        :raises ValueError: the behavior has no self-play, or no team ``team``.
        """
        if not self._copies.cast.self_play:
            raise ValueError(f"behavior {self.behavior!r} has no self_play: every agent learns")
        if team not in self.teams:
            raise ValueError(f"behavior {self.behavior!r} has teams {self.teams}, not {team}")
        self._copies.cast.learning_team = team

    @property
    def co_players(self) -> dict[str, CoPlayer]:
        """Who acts for the behavior's agents that do not learn (a self-playing behavior's other
        team), keyed ``"<behavior>?team=<N>"`` or ``"<behavior>"``; neither: uniformly random
        legal actions.  Changes apply from the next step."""
        return self._copies.cast.co_players

    @co_players.setter
    def co_players(self, players: Mapping[str, CoPlayer]) -> None:
        self._copies.cast.co_players = dict(players)

    @property
    def episode_listeners(self) -> list[Callable[[EpisodeResult], None]]:
        """Called once per instance episode end, with its result for the learning team."""
        return self._copies.cast.listeners

    # -- the vector environment -------------------------------------------------------------------

    @property
    def acting(self) -> npt.NDArray[np.bool_]:
        """The slots whose agent acts at the next step."""
        return self._copies.acting()

    def observations(self) -> Any:
        """The observation each slot shows now, as a batch."""
        return stack(self.shared.latest[self.behavior].obs, self.single_observation_space)

    def reset(
        self, *, seed: int | list[int] | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Any, dict[str, Any]]:
        return view_reset(self, seed)

    def step(
        self, actions: Any
    ) -> tuple[Any, npt.NDArray[Any], npt.NDArray[Any], npt.NDArray[Any], dict[str, Any]]:
        record = self.exchange(np.asarray(actions))
        return (
            stack(record.obs, self.single_observation_space),
            record.rewards,
            record.terminated,
            record.truncated,
            record.infos(),
        )

    def call(self, name: str, *args: Any, **kwargs: Any) -> tuple[Any, ...]:
        """Call method ``name`` of every instance (an attribute that is not callable: take its
        value), one result per **instance**, as :meth:`AgentSlots.call
        <evtrain.multiagent.slots.AgentSlots.call>` does per copy: how a run's
        ``environment_parameters`` reach the wrappers around the instances (every behavior's
        view reaches the same ones)."""
        results = []
        for env in self.shared.envs:
            found = getattr(env, name)
            results.append(found(*args, **kwargs) if callable(found) else found)
        return tuple(results)

    def close_extras(self, **kwargs: Any) -> None:
        self.shared.close()

    def _unconnected(self, actions: npt.NDArray[Any]) -> StepRecord:
        raise RuntimeError(
            f"behavior {self.behavior!r} acts in a shared environment: its step is every "
            "behavior's, taken by the loop that drives them (evtrain.run.environments.shared_steps)"
        )

    def __repr__(self) -> str:
        return (
            f"BehaviorView({self.behavior!r}, {len(self.shared.envs)} shared instances x "
            f"{self.group_size} slots)"
        )


def check_one_behavior_per_game(
    behavior: str, roles: Mapping[str, AgentRole], self_play: Collection[str]
) -> None:
    """Refuse a self-playing ``behavior`` of one team whose opponents are another self-playing
    behavior's team (ML-Agents' asymmetric self-play), which a shared environment does not
    play yet.  One team with nobody to play is :func:`~evtrain.trainers.ghost.team_slots`' to
    refuse."""
    others = [r.behavior for r in roles.values() if r.behavior != behavior]
    rivals = [b for b in dict.fromkeys(others) if b in self_play]
    if not rivals:
        return
    raise ConfigError(
        [
            f"behaviors.{behavior}.self_play: in a shared environment (env_settings.shared_env) "
            f"self-play plays the teams of one behavior against each other; behavior "
            f"{behavior!r} has one team, playing behavior {rivals[0]!r}'s, which is not "
            "supported yet: remove self_play from both (each then plays against the other's "
            "current policy in the shared step), or remove env_settings.shared_env (each "
            "behavior then trains on copies of its own)"
        ]
    )


def view_reset(view: Any, seed: int | list[int] | None) -> tuple[Any, dict[str, Any]]:
    """A behavior's view's ``reset`` (this module's and :mod:`evtrain.unity.view`'s): the
    shared environment is reset once, by the first view asked (``seed``: its first), and every
    view shows its behavior's part of that reset."""
    if isinstance(seed, list):
        seed = seed[0]
    if not view.shared.latest:
        view.shared.reset(seed)
    return view.observations(), view.shared.latest[view.behavior].infos()
