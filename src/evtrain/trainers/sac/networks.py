"""SAC's networks and optimizers, built in a fixed order from one generator: the observation
normaliser, the actor (a squashed Gaussian for ``Box`` actions, a categorical one per branch
for ``Discrete``/``MultiDiscrete``, an LSTM policy with ``network_settings.memory``), the twin
critics and their Polyak-averaged targets, the entropy coefficient ``log alpha`` and its
target, and one Adam per flat parameter tensor.
"""

from __future__ import annotations

import copy
import math
from typing import Any

import numpy as np
import numpy.typing as npt
import torch
from gymnasium import spaces
from torch import nn

from evtrain.trainers.networks.memory import RecurrentMLP
from evtrain.trainers.networks.mlp import flatten_parameters
from evtrain.trainers.networks.normalizer import ObservationNormalizer
from evtrain.trainers.observations import ObservationLayout
from evtrain.trainers.optim import FlatAdam, make_adam
from evtrain.trainers.sac.actor import SquashedGaussianActor
from evtrain.trainers.sac.discrete import Branches, CategoricalActor
from evtrain.trainers.sac.memory import RecurrentTwinQ
from evtrain.trainers.sac.twin_q import TwinQ
from evtrain.trainers.settings import NetworkSettings, SACSettings


class SACNetworks:
    """What SAC trains, and how (see the module's docstring).

    :param layout: where each part of an observation sits in a row.
    :param action_space: a bounded ``Box``, a ``Discrete`` or a ``MultiDiscrete``.
    :param generator: draws the initial weights (networks are built on the CPU, then moved).
    """

    actor: SquashedGaussianActor | CategoricalActor | RecurrentMLP
    qf: TwinQ | RecurrentTwinQ
    qf_target: TwinQ | RecurrentTwinQ

    def __init__(
        self,
        hp: SACSettings,
        network: NetworkSettings,
        layout: ObservationLayout,
        action_space: spaces.Space[Any],
        generator: torch.Generator,
        device: torch.device,
    ) -> None:
        self.branches: Branches | None = None
        """The discrete action branches; ``None`` for ``Box`` actions."""
        self.low: npt.NDArray[np.float32] | None = None
        """A ``Box``'s bounds, flattened (the actor acts in ``[-1, 1]``)."""
        self.high: npt.NDArray[np.float32] | None = None
        if isinstance(action_space, spaces.Box):
            self.low = action_space.low.reshape(-1).astype(np.float32)
            self.high = action_space.high.reshape(-1).astype(np.float32)
            self.action_dim = int(np.prod(action_space.shape))
            """Columns of a stored action: a ``Box``'s flattened size, or one per branch."""
        else:  # stored: an index per branch; the critics output the value of every action
            self.branches = Branches(action_space)
            self.action_dim = len(self.branches)
        self.normalizer: ObservationNormalizer = layout.normalizer(network.normalize).to(device)
        self._build_networks(network, layout, generator)
        self.actor.to(device)
        self.qf.to(device)
        self.qf_target = copy.deepcopy(self.qf).requires_grad_(False)
        self.actor_params = flatten_parameters(self.actor)
        self.qf_params = flatten_parameters(self.qf)
        self.qf_target_params = flatten_parameters(self.qf_target)
        """One tensor per network (see flatten_parameters): one kernel per optimizer step, and
        the target update is a single lerp."""
        self._build_optimizers(hp, device)

    def _build_networks(
        self, network: NetworkSettings, layout: ObservationLayout, generator: torch.Generator
    ) -> None:
        """The actor and the twin critics.  Image encoders: the actor's and each critic's own,
        as ML-Agents' networks have (none for vector observations)."""
        obs_dim = layout.features(network)  # what the hidden layers get
        if self.branches is None:
            policy_out, critic_in, num_actions = 2 * self.action_dim, self.action_dim, 0
        else:
            policy_out, critic_in, num_actions = self.branches.total, 0, self.branches.total
        memory = network.memory
        if memory is None:
            encoder = layout.encoder(network, generator)
            if self.branches is None:
                self.actor = SquashedGaussianActor(
                    obs_dim, self.action_dim, network, generator, encoder
                )
            else:
                self.actor = CategoricalActor(
                    obs_dim, self.branches, network, generator, encoder, layout.mask
                )
            self.qf = TwinQ(obs_dim, critic_in, network, generator, layout, num_actions=num_actions)
        else:  # an LSTM in the policy and in each critic (see evtrain.trainers.sac.memory)
            self.actor = RecurrentMLP(
                obs_dim, policy_out, network, memory, out_gain=0.01, generator=generator
            )
            self.actor.encoder = layout.encoder(network, generator)
            self.qf = RecurrentTwinQ(
                obs_dim, critic_in, network, memory, generator, layout, num_actions=num_actions
            )

    def _build_optimizers(self, hp: SACSettings, device: torch.device) -> None:
        """The entropy coefficient (one per branch for discrete actions, ML-Agents') and its
        target, and the three optimizers."""
        self.log_alpha = nn.Parameter(torch.tensor(math.log(hp.init_entcoef), device=device))
        self.target_entropy: float | torch.Tensor = (
            -float(self.action_dim) if hp.target_entropy is None else hp.target_entropy
        )
        if self.branches is not None:
            self.log_alpha = nn.Parameter(self.log_alpha.detach().expand(self.action_dim).clone())
            self.target_entropy = self.branches.target_entropy(hp.target_entropy).to(device)
        self.actor_optimizer: FlatAdam = make_adam(self.actor_params, hp.learning_rate)
        self.q_optimizer: FlatAdam = make_adam(self.qf_params, hp.learning_rate)
        self.log_alpha.grad = torch.zeros_like(self.log_alpha)
        self.alpha_optimizer: FlatAdam = make_adam(self.log_alpha, hp.learning_rate)

    @property
    def optimizers(self) -> tuple[FlatAdam, FlatAdam, FlatAdam]:
        return self.actor_optimizer, self.q_optimizer, self.alpha_optimizer

    def modules(self) -> nn.ModuleDict:
        """The networks and ``log alpha`` as one module (what rank 0 broadcasts)."""
        parts = nn.ModuleDict(
            {
                "normalizer": self.normalizer,
                "actor": self.actor,
                "qf": self.qf,
                "qf_target": self.qf_target,
            }
        )
        parts.register_parameter("log_alpha", self.log_alpha)
        return parts
