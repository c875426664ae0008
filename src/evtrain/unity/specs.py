"""What a Unity behavior observes and does: its observation and action specs.

A build sends each behavior's action spec (``BrainParametersProto``) the first time one of its
agents asks for a decision, and its observations' shapes with that agent's observations; the
two make the behavior's :class:`BehaviorSpec`.  A behavior's full name may carry a team,
``"Soccer?team=1"`` (:func:`split_behavior_name`).
"""

from __future__ import annotations

from typing import Any

import attrs

__all__ = [
    "NONE",
    "TRANSLATIONAL_EQUIVARIANCE",
    "UNSPECIFIED",
    "VARIABLE_SIZE",
    "ActionSpec",
    "BehaviorSpec",
    "ObservationSpec",
    "behavior_spec_from_proto",
    "split_behavior_name",
]

# ML-Agents' DimensionProperty, one per dimension of an observation (flags).
UNSPECIFIED = 0
NONE = 1
"""The dimension has no special property: an image's channels."""
TRANSLATIONAL_EQUIVARIANCE = 2
"""A spatial dimension: an image's height and width."""
VARIABLE_SIZE = 4
"""The number of entities of a variable-length observation (a buffer sensor)."""

_CHANNELS_FIRST = (NONE, TRANSLATIONAL_EQUIVARIANCE, TRANSLATIONAL_EQUIVARIANCE)
"""An image laid out channels-first, (C, H, W): how package 3.0 and later send a camera."""


@attrs.frozen(kw_only=False)
class ObservationSpec:
    """One observation of a behavior's agents."""

    shape: tuple[int, ...]
    dimension_property: tuple[int, ...]
    """ML-Agents' DimensionProperty of each dimension (:data:`NONE`, ...)."""
    observation_type: int
    """0: a plain observation, 1: a goal signal."""
    name: str

    @property
    def is_visual(self) -> bool:
        """A rank-3 observation: an image (a camera, a render texture, a grid sensor)."""
        return len(self.shape) == 3

    @property
    def channels_first(self) -> bool:
        """An image laid out (C, H, W), as package 3.0 and later send it; else (H, W, C), as
        2.x does (dimension properties ``[2, 2, 1]``)."""
        return self.is_visual and self.dimension_property == _CHANNELS_FIRST

    @property
    def channels(self) -> int:
        """An image's channels."""
        return self.shape[0] if self.channels_first else self.shape[-1]


@attrs.frozen(kw_only=False)
class ActionSpec:
    """A behavior's actions: ``continuous_size`` floats and one choice per discrete branch;
    both at once is a hybrid action."""

    continuous_size: int
    discrete_branches: tuple[int, ...]

    @property
    def discrete_size(self) -> int:
        """The number of discrete branches."""
        return len(self.discrete_branches)


@attrs.frozen(kw_only=False)
class BehaviorSpec:
    """What a behavior's agents observe and do."""

    observation_specs: tuple[ObservationSpec, ...]
    action_spec: ActionSpec


def split_behavior_name(name: str) -> tuple[str, int]:
    """``"Soccer?team=1"`` → ``("Soccer", 1)``; a name without a team is team 0."""
    base, sep, query = name.partition("?")
    if not sep:
        return name, 0
    for part in query.split("&"):
        key, _, value = part.partition("=")
        if key == "team" and value.lstrip("-").isdigit():
            return base, int(value)
    return base, 0


def behavior_spec_from_proto(brain: Any, agent_info: Any) -> BehaviorSpec:
    """A behavior's spec from its ``BrainParametersProto`` and one of its agents'
    ``AgentInfoProto`` (the shapes of the observations come with the observations)."""
    observations = []
    for obs in agent_info.observations:
        shape = tuple(int(d) for d in obs.shape)
        properties = tuple(int(p) for p in obs.dimension_properties) or (UNSPECIFIED,) * len(shape)
        observations.append(
            ObservationSpec(shape, properties, int(obs.observation_type), str(obs.name))
        )
    spec = brain.action_spec
    if spec.num_continuous_actions == 0 and spec.num_discrete_actions == 0:
        # builds older than API 1.3 say it in the deprecated fields
        sizes = tuple(int(s) for s in brain.vector_action_size_deprecated)
        if brain.vector_action_space_type_deprecated == 1:
            action = ActionSpec(sizes[0] if sizes else 0, ())
        else:
            action = ActionSpec(0, sizes)
    else:
        action = ActionSpec(
            int(spec.num_continuous_actions), tuple(int(b) for b in spec.discrete_branch_sizes)
        )
    return BehaviorSpec(tuple(observations), action)
