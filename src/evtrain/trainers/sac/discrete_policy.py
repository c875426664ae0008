"""The export views of discrete SAC's policy (:mod:`evtrain.trainers.sac.discrete`): raw
observations in, each branch's most likely action out, never a masked one (an
``action_mask`` observation is the graph's input of that name)."""

from __future__ import annotations

import torch
from torch import nn

from evtrain.trainers.networks.memory import RecurrentMLP
from evtrain.trainers.networks.normalizer import ObservationNormalizer
from evtrain.trainers.observations import ObservationFlattener
from evtrain.trainers.sac.discrete import Branches, CategoricalActor


class DiscreteSACPolicy(nn.Module):
    """Export view: raw observations in, the most likely action out (``[B]`` int64 for
    ``Discrete``, ``[B, k]`` for ``MultiDiscrete``), as PPO's discrete policies export."""

    def __init__(
        self,
        normalizer: ObservationNormalizer,
        actor: CategoricalActor,
        flatten: ObservationFlattener | None = None,
    ) -> None:
        super().__init__()
        self.flatten = flatten or ObservationFlattener(())
        """Its inputs (the ``Box``, or the ``Dict``'s keys in order) to an observation row."""
        self.normalizer = normalizer
        self.actor = actor
        self.multi = actor.branches.multi

    def forward(self, *obs: torch.Tensor) -> torch.Tensor:
        action = self.actor.deterministic(self.normalizer(self.flatten(*obs)))
        return action if self.multi else action.squeeze(-1)


class RecurrentDiscreteSACPolicy(nn.Module):
    """Export view of a recurrent discrete SAC policy (``network_settings.memory``): raw
    observations and the memory in, the most likely action and the next memory out."""

    def __init__(
        self,
        normalizer: ObservationNormalizer,
        actor: RecurrentMLP,
        branches: Branches,
        flatten: ObservationFlattener,
    ) -> None:
        super().__init__()
        self.flatten = flatten
        """Its observation inputs (the ``Box``, or the ``Dict``'s keys in order) to a row."""
        self.normalizer = normalizer
        self.actor = actor
        self.branches = branches
        self.memory_size = actor.memory_size
        """Width of ``memory_in`` and ``memory_out`` (what marks a recurrent policy)."""

    def forward(self, *inputs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``inputs``: the observations (float32), then the memory ``[B, memory_size]``."""
        *obs, memory = inputs
        out, memory = self.actor.step(self.normalizer(self.flatten(*obs)), memory)
        action = self.branches.argmax(out)
        return (action if self.branches.multi else action.squeeze(-1)), memory
