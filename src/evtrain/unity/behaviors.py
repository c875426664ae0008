"""Every behavior of a set of Unity build instances, as the shared environment a run drives.

:class:`UnityBehaviors` has the interface of :class:`~evtrain.multiagent.shared.
SharedEnvironment`: each trainer behavior's agents are slots of a vector environment
(:meth:`UnityBehaviors.view`, laid out by :class:`~evtrain.unity.slots.BehaviorSlots`), and one
:meth:`UnityBehaviors.step` sends every behavior's actions to every instance at once
(``step_begin`` on each, then ``step_end`` on each) and gives each behavior its part.

In each step, per slot (the ``infos`` keys of :mod:`evtrain.multiagent.slots`):

- ``active``: the slot's agent acted in an earlier step and is heard from in this one (a
  decision or the end of its episode): that step is its transition.  A newcomer's first step,
  and an agent that did not ask for a decision, are inactive;
- an agent whose episode ended has ``terminated`` set, or ``truncated`` when the build
  interrupted it (``max_step_reached``: its value bootstraps), and its last observation in
  ``final_obs``; when it starts its next episode in the same exchange its slot shows the new
  episode's first observation;
- an instance that hung up or stopped answering, and was started again
  (:meth:`UnityBehaviors.replace`), ends its agents' episodes as ``truncated`` (no reward, the
  observation they showed last as ``final_obs``), its new agents starting new episodes in the
  same step; the other instances go on;
- ``group_reward``: the ML-Agents group's reward (equal over a copy's slots);
- ``episode_over``: every agent of the slot's copy that was in an episode ended it.

Teams: the trainer of ``Soccer`` gets the agents of ``Soccer?team=0`` and ``Soccer?team=1`` in
one view, team by team (:attr:`UnityBehaviorView.slot_teams` gives each slot's team); with
``self_play`` its view holds its learning team's agents only, the other team acting with the
ghost's opponent (:mod:`evtrain.unity.teams`).

Actions go to the agents that asked for a decision only.  An agent whose decision comes on a
later exchange than the others' keeps the action it was given (as in ML-Agents), and its slot
is inactive meanwhile.  The step in which it is heard from again is active: the trainer records
it with the observation the agent acted on, but with the action the trainer chose for that step
(the build carried out the earlier one, the same policy's draw on the same observation).  Builds
whose agents decide on the same exchanges (ML-Agents' samples: every agent's DecisionRequester
with the same period) never meet this.
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Mapping, Sequence
from typing import Any

import numpy as np

from evtrain.errors import (
    ConfigError,
    UnityCommunicationError,
    UnityDataError,
    UnityError,
    UnityTimeoutError,
)
from evtrain.multiagent.copies import StepRecord
from evtrain.unity.connection import Steps, UnityConnection
from evtrain.unity.records import batch_rows, end_episodes, interrupt, record_steps
from evtrain.unity.slots import BehaviorSlots
from evtrain.unity.spaces import action_tuple
from evtrain.unity.specs import BehaviorSpec, split_behavior_name
from evtrain.unity.view import UnityBehaviorView

__all__ = ["UnityBehaviorView", "UnityBehaviors", "UnityStepRecord"]

_log = logging.getLogger(__name__)


class UnityStepRecord(StepRecord):
    """A :class:`~evtrain.multiagent.copies.StepRecord` that also holds the slots'
    observations as one batch (:attr:`batch`)."""

    batch: Any = None


class UnityBehaviors:
    """Build instances ``connections`` (each past its handshake), every behavior of them acting
    in every step (see the module's docs).  Resets every instance once, to learn the behaviors'
    specs and their agents.

    :param behaviors: the trainer behaviors (names without ``?team=N``); ``None``: every
        behavior of the build.
    :param spare_copies: per behavior, copies of slots more per instance and team than the
        agents of the first step fill, for agents that appear later (see
        :class:`~evtrain.unity.slots.BehaviorSlots`).
    :param self_play: the behaviors with ``self_play``: their views hold one team's agents.
    :raises ConfigError: a behavior the build does not have.
    :raises UnityDataError: one behavior's teams or instances differ in their specs, or a
        self-playing behavior's teams in their numbers of agents.
    """

    def __init__(
        self,
        connections: Sequence[UnityConnection],
        behaviors: Sequence[str] | None = None,
        *,
        spare_copies: Mapping[str, int] | None = None,
        self_play: Collection[str] = (),
    ) -> None:
        if not connections:
            raise ValueError("UnityBehaviors needs at least one connected build instance")
        self.connections = list(connections)
        first = [connection.reset() for connection in self.connections]
        found = _full_names(self.connections)
        wanted = list(found) if behaviors is None else list(behaviors)
        missing = [b for b in wanted if b not in found]
        if missing:
            have = ", ".join(found) or "none"
            raise ConfigError(
                [
                    f"behaviors.{b}: the Unity build has no behavior {b!r} (it has: {have})"
                    for b in missing
                ]
            )
        self.specs = {b: _one_spec(self.connections, b, found[b]) for b in wanted}
        """Each trainer behavior's spec (every team's and instance's is the same)."""
        spare = spare_copies or {}
        self.slots = {b: BehaviorSlots(b, found[b], first, spare.get(b, 0)) for b in wanted}
        self._views = {b: UnityBehaviorView(self, b, self_play=b in self_play) for b in wanted}
        self._unknown: set[str] = set()
        self.latest: dict[str, StepRecord] = self._observe(first)
        self.restarts = 0
        """Instances started again during the run (:meth:`replace`), so far."""
        self._fresh = True
        self._closed = False

    def view(self, behavior: str) -> UnityBehaviorView:
        """Behavior ``behavior``'s slots, as a vector environment."""
        return self._views[behavior]

    def reset(self, seed: int | None = None) -> dict[str, StepRecord]:
        """New episodes in every instance (the first call gives the reset made at the start;
        the build's seed is the one of its handshake)."""
        if self._fresh:
            self._fresh = False
            return self.latest
        states = [connection.reset() for connection in self.connections]
        for slots in self.slots.values():
            slots.forget()
        return self._observe(states)

    def step(self, actions: Mapping[str, Any]) -> dict[str, StepRecord]:
        """One exchange with every instance: each behavior's ``actions`` (one row per slot of
        its view) for its agents that asked for a decision."""
        self._fresh = False
        for behavior, slots in self.slots.items():
            chosen = actions[behavior]
            teams = self._views[behavior].team_play
            if teams is not None:
                chosen = teams.actions(chosen, self._views[behavior].every_observation())
            spec = self.specs[behavior].action_spec
            for (k, name), rows in slots.rows.items():
                if len(rows):
                    self.connections[k].set_actions(name, action_tuple(spec, chosen, rows))
                    slots.pending[rows] = True
        for connection in self.connections:
            connection.step_begin()
        states: list[Steps] = []
        lost: list[int] = []
        for k, connection in enumerate(self.connections):
            try:
                states.append(connection.step_end())
            except (UnityCommunicationError, UnityTimeoutError) as error:
                states.append(self.replace(k, error))
                lost.append(k)
        self.restarts += len(lost)
        return self._observe(states, lost)

    def replace(self, k: int, error: UnityError) -> Steps:
        """Instance ``k`` hung up or stopped answering (``error``) during a step: a subclass
        that can start it again does so, and returns its first steps after a reset (its
        agents start new episodes; those it had end as interrupted).  Here: ``error``."""
        raise error

    def close(self) -> None:
        """Close every instance's connection (once)."""
        if self._closed:
            return
        self._closed = True
        for connection in self.connections:
            connection.close()

    def _observe(self, states: Sequence[Steps], lost: Sequence[int] = ()) -> dict[str, StepRecord]:
        records: dict[str, StepRecord] = {}
        for behavior, slots in self.slots.items():
            view = self._views[behavior]
            record = UnityStepRecord(slots.num_slots)
            live_before = slots.live.copy()
            ended = np.zeros(slots.num_slots, dtype=np.bool_)
            slots.acting[:] = False
            slots.rows.clear()
            for k in lost:
                interrupt(slots, view, record, ended, slots.leave(k))
            for k, state in enumerate(states):
                for name in slots.names:
                    if name in state:
                        record_steps(slots, view, record, ended, k, name, state[name])
            end_episodes(slots, record, ended, live_before)
            if view.team_play is not None:
                record = view.team_play.view_of(record, UnityStepRecord(view.num_envs))
            record.batch = view.observations()
            record.obs = batch_rows(record.batch, view.num_envs)
            records[behavior] = record
        for state in states:
            for name in state:
                base = split_behavior_name(name)[0]
                if base not in self.slots and name not in self._unknown:
                    self._unknown.add(name)
                    _log.warning(
                        "Unity behavior %r has no trainer in this run: it gets zero actions", name
                    )
        self.latest = records
        return records


def _full_names(connections: Sequence[UnityConnection]) -> dict[str, list[str]]:
    """Each trainer behavior's full names (teams), in team order."""
    names: dict[str, set[str]] = {}
    for connection in connections:
        for name in connection.behavior_specs:
            names.setdefault(split_behavior_name(name)[0], set()).add(name)
    return {
        base: sorted(found, key=lambda n: split_behavior_name(n)[1])
        for base, found in names.items()
    }


def _one_spec(
    connections: Sequence[UnityConnection], behavior: str, names: list[str]
) -> BehaviorSpec:
    specs = {
        (k, name): connection.behavior_specs[name]
        for k, connection in enumerate(connections)
        for name in names
        if name in connection.behavior_specs
    }
    first_key, first = next(iter(specs.items()))
    for key, spec in specs.items():
        if spec != first:
            raise UnityDataError(
                f"behavior {behavior!r}: {key[1]!r} in instance {key[0]} has spec {spec}, "
                f"{first_key[1]!r} in instance {first_key[0]} has {first}; one trainer's agents "
                "must share their observations and actions: give them different behavior names"
            )
    return first
