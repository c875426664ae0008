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
import numpy.typing as npt

from evtrain.errors import ConfigError, UnityDataError
from evtrain.multiagent.copies import StepRecord
from evtrain.unity.connection import Steps, UnityConnection
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
        return self._observe([connection.step_end() for connection in self.connections])

    def close(self) -> None:
        """Close every instance's connection (once)."""
        if self._closed:
            return
        self._closed = True
        for connection in self.connections:
            connection.close()

    def _observe(self, states: Sequence[Steps]) -> dict[str, StepRecord]:
        records: dict[str, StepRecord] = {}
        for behavior, slots in self.slots.items():
            view = self._views[behavior]
            record = UnityStepRecord(slots.num_slots)
            live_before = slots.live.copy()
            ended = np.zeros(slots.num_slots, dtype=np.bool_)
            slots.acting[:] = False
            slots.rows.clear()
            for k, state in enumerate(states):
                for name in slots.names:
                    if name in state:
                        _record(slots, view, record, ended, k, name, state[name])
            _episodes(slots, record, ended, live_before)
            if view.team_play is not None:
                record = view.team_play.view_of(record, UnityStepRecord(view.num_envs))
            record.batch = view.observations()
            record.obs = _rows(record.batch, view.num_envs)
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


def _record(
    slots: BehaviorSlots,
    view: UnityBehaviorView,
    record: StepRecord,
    ended: npt.NDArray[np.bool_],
    k: int,
    name: str,
    steps: Any,
) -> None:
    """One full name's steps in instance ``k`` into its slots."""
    decisions, terminals = steps
    if len(terminals):
        at = slots.slots_of(k, name, terminals.agent_id, terminals.group_id)
        record.rewards[at] = terminals.reward
        record.truncated[at] = terminals.interrupted
        record.terminated[at] = ~terminals.interrupted
        record.active[at] = slots.pending[at]
        record.group_reward[at] = terminals.group_reward
        for row, slot in enumerate(at.tolist()):
            record.final_obs[slot] = view.one(terminals.obs, row)
        record.has_final[at] = True
        ended[at] = True
        slots.pending[at] = slots.live[at] = False
    if len(decisions):
        at = slots.slots_of(k, name, decisions.agent_id, decisions.group_id)
        going_on = ~ended[at]
        record.rewards[at[going_on]] = decisions.reward[going_on]
        record.group_reward[at[going_on]] = decisions.group_reward[going_on]
        record.active[at[going_on]] = slots.pending[at[going_on]]
        view.store(at, decisions.obs, decisions.action_mask)
        slots.live[at] = slots.acting[at] = True
        slots.pending[at] = False
        slots.rows[(k, name)] = at


def _episodes(
    slots: BehaviorSlots,
    record: StepRecord,
    ended: npt.NDArray[np.bool_],
    live_before: npt.NDArray[np.bool_],
) -> None:
    """Per copy: its group reward on every slot, and whether its episode is over."""
    g = slots.group_size
    shape = (len(slots.copies), g)
    heard = (record.active | ended).reshape(shape)
    group_reward = record.group_reward.reshape(shape)
    first_heard = heard.argmax(axis=1)
    per_copy = group_reward[np.arange(shape[0]), first_heard] * heard.any(axis=1)
    record.group_reward[:] = np.repeat(per_copy, g)
    was_in = live_before.reshape(shape)
    over = ended.reshape(shape).any(axis=1) & ~(was_in & ~ended.reshape(shape)).any(axis=1)
    record.episode_over[:] = np.repeat(over, g)


def _rows(batch: Any, n: int) -> list[Any]:
    if isinstance(batch, dict):
        return [{key: value[i] for key, value in batch.items()} for i in range(n)]
    return list(batch)


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
