"""One trainer behavior's part of :class:`~evtrain.unity.behaviors.UnityBehaviors`: its agent
slots as a Gymnasium vector environment (:class:`UnityBehaviorView`).

A behavior with ``self_play`` (its agents in two teams, ``Soccer?team=0`` and ``Soccer?team=1``)
has the members self-play asks of its environments
(:class:`~evtrain.trainers.ghost.teams.TeamSlots`: ``teams``, ``learning_team``,
``set_learning_team``, ``co_players``, ``episode_listeners``): its slots are then its learning
team's agents only, the other team's acting with its co-player (:mod:`evtrain.unity.teams`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt
from gymnasium import spaces
from gymnasium.vector import AutoresetMode, VectorEnv
from gymnasium.vector.utils import batch_space

from evtrain.multiagent.copies import EpisodeResult, StepRecord
from evtrain.multiagent.coplayers import CoPlayer
from evtrain.multiagent.shared import view_reset
from evtrain.unity.slots import BehaviorSlots
from evtrain.unity.spaces import MASK_KEY, action_space, observation_keys, observation_space
from evtrain.unity.specs import BehaviorSpec, split_behavior_name
from evtrain.unity.teams import TeamPlay, take

__all__ = ["UnityBehaviorView"]


class Shared(Protocol):
    """What a view needs of the environment it is part of
    (:class:`~evtrain.unity.behaviors.UnityBehaviors`)."""

    @property
    def specs(self) -> Mapping[str, BehaviorSpec]: ...
    @property
    def slots(self) -> Mapping[str, BehaviorSlots]: ...
    @property
    def latest(self) -> Mapping[str, StepRecord]: ...
    @property
    def restarts(self) -> int: ...
    def reset(self, seed: int | None = None) -> Mapping[str, StepRecord]: ...
    def close(self) -> None: ...


class UnityBehaviorView(VectorEnv[Any, Any, Any]):
    """One trainer behavior's slots in :class:`~evtrain.unity.behaviors.UnityBehaviors`: a
    vector environment (autoreset mode ``SAME_STEP``) whose ``step`` is that behavior's part of
    the shared step, taken by the run's loop through :attr:`exchange` (as
    :class:`~evtrain.multiagent.shared.BehaviorView`'s)."""

    def __init__(self, shared: Shared, behavior: str, *, self_play: bool = False) -> None:
        self.shared = shared
        self.behavior = behavior
        self.behavior_spec = shared.specs[behavior]
        self._slots = shared.slots[behavior]
        self.group_size = self._slots.group_size
        """Slots per copy (an ML-Agents group, or an instance's team)."""
        self.slot_teams = np.asarray(self._slots.slot_teams, dtype=np.int64)
        """The team of each slot (0 without teams)."""
        self.teams = sorted({split_behavior_name(n)[1] for n in self._slots.names})
        self.team_play = TeamPlay(self._slots) if self_play else None
        """Its matches, when it self-plays: its slots are then one team's."""
        self.num_envs = (
            self._slots.num_slots if self.team_play is None else self.team_play.num_slots
        )
        self.single_observation_space = observation_space(self.behavior_spec)
        self.single_action_space = action_space(self.behavior_spec.action_spec)
        self.observation_space = batch_space(self.single_observation_space, self.num_envs)
        self.action_space = batch_space(self.single_action_space, self.num_envs)
        self.metadata = {"autoreset_mode": AutoresetMode.SAME_STEP}
        self._keys = observation_keys(self.behavior_spec)
        self._batch: dict[str, npt.NDArray[np.float32]] = {
            key: np.zeros((self._slots.num_slots, *space.shape), dtype=np.float32)
            for key, space in self._parts().items()
        }
        if MASK_KEY in self._batch:
            self._batch[MASK_KEY][:] = 1.0
        self._restarts_taken = 0
        self.exchange = self._unconnected
        """Takes this behavior's actions for one shared step and returns its part once every
        behavior has acted: set by the loop that drives the behaviors."""

    def _parts(self) -> dict[str, spaces.Box]:
        space = self.single_observation_space
        if isinstance(space, spaces.Dict):
            return {key: part for key, part in space.spaces.items()}  # type: ignore[misc]
        assert isinstance(space, spaces.Box)
        return {"obs_0": space}

    @property
    def acting(self) -> npt.NDArray[np.bool_]:
        """The slots whose agent asked for a decision (acts at the next step)."""
        if self.team_play is not None:
            picked: npt.NDArray[np.bool_] = self._slots.acting[self.team_play.index]
            return picked
        acting: npt.NDArray[np.bool_] = self._slots.acting.copy()
        return acting

    def observations(self) -> Any:
        """The observation each slot shows now, as a batch."""
        every = self.every_observation()
        return every if self.team_play is None else take(every, self.team_play.index)

    def every_observation(self) -> Any:
        """The observation of every slot of every team, as a batch."""
        if self._keys is None:
            return self._batch["obs_0"].copy()
        return {key: value.copy() for key, value in self._batch.items()}

    # -- self-play: what evtrain.trainers.ghost.teams.TeamSlots asks ----------------------------

    @property
    def learning_team(self) -> int | None:
        """The team that learns from each match's next episode on (``None``: no self-play)."""
        return None if self.team_play is None else self.team_play.learning_team

    def set_learning_team(self, team: int) -> None:
        """Train team ``team`` from each match's next episode on.

        :raises ValueError: the behavior has no self-play, or no team ``team``.
        """
        self._teams().set_learning_team(team)

    @property
    def co_players(self) -> dict[str, CoPlayer]:
        """Who acts for the other team's agents, keyed ``"<behavior>?team=<N>"`` or
        ``"<behavior>"``."""
        return self._teams().co_players

    @co_players.setter
    def co_players(self, players: dict[str, CoPlayer]) -> None:
        self._teams().co_players = dict(players)

    @property
    def episode_listeners(self) -> list[Callable[[EpisodeResult], None]]:
        """Called once per match's episode end, with its result for the learning team."""
        return self._teams().listeners

    def _teams(self) -> TeamPlay:
        if self.team_play is None:
            raise ValueError(f"behavior {self.behavior!r} has no self_play: every agent learns")
        return self.team_play

    # -- the vector environment -------------------------------------------------------------------

    def store(self, at: npt.NDArray[np.intp], obs: list[Any], mask: list[Any] | None) -> None:
        """Slots ``at`` show observations ``obs`` (and ML-Agents' ``mask``)."""
        for j, part in enumerate(obs):
            self._batch[f"obs_{j}"][at] = part
        if mask is not None and MASK_KEY in self._batch:
            self._batch[MASK_KEY][at] = ~np.concatenate(mask, axis=1)

    def one(self, obs: list[Any], row: int) -> Any:
        """Row ``row`` of ``obs`` as one slot's observation (a final observation)."""
        if self._keys is None:
            return np.array(obs[0][row])
        found = {f"obs_{j}": np.array(part[row]) for j, part in enumerate(obs)}
        if MASK_KEY in self._batch:
            found[MASK_KEY] = np.ones(self._batch[MASK_KEY].shape[1], dtype=np.float32)
        return found

    def take_worker_restarts(self) -> int:
        """Instances started again since the last call (the trainer reports them as
        ``Environment/Worker Restarts``, summed over its summary period)."""
        taken, self._restarts_taken = (
            self.shared.restarts - self._restarts_taken,
            self.shared.restarts,
        )
        return taken

    def reset(
        self, *, seed: int | list[int] | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Any, dict[str, Any]]:
        return view_reset(self, seed)

    def step(
        self, actions: Any
    ) -> tuple[Any, npt.NDArray[Any], npt.NDArray[Any], npt.NDArray[Any], dict[str, Any]]:
        record = self.exchange(actions)
        batch = getattr(record, "batch", None)
        return batch, record.rewards, record.terminated, record.truncated, record.infos()

    def close_extras(self, **kwargs: Any) -> None:
        self.shared.close()

    def _unconnected(self, actions: Any) -> StepRecord:
        raise RuntimeError(
            f"behavior {self.behavior!r} acts in Unity builds shared by every behavior: its step "
            "is every behavior's, taken by the loop that drives them"
        )

    def __repr__(self) -> str:
        return (
            f"UnityBehaviorView({self.behavior!r}, {len(self._slots.copies)} copies x "
            f"{self.group_size} slots)"
        )
