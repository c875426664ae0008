"""A self-playing behavior's two teams in Unity build instances: its trainer steps one team's
agents, and the other team's act with the ghost's opponent (what ML-Agents' ghost trainer does
with ``Soccer?team=0`` and ``Soccer?team=1``).

:class:`TeamPlay` pairs the copies of :class:`~evtrain.unity.slots.BehaviorSlots` into
**matches**: copy ``j`` of each team in one instance (a SoccerTwos field's two groups, a duel's
two agents).  The view of the behavior has one copy of slots per match, showing the match's
learning copy.  When that copy's episode ends, the listeners hear its result (an
:class:`~evtrain.multiagent.copies.EpisodeResult`: the learning agents' final rewards plus the
group reward) and the match takes the learning team :meth:`TeamPlay.set_learning_team` asked
for, from then on: a team changes between episodes, never in one (from that step the view's
slots show the new learning copy's observations).

The other team's agents act with ``co_players["<behavior>?team=<N>"]``, else
``co_players["<behavior>"]`` (the ghost's opponent), called once per step on their observations
stacked; until one is set they take zero actions.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

import numpy as np
import numpy.typing as npt

from evtrain.errors import UnityDataError
from evtrain.multiagent.copies import EpisodeResult, StepRecord
from evtrain.multiagent.coplayers import CoPlayer, co_player_keys
from evtrain.unity.slots import BehaviorSlots
from evtrain.unity.specs import split_behavior_name

__all__ = ["TeamPlay", "take"]

R = TypeVar("R", bound=StepRecord)


class TeamPlay:
    """The matches of a self-playing behavior's slots (see the module's docs).

    :param slots: every team's slots.
    :raises UnityDataError: the teams do not have as many copies in each instance.
    """

    def __init__(self, slots: BehaviorSlots) -> None:
        self.slots = slots
        self.behavior = slots.behavior
        self.teams = sorted({split_behavior_name(n)[1] for n in slots.names})
        self.learning_team = self.teams[0]
        """Requested for each match's next episode."""
        self.co_players: dict[str, CoPlayer] = {}
        self.listeners: list[Callable[[EpisodeResult], None]] = []
        self.matches = _matches(slots, self.teams)
        """Per match, the copy of each team."""
        self.playing = [self.learning_team] * len(self.matches)
        """The learning team of each match now."""
        self.num_slots = len(self.matches) * slots.group_size
        self.index = self._index()
        """The full slot each of the view's slots shows."""

    def set_learning_team(self, team: int) -> None:
        """Train team ``team`` from each match's next episode on.

        :raises ValueError: the behavior has no team ``team``.
        """
        if team not in self.teams:
            raise ValueError(f"behavior {self.behavior!r} has teams {self.teams}, not {team}")
        self.learning_team = team

    def actions(self, chosen: Any, batch: Any) -> Any:
        """Every slot's actions: ``chosen`` (one row per view slot) for the learning slots, the
        co-players' on ``batch`` (every slot's observations) for the others."""
        if isinstance(chosen, np.ndarray) and chosen.dtype == object and chosen.ndim == 0:
            chosen = chosen.item()
        if isinstance(chosen, Mapping):
            parts = {key: np.asarray(value) for key, value in chosen.items()}
            full: Any = {key: self._spread(value) for key, value in parts.items()}
        else:
            full = self._spread(np.asarray(chosen))
        learning = np.zeros(self.slots.num_slots, dtype=np.bool_)
        learning[self.index] = True
        teams = np.asarray(self.slots.slot_teams)
        for team in self.teams:
            rows = np.flatnonzero(~learning & (teams == team) & self.slots.acting)
            player = self._co_player(team)
            if player is None or not len(rows):
                continue
            played = player(take(batch, rows))
            if isinstance(full, dict):
                for key, value in full.items():
                    value[rows] = np.asarray(played[key]).reshape(value[rows].shape)
            else:
                full[rows] = np.asarray(played).reshape(full[rows].shape)
        return full

    def view_of(self, record: StepRecord, part: R) -> R:
        """``part`` (of :attr:`num_slots`) filled with the learning slots' part of a full step
        ``record``; matches whose learning copy ended its episode are reported and take the
        requested learning team (:attr:`index` then shows the new learning copies)."""
        at = self.index
        for name in ("rewards", "terminated", "truncated", "active", "group_reward"):
            setattr(part, name, getattr(record, name)[at])
        part.episode_over = record.episode_over[at]
        part.final_obs = record.final_obs[at]
        part.has_final = record.has_final[at]
        g = self.slots.group_size
        for m in range(len(self.matches)):
            over = part.episode_over[m * g : (m + 1) * g]
            if not over.any():
                continue
            heard = part.has_final[m * g : (m + 1) * g]
            reward = float(part.rewards[m * g : (m + 1) * g][heard].sum())
            result = EpisodeResult(
                team=self.playing[m], reward=reward + float(part.group_reward[m * g]), copy=m
            )
            for listener in self.listeners:
                listener(result)
            self.playing[m] = self.learning_team
        self.index = self._index()
        return part

    def _co_player(self, team: int) -> CoPlayer | None:
        for key in co_player_keys(self.behavior, team):
            found = self.co_players.get(key)
            if found is not None:
                return found
        return None

    def _spread(self, chosen: npt.NDArray[Any]) -> npt.NDArray[Any]:
        full = np.zeros((self.slots.num_slots, *chosen.shape[1:]), dtype=chosen.dtype)
        full[self.index] = chosen
        return full

    def _index(self) -> npt.NDArray[np.intp]:
        g = self.slots.group_size
        firsts = [self.slots.copies[match[team]].first for match, team in zip(
            self.matches, self.playing, strict=True)]  # fmt: skip
        if not firsts:
            return np.zeros(0, dtype=np.intp)
        return (np.asarray(firsts, dtype=np.intp)[:, None] + np.arange(g)).reshape(-1)


def _matches(slots: BehaviorSlots, teams: Sequence[int]) -> list[dict[int, int]]:
    """Copy ``j`` of each team in each instance, as one match."""
    places: dict[tuple[int, int], list[int]] = {}
    for c, copy in enumerate(slots.copies):
        places.setdefault((copy.instance, split_behavior_name(copy.name)[1]), []).append(c)
    matches: list[dict[int, int]] = []
    for k in sorted({copy.instance for copy in slots.copies}):
        counts = {team: len(places.get((k, team), [])) for team in teams}
        if len(set(counts.values())) != 1:
            listed = ", ".join(f"team {t}: {n}" for t, n in counts.items())
            raise UnityDataError(
                f"behavior {slots.behavior!r} self-plays, but its teams have different numbers "
                f"of {'groups' if slots.grouped else 'agents'} in Unity instance {k} ({listed}); "
                "self-play plays each team's group against one of the other's: give both teams "
                "as many, or remove self_play"
            )
        for j in range(counts[teams[0]]):
            matches.append({team: places[(k, team)][j] for team in teams})
    return matches


def take(batch: Any, rows: npt.NDArray[np.intp]) -> Any:
    """Rows ``rows`` of a batch of observations (an array, or a dict of arrays)."""
    if isinstance(batch, dict):
        return {key: value[rows] for key, value in batch.items()}
    return batch[rows]
