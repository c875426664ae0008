"""A Unity behavior's specs as the Gymnasium spaces evtrain's trainers read, and back.

Observations: one observation is a ``Box``; several, or any behavior with discrete actions, a
``Dict`` ``{"obs_0": Box, "obs_1": Box, ..., "action_mask": Box}`` whose ``action_mask`` (with
discrete branches only) holds ``sum(branches)`` 0/1 entries, **1 = allowed** (PettingZoo's
sense, the trainers'; the opposite of ML-Agents' mask).  Images are ``Box(0, 1)`` laid out as the
build sends them (HWC or CHW), the rest ``Box(-inf, inf)``, all float32.

Actions: continuous only ``Box(-1, 1, (c,))``; one discrete branch ``Discrete(n)``; several
``MultiDiscrete(branches)``; both ``Dict({"continuous": Box(-1, 1, (c,)), "discrete":
MultiDiscrete(branches)})``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import numpy.typing as npt
from gymnasium import spaces

from evtrain.unity.specs import ActionSpec, BehaviorSpec
from evtrain.unity.steps import ActionTuple

__all__ = ["MASK_KEY", "action_space", "action_tuple", "observation_keys", "observation_space"]

MASK_KEY = "action_mask"


def observation_keys(spec: BehaviorSpec) -> list[str] | None:
    """The ``Dict`` keys of the observations, in order (``None``: a single ``Box``)."""
    many = len(spec.observation_specs) > 1 or spec.action_spec.discrete_size > 0
    return [f"obs_{j}" for j in range(len(spec.observation_specs))] if many else None


def observation_space(spec: BehaviorSpec) -> spaces.Space[Any]:
    """The observation space of ``spec`` (see the module's docs)."""
    boxes = []
    for obs in spec.observation_specs:
        low, high = (0.0, 1.0) if obs.is_visual else (-np.inf, np.inf)
        boxes.append(spaces.Box(low, high, obs.shape, np.float32))
    keys = observation_keys(spec)
    if keys is None:
        return boxes[0]
    parts: dict[str, spaces.Space[Any]] = dict(zip(keys, boxes, strict=True))
    if spec.action_spec.discrete_size:
        size = sum(spec.action_spec.discrete_branches)
        parts[MASK_KEY] = spaces.Box(0.0, 1.0, (size,), np.float32)
    return spaces.Dict(parts)


def action_space(spec: ActionSpec) -> spaces.Space[Any]:
    """The action space of ``spec`` (see the module's docs).

    :raises ValueError: the behavior has no actions at all.
    """
    continuous = spaces.Box(-1.0, 1.0, (spec.continuous_size,), np.float32)
    branches = spec.discrete_branches
    if spec.continuous_size and branches:
        return spaces.Dict(
            {"continuous": continuous, "discrete": spaces.MultiDiscrete(np.array(branches))}
        )
    if spec.continuous_size:
        return continuous
    if len(branches) == 1:
        return spaces.Discrete(branches[0])
    if branches:
        return spaces.MultiDiscrete(np.array(branches))
    raise ValueError("a Unity behavior without continuous or discrete actions has no action space")


def action_tuple(spec: ActionSpec, actions: Any, rows: npt.NDArray[np.intp]) -> ActionTuple:
    """The ``rows`` of a batch of ``actions`` in the behavior's action space, as the build
    takes them (continuous actions clipped to [-1, 1], as ML-Agents' trainers clip them)."""
    if isinstance(actions, np.ndarray) and actions.dtype == object and actions.ndim == 0:
        actions = actions.item()
    n = len(rows)
    continuous = np.zeros((n, spec.continuous_size), dtype=np.float32)
    discrete = np.zeros((n, spec.discrete_size), dtype=np.int32)
    if isinstance(actions, Mapping):
        if spec.continuous_size:
            continuous = np.asarray(actions["continuous"], dtype=np.float32)[rows]
        if spec.discrete_size:
            discrete = np.asarray(actions["discrete"]).reshape(-1, spec.discrete_size)[rows]
    elif spec.continuous_size:
        continuous = np.asarray(actions, dtype=np.float32).reshape(-1, spec.continuous_size)[rows]
    else:
        discrete = np.asarray(actions).reshape(-1, spec.discrete_size)[rows]
    return ActionTuple(
        np.clip(continuous, -1.0, 1.0).astype(np.float32, copy=False),
        np.ascontiguousarray(discrete, dtype=np.int32),
    )
