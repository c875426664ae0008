"""The networks trainers are built from: layers, the observation normaliser and flat-parameter
helpers (:mod:`.mlp`), visual encoders (:mod:`.encoders`), the LSTM memory (:mod:`.memory`),
and the actor-critics PPO and imitation use (:mod:`.policies`, :mod:`.recurrent`).  Networks
serve every algorithm and import none.

The names of :mod:`.mlp` are re-exported here: ``evtrain.trainers.networks`` was that module
before the trainers package had folders.
"""

from __future__ import annotations

from evtrain.trainers.networks.mlp import (
    ACTIVATIONS,
    MLP,
    NORMALIZED_OBS_CLIP,
    ObservationNormalizer,
    clip_grad_norm_,
    flatten_parameters,
    hidden_layers,
    layer_init,
    zero_grad_,
)

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
