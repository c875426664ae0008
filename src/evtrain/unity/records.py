"""What one exchange with a set of Unity build instances makes of a trainer behavior's slots:
each agent's reward, the end of its episode (terminal, or interrupted: its value bootstraps),
the observations its slot shows, its copy's group reward and whether its episode is over (the
``infos`` of :mod:`evtrain.multiagent.slots`; :mod:`evtrain.unity.behaviors` says what each
means for a Unity agent).
"""

from __future__ import annotations

from typing import Any, Protocol

import numpy as np
import numpy.typing as npt

from evtrain.multiagent.copies import StepRecord
from evtrain.unity.slots import BehaviorSlots

__all__ = ["SlotObservations", "batch_rows", "end_episodes", "interrupt", "record_steps"]


class SlotObservations(Protocol):
    """The observations a behavior's slots show (:class:`~evtrain.unity.behaviors.
    UnityBehaviorView`)."""

    def every_observation(self) -> Any:
        """Every slot's observation (both teams' of a self-playing behavior), as a batch."""

    def store(self, at: npt.NDArray[np.intp], obs: list[Any], mask: list[Any] | None) -> None: ...

    def one(self, obs: list[Any], row: int) -> Any: ...


def record_steps(
    slots: BehaviorSlots,
    view: SlotObservations,
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


def interrupt(
    slots: BehaviorSlots,
    view: SlotObservations,
    record: StepRecord,
    ended: npt.NDArray[np.bool_],
    at: npt.NDArray[np.intp],
) -> None:
    """The episodes of slots ``at`` end as interrupted (their instance was lost): no reward,
    their values bootstrap from the observation they showed last."""
    shown = batch_rows(view.every_observation(), slots.num_slots)
    record.truncated[at] = True
    record.active[at] = slots.pending[at]
    for slot in at.tolist():
        record.final_obs[slot] = shown[slot]
    record.has_final[at] = ended[at] = True
    slots.pending[at] = slots.live[at] = False


def end_episodes(
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


def batch_rows(batch: Any, n: int) -> list[Any]:
    """The ``n`` rows of ``batch`` (an array, or a dictionary of arrays), one per slot."""
    if isinstance(batch, dict):
        return [{key: value[i] for key, value in batch.items()} for i in range(n)]
    return list(batch)
