"""One trainer behavior's agent slots in a set of Unity build instances.

A build names its agents by id, and they ask for decisions when they like: a trainer steps a
fixed vector of **slots**.  :class:`BehaviorSlots` keeps the agents of one trainer behavior (all
its teams, ``Soccer?team=0`` and ``Soccer?team=1`` for the trainer ``Soccer``) in slots laid out
as evtrain's group trainers read them: a run of ``group_size`` slots is one **copy**, and

- for a behavior whose agents are in ML-Agents groups (``group_id`` not 0, POCA's), a copy is
  one group, ``group_size`` the most agents any group had at the first step;
- otherwise a copy is one instance's agents of one team, ``group_size`` the most agents of a
  team any instance had at the first step.

Copies go instance by instance, then team by team (:attr:`BehaviorSlots.slot_teams` says each
slot's team), then group by group.  Each instance has as many copies of each team as the one
with the most had at the first step.  An agent keeps its slot for as long as it lives; a slot
whose agent ended its episode (and did not start another in the same exchange) is free for a
newcomer of the same group, and a copy whose agents all left for a new group.
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from collections.abc import Mapping, Sequence

import attrs
import numpy as np
import numpy.typing as npt

from evtrain.errors import UnityDataError
from evtrain.unity.specs import split_behavior_name
from evtrain.unity.steps import DecisionSteps, TerminalSteps

__all__ = ["BehaviorSlots", "Copy"]

Steps = tuple[DecisionSteps, TerminalSteps]


@attrs.define
class Copy:
    """A run of ``group_size`` slots: one group, or one instance's team."""

    instance: int
    name: str
    """The full behavior name (``"Soccer?team=1"``)."""
    group: int
    """The ML-Agents group it holds now (0: agents without a group)."""
    first: int
    """Its first slot."""
    agents: list[int | None]
    """The agent id of each of its slots (``None``: never used)."""


