"""A behavior's agents in one exchange: those asking for a decision and those whose episode ended.

A build sends, per behavior, one ``AgentInfoProto`` per agent that asks for a decision or
ended its episode (``done``) since the last exchange; :func:`steps_from_proto` splits them
into :class:`DecisionSteps` and :class:`TerminalSteps`, each an array per field with one row per
agent (numpy over the repeated fields, never a Python loop per value).  A terminal step with
``max_step_reached`` was interrupted (its episode was cut short, so its value bootstraps).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from typing import Any

import attrs
import numpy as np
import numpy.typing as npt

from evtrain.errors import UnityDataError
from evtrain.unity.pixels import decode_png_observation
from evtrain.unity.specs import ActionSpec, BehaviorSpec, ObservationSpec

__all__ = ["ActionTuple", "DecisionSteps", "TerminalSteps", "steps_from_proto"]

_NO_COMPRESSION = 0


@attrs.define
class DecisionSteps:
    """The agents of a behavior that ask for a decision, one row each."""

    obs: list[npt.NDArray[np.float32]]
    """One array per observation of the spec, axis 0 the agents."""
    reward: npt.NDArray[np.float32]
    """The reward since each agent's last decision."""
    agent_id: npt.NDArray[np.int32]
    action_mask: list[npt.NDArray[np.bool_]] | None
    """Per discrete branch, ``(n, size)``: **True = the action is masked off** (not allowed),
    as ML-Agents has it; ``None`` for a behavior without discrete actions."""
    group_id: npt.NDArray[np.int32]
    """The agent's group (0: none), for POCA."""
    group_reward: npt.NDArray[np.float32]

    def __len__(self) -> int:
        return len(self.agent_id)


@attrs.define
class TerminalSteps:
    """The agents of a behavior whose episode ended, one row each (their last observations)."""

    obs: list[npt.NDArray[np.float32]]
    reward: npt.NDArray[np.float32]
    interrupted: npt.NDArray[np.bool_]
    """The episode was cut short (``max_step_reached``), not ended by the task."""
    agent_id: npt.NDArray[np.int32]
    group_id: npt.NDArray[np.int32]
    group_reward: npt.NDArray[np.float32]

    def __len__(self) -> int:
        return len(self.agent_id)


def _float32(values: npt.ArrayLike) -> npt.NDArray[np.float32]:
    return np.asarray(values, dtype=np.float32)


def _int32(values: npt.ArrayLike) -> npt.NDArray[np.int32]:
    return np.asarray(values, dtype=np.int32)


@attrs.define
class ActionTuple:
    """Actions for ``n`` agents: ``continuous`` ``(n, c)`` float32, ``discrete`` ``(n, b)``
    int32 (one column per branch)."""

    continuous: npt.NDArray[np.float32] = attrs.field(converter=_float32)
    discrete: npt.NDArray[np.int32] = attrs.field(converter=_int32)

    def __len__(self) -> int:
        return max(len(self.continuous), len(self.discrete))

    @classmethod
    def zeros(cls, spec: ActionSpec, n: int) -> ActionTuple:
        """Zero actions of ``spec`` for ``n`` agents."""
        return cls(
            np.zeros((n, spec.continuous_size), dtype=np.float32),
            np.zeros((n, spec.discrete_size), dtype=np.int32),
        )


def steps_from_proto(
    infos: Sequence[Any], spec: BehaviorSpec, behavior: str
) -> tuple[DecisionSteps, TerminalSteps]:
    """One exchange's ``AgentInfoProto`` of ``behavior`` as its decision and terminal steps.

    :raises UnityDataError: an observation does not fit the spec, or a reward or observation
        is NaN or infinite.
    """
    deciding = [info for info in infos if not info.done]
    ended = [info for info in infos if info.done] if len(deciding) != len(infos) else []
    d_obs, d_reward, d_id, d_group, d_group_reward = _agents(deciding, spec, behavior)
    t_obs, t_reward, t_id, t_group, t_group_reward = _agents(ended, spec, behavior)
    interrupted = np.fromiter((i.max_step_reached for i in ended), np.bool_, len(ended))
    mask = _action_mask(deciding, spec) if spec.action_spec.discrete_size else None
    return (
        DecisionSteps(d_obs, d_reward, d_id, mask, d_group, d_group_reward),
        TerminalSteps(t_obs, t_reward, interrupted, t_id, t_group, t_group_reward),
    )


def empty_steps(spec: BehaviorSpec) -> tuple[DecisionSteps, TerminalSteps]:
    """No agent of the behavior in an exchange."""
    return steps_from_proto([], spec, "")


_Agents = tuple[
    list[npt.NDArray[np.float32]],
    npt.NDArray[np.float32],
    npt.NDArray[np.int32],
    npt.NDArray[np.int32],
    npt.NDArray[np.float32],
]


