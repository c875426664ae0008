"""``network_settings``: the shape of a trainer's networks, with ML-Agents' names and defaults
(re-exported by :mod:`evtrain.trainers.settings`)."""

from __future__ import annotations

from typing import Literal

import attrs
from attrs import validators as v

from evtrain.trainers.limits import MAX_LAYERS, MAX_UNITS, at_most

Activation = Literal["tanh", "relu", "elu", "silu"]
"""Hidden-layer nonlinearity of the policy and value networks."""

VisEncodeType = Literal["simple", "nature_cnn", "resnet", "match3", "fully_connected"]
"""ML-Agents' image encoders (:mod:`evtrain.trainers.networks.encoders`)."""

_positive_int = [v.instance_of(int), v.gt(0)]
_units = at_most(MAX_UNITS, "units")


def _even_memory_size(instance: object, attribute: attrs.Attribute[int], value: int) -> None:
    if value % 2:
        # "<key>: ..." is how evtrain.config.problems puts the key into the message's path
        raise ValueError(
            f"memory_size: expected an even number (the LSTM's hidden and cell state, "
            f"memory_size / 2 each), got {value}; use {value + 1}"
        )


@attrs.define(kw_only=True)
class MemorySettings:
    """ML-Agents' ``network_settings.memory``: a recurrent (LSTM) policy and critic."""

    sequence_length: int = attrs.field(default=64, validator=_positive_int)
    """Length of the experience sequences the networks are trained on; the memory is carried
    within a sequence, and taken as recorded at its first step."""
    memory_size: int = attrs.field(
        default=128, validator=[*_positive_int, _units, _even_memory_size]
    )
    """Width of the memory each network carries from step to step: the LSTM's hidden and cell
    state side by side, ``memory_size / 2`` units each (ML-Agents' layout)."""


ABSENT_WHEN_NONE = {"absent_when_none": True}
"""Metadata of a field that is left out of unstructured settings while it is ``None``."""


@attrs.define(kw_only=True)
class NetworkSettings:
    """Shape of the policy and value networks."""

    hidden_units: int = attrs.field(default=128, validator=[*_positive_int, _units])
    num_layers: int = attrs.field(
        default=2, validator=[*_positive_int, at_most(MAX_LAYERS, "layers")]
    )
    normalize: bool = attrs.field(default=False, validator=v.instance_of(bool))
    """Normalise observations with running mean and variance (saved with the trainer)."""
    activation: Activation = attrs.field(
        default="tanh", validator=v.in_(("tanh", "relu", "elu", "silu"))
    )
    goal_conditioning_type: Literal["hyper", "none"] = attrs.field(
        default="hyper", validator=v.in_(("hyper", "none"))
    )
    """ML-Agents: how goal observations condition the network (a hypernetwork, or plain
    input).  Accepted, and without effect: Gymnasium environments have no goal signals."""
    vis_encode_type: VisEncodeType = attrs.field(
        default="simple",
        validator=v.in_(("simple", "nature_cnn", "resnet", "match3", "fully_connected")),
    )
    """ML-Agents: the encoder of image observations (``simple``, ``nature_cnn``, ``resnet``,
    ``match3``, ``fully_connected``; see :mod:`evtrain.trainers.observations`).  Without
    effect when the observations are vectors only."""
    deterministic: bool = attrs.field(default=False, validator=v.instance_of(bool))
    """ML-Agents: take the most likely action instead of sampling.  evtrain's exported ONNX
    policy is deterministic anyway; training and ``--inference`` sample, whatever this
    says."""
    memory: MemorySettings | None = attrs.field(default=None, metadata=ABSENT_WHEN_NONE)
    """An LSTM after the hidden layers of the policy and of the critic (see
    :mod:`evtrain.trainers.networks.memory`); ``None``: feed-forward networks."""