class BehaviorSlots:
    """The slots of trainer behavior ``behavior`` (see the module's docs).

    :param names: its full names (teams), in order.
    :param first: per instance, each full name's steps at the first exchange.
    :param spare: copies more per instance and team than the first exchange needs, for agents
        that appear later (a group made later, an agent enabled later).
    """

    def __init__(
        self,
        behavior: str,
        names: Sequence[str],
        first: Sequence[Mapping[str, Steps]],
        spare: int = 0,
    ) -> None:
        self.behavior = behavior
        self.names = list(names)
        counts = [{n: _groups(steps[n]) for n in self.names if n in steps} for steps in first]
        grouped = any(g != 0 for per in counts for c in per.values() for g in c)
        self.grouped = grouped
        """Its agents are in ML-Agents groups: each copy is one group."""
        sizes = [
            n for per in counts for c in per.values() for g, n in c.items() if g or not grouped
        ]
        self.group_size = max([*sizes, 1])
        per_name = {
            name: spare
            + max([_copies(per.get(name, Counter()), self.group_size) for per in counts] + [1])
            for name in self.names
        }
        self.copies: list[Copy] = []
        self.slot_teams: list[int] = []
        for k in range(len(first)):
            for name in self.names:
                for _ in range(per_name[name]):
                    start = len(self.copies) * self.group_size
                    self.copies.append(Copy(k, name, 0, start, [None] * self.group_size))
                    self.slot_teams += [split_behavior_name(name)[1]] * self.group_size
        self.num_slots = len(self.copies) * self.group_size
        self.index: dict[tuple[int, str, int], int] = {}
        """(instance, full name, agent id) → slot."""
        self.live = np.zeros(self.num_slots, dtype=np.bool_)
        """The slot's agent is in an episode."""
        self.pending = np.zeros(self.num_slots, dtype=np.bool_)
        """The slot's agent acted and has not been heard from since."""
        self.acting = np.zeros(self.num_slots, dtype=np.bool_)
        """The slot's agent asked for a decision in the last exchange."""
        self.rows: dict[tuple[int, str], npt.NDArray[np.intp]] = {}
        """(instance, full name) → the slot of each row of its last decision steps."""
        self._by_place: defaultdict[tuple[int, str], list[Copy]] = defaultdict(list)
        for copy in self.copies:
            self._by_place[(copy.instance, copy.name)].append(copy)

    def slots_of(
        self, k: int, name: str, ids: npt.NDArray[np.int32], groups: npt.NDArray[np.int32]
    ) -> npt.NDArray[np.intp]:
        """The slot of each agent ``ids`` (of groups ``groups``) of ``name`` in instance
        ``k``; a newcomer takes a free one.

        :raises UnityDataError: a newcomer finds no free slot.
        """
        out = np.empty(len(ids), dtype=np.intp)
        index = self.index
        for row, agent in enumerate(ids.tolist()):
            slot = index.get((k, name, agent))
            if slot is None:
                slot = self._assign(k, name, agent, int(groups[row]))
            out[row] = slot
        return out

    def copy_of(self, slot: int) -> Copy:
        return self.copies[slot // self.group_size]

    def forget(self) -> None:
        """Every agent left (the build was reset)."""
        self.index.clear()
        self.live[:] = False
        self.pending[:] = False
        self.acting[:] = False
        self.rows.clear()
        for copy in self.copies:
            copy.agents = [None] * self.group_size
            copy.group = 0

    def leave(self, k: int) -> npt.NDArray[np.intp]:
        """Every agent of instance ``k`` left (the instance was started again): their slots are
        free for its new agents.  Returns the slots whose agents were in an episode."""
        place = [copy for copy in self.copies if copy.instance == k]
        slots = [copy.first + j for copy in place for j in range(self.group_size)]
        at = np.asarray([s for s in slots if self.live[s]], dtype=np.intp)
        for key in [key for key in self.index if key[0] == k]:
            del self.index[key]
        for copy in place:
            copy.agents = [None] * self.group_size
            copy.group = 0
        return at

    def _assign(self, k: int, name: str, agent: int, group: int) -> int:
        place = self._by_place.get((k, name), [])
        for copy in place:  # a free slot of its group
            if copy.group == group or (not self.grouped and group == 0):
                for j, held in enumerate(copy.agents):
                    if held is None or not self.live[copy.first + j]:
                        return self._bind(copy, j, k, name, agent, group)
        for copy in place:  # a copy all of whose agents left
            if not self.live[copy.first : copy.first + self.group_size].any():
                return self._bind(copy, 0, k, name, agent, group)
        raise UnityDataError(
            f"behavior {name!r}: agent {agent}{f' of group {group}' if group else ''} appeared "
            f"in Unity instance {k}, where all {len(place)} x {self.group_size} slots of the "
            f"behavior are taken; evtrain counts a behavior's slots from the agents at the "
            f"first step ({'the most in a group' if self.grouped else 'the most in an instance'}"
            f": {self.group_size}): have every agent present and asking for a decision at the "
            "first step (enabled in the scene, its DecisionRequester at offset 0), or give "
            "the behaviors spare copies of slots (env_settings.spare_copies)"
        )

    def _bind(self, copy: Copy, j: int, k: int, name: str, agent: int, group: int) -> int:
        held = copy.agents[j]
        if held is not None:
            self.index.pop((k, name, held), None)
        copy.agents[j] = agent
        copy.group = group if self.grouped else 0
        slot = copy.first + j
        self.index[(k, name, agent)] = slot
        self.pending[slot] = False
        self.live[slot] = True  # taken: the next newcomer of this exchange looks further
        return slot


def _groups(steps: Steps) -> Counter[int]:
    """How many agents of each group (0: none) a behavior's first steps show."""
    seen: dict[int, int] = {}
    for part in steps:
        for agent, group in zip(part.agent_id.tolist(), part.group_id.tolist(), strict=True):
            seen[agent] = group
    return Counter(seen.values())


def _copies(groups: Counter[int], group_size: int) -> int:
    grouped = sum(1 for g in groups if g)
    return grouped + math.ceil(groups.get(0, 0) / group_size)
