"""The networks trainers are built from: layers and flat-parameter helpers (:mod:`.mlp`), the
observation normaliser (:mod:`.normalizer`), visual encoders (:mod:`.encoders`), the LSTM
memory (:mod:`.memory`), discrete action masks (:mod:`.masks`), the distributions of every
action space (:mod:`.action_heads`), and the actor-critics PPO and imitation use
(:mod:`.policies`, :mod:`.recurrent`).  Networks serve every algorithm and import
none.

The names of :mod:`.mlp` and :mod:`.normalizer` are re-exported here:
``evtrain.trainers.networks`` was one module before the trainers package had folders.
"""

from __future__ import annotations

from evtrain.trainers.networks.mlp import (
    ACTIVATIONS,
    MLP,
    clip_grad_norm_,
    flatten_parameters,
    hidden_layers,
    layer_init,
    zero_grad_,
)
from evtrain.trainers.networks.normalizer import NORMALIZED_OBS_CLIP, ObservationNormalizer

__all__ = [
    "ACTIVATIONS",
    "MLP",
    "NORMALIZED_OBS_CLIP",
    "ObservationNormalizer",
    "clip_grad_norm_",
    "flatten_parameters",
    "hidden_layers",
    "layer_init",
    "zero_grad_",
]
