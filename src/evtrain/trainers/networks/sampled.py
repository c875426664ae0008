"""A policy that samples its actions, as training does, for players that do not learn: the
opponents of ``self_play`` (:mod:`evtrain.trainers.ghost`).

The exported policy (:class:`~evtrain.trainers.networks.policies.DeterministicPolicy`) takes
the most likely action; an opponent that always did so would play one fixed game, which the
learning team would learn to beat and nothing more (ML-Agents' ghosts sample too).
"""

from __future__ import annotations

from typing import Any

import torch
from gymnasium import spaces

from evtrain.trainers.networks.policies import ActorCritic, DeterministicPolicy, clip_actions


class SampledPolicy(DeterministicPolicy):
    """Raw observations in, an action drawn from :class:`ActorCritic`'s policy out (``Box``
    actions clipped to their bounds, as on their way to the environment in training).

    :param generator: every draw; on the agent's device.
    """

    def __init__(
        self, agent: ActorCritic, action_space: spaces.Space[Any], generator: torch.Generator
    ) -> None:
        super().__init__(agent, action_space)
        self.generator = generator

    def forward(self, *obs: torch.Tensor) -> torch.Tensor:
        """Sampled actions for the observations as the environment gives them."""
        x = self.agent.normalizer(self.agent.flatten(*obs))
        action, _ = self.agent.act(x, self.generator)
        return clip_actions(action, self.low, self.high, self.hybrid) if self.clip else action