def _agents(infos: list[Any], spec: BehaviorSpec, behavior: str) -> _Agents:
    n = len(infos)
    obs = [_observation(infos, j, o, behavior) for j, o in enumerate(spec.observation_specs)]
    # one pass over the agents for their scalars (ids are exact in float64)
    scalars = np.array(
        [(i.reward, i.group_reward, i.id, i.group_id) for i in infos], dtype=np.float64
    ).reshape(n, 4)
    reward = scalars[:, 0].astype(np.float32)
    group_reward = scalars[:, 1].astype(np.float32)
    agent_id = scalars[:, 2].astype(np.int32)
    group_id = scalars[:, 3].astype(np.int32)
    if n and not (math.isfinite(float(reward.sum())) and math.isfinite(float(group_reward.sum()))):
        _non_finite(infos, agent_id, [reward, group_reward], "reward", behavior)
    return obs, reward, agent_id, group_id, group_reward


def _observation(
    infos: list[Any], j: int, spec: ObservationSpec, behavior: str
) -> npt.NDArray[np.float32]:
    """Observation ``j`` of every agent of ``infos``, stacked."""
    n = len(infos)
    size = math.prod(spec.shape)
    if n == 0:
        return np.zeros((0, *spec.shape), dtype=np.float32)
    try:
        protos = [info.observations[j] for info in infos]
    except IndexError:
        raise UnityDataError(_count_message(infos, spec, behavior)) from None
    if spec.is_visual and any(p.compression_type != _NO_COMPRESSION for p in protos):
        images = [_decoded(p, spec) for p in protos]
        batch = np.stack(images)
    else:
        flat = np.fromiter(
            itertools.chain.from_iterable(p.float_data.data for p in protos), np.float32
        )
        if flat.size != n * size:
            raise UnityDataError(_shape_message(infos, j, spec, behavior))
        batch = flat.reshape(n, *spec.shape)
    if not math.isfinite(float(batch.sum(dtype=np.float64))):
        ids = np.fromiter((i.id for i in infos), np.int32, n)
        _non_finite(
            infos, ids, [batch.reshape(n, -1)], f"observation {j} ({spec.name!r})", behavior
        )
    return batch


def _decoded(proto: Any, spec: ObservationSpec) -> npt.NDArray[np.float32]:
    if proto.compression_type == _NO_COMPRESSION:
        return np.asarray(proto.float_data.data, dtype=np.float32).reshape(spec.shape)
    return decode_png_observation(proto.compressed_data, proto.compressed_channel_mapping, spec)


def _action_mask(infos: list[Any], spec: BehaviorSpec) -> list[npt.NDArray[np.bool_]]:
    """Per branch, which actions each agent may not take (True: masked off)."""
    branches = spec.action_spec.discrete_branches
    total = sum(branches)
    n = len(infos)
    lengths = [len(i.action_mask) for i in infos]
    if n and all(length == total for length in lengths):
        flat = itertools.chain.from_iterable(i.action_mask for i in infos)
        masked = np.fromiter(flat, np.bool_, n * total).reshape(n, total)
    else:
        masked = np.zeros((n, total), dtype=np.bool_)
        for row, info in enumerate(infos):
            if lengths[row] == total:  # an agent without a mask allows everything
                masked[row] = info.action_mask
    ends = list(itertools.accumulate(branches, initial=0))
    return [masked[:, ends[b] : ends[b + 1]] for b in range(len(branches))]


def _non_finite(
    infos: list[Any],
    ids: npt.NDArray[np.int32],
    arrays: list[npt.NDArray[Any]],
    what: str,
    behavior: str,
) -> None:
    bad = np.zeros(len(infos), dtype=np.bool_)
    for array in arrays:
        bad |= ~np.isfinite(array.reshape(len(infos), -1)).all(axis=1)
    agent = int(ids[np.flatnonzero(bad)[0]]) if bad.any() else -1
    raise UnityDataError(
        f"behavior {behavior!r}: agent {agent} sent a non-finite {what} (NaN or infinity); "
        "expected finite numbers: check what the agent adds in the Unity project "
        "(CollectObservations, AddReward/SetReward)"
    )


def _count_message(infos: list[Any], spec: ObservationSpec, behavior: str) -> str:
    for info in infos:
        count = len(info.observations)
        return (
            f"behavior {behavior!r}: agent {info.id} sent {count} observations, fewer than its "
            f"spec's (observation {spec.name!r} missing); every agent of a behavior must have "
            "the same sensors"
        )
    return ""


def _shape_message(infos: list[Any], j: int, spec: ObservationSpec, behavior: str) -> str:
    for info in infos:
        got = tuple(info.observations[j].shape)
        data = len(info.observations[j].float_data.data)
        if got != spec.shape or data != math.prod(spec.shape):
            return (
                f"behavior {behavior!r}: agent {info.id} sent observation {j} ({spec.name!r}) "
                f"of shape {got} with {data} values, the behavior's spec says {spec.shape}; "
                "every agent of a behavior must have the same sensors"
            )
    return f"behavior {behavior!r}: observation {j} does not fit its spec {spec.shape}"
