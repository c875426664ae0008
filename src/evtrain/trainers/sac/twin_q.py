"""SAC's twin critics, computed as one module: ``Q_1(s, a)`` and ``Q_2(s, a)`` together.

Also reads the state of the two-network layout that came before (``q1.*`` and ``q2.*``, two
:class:`~evtrain.trainers.networks.mlp.MLP`), so older checkpoints still load.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from evtrain.trainers.networks.mlp import ACTIVATIONS
from evtrain.trainers.observations import ObservationEncoder, ObservationLayout
from evtrain.trainers.settings import NetworkSettings

INPLACE_ACTIVATIONS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "relu": torch.relu_,
    "tanh": torch.tanh_,
}
"""Activations whose gradient needs only their output, so they can overwrite their input:
one large temporary less per hidden layer (others run out of place)."""


class TwinQ(nn.Module):
    """Two independent ``Q(s, a)`` estimates; their minimum counters overestimation.

    Both critics are computed together: layer ``i`` of both is one ``[2, in, out]`` weight
    ``weights[i]`` and one ``[2, 1, out]`` bias ``biases[i]`` (critic ``k`` at index ``k``),
    so each layer is one batched matrix product (``torch.baddbmm``) forward and backward for
    the pair.  The ``[in, out]`` layout matters beyond the fusion: the first layer's weight
    gradient is then ``x^T g``, where ``nn.Linear``'s ``[out, in]`` makes it ``(g^T x)``,
    a product with a handful of columns that MKL computes ~6x slower than the other way.

    The weights are drawn as two separate :class:`MLP` would draw them (q1's layers in order,
    then q2's, from the same generator), so a seed builds the same critics as before.

    With image observations (``layout``), each critic has its own image encoders in front
    (:mod:`evtrain.trainers.observations`), as ML-Agents' two Q networks do, and ``obs_dim``
    is the width of their output (which leaves an action mask out).

    :param num_actions: for discrete actions (:mod:`evtrain.trainers.sac.discrete`): the
        critics take no action (``action_dim`` 0) and output one value per action,
        ``Q(s, .)``, read with :meth:`action_values`; 0 (``Box``): one output, ``Q(s, a)``.
    """

    def __init__(
        self,
        obs_dim: int,
        action_dim: int,
        network: NetworkSettings,
        generator: torch.Generator,
        layout: ObservationLayout | None = None,
        *,
        num_actions: int = 0,
    ) -> None:
        super().__init__()
        self.num_actions = num_actions
        outputs = num_actions or 1
        widths = [obs_dim + action_dim] + [network.hidden_units] * network.num_layers + [outputs]
        gains = [math.sqrt(2)] * network.num_layers + [1.0]
        shapes = list(itertools.pairwise(widths))
        drawn = [
            [
                nn.init.orthogonal_(torch.empty(out, in_), gain, generator=generator)
                for (in_, out), gain in zip(shapes, gains, strict=True)
            ]
            for _ in range(2)
        ]
        self.weights = nn.ParameterList(
            nn.Parameter(torch.stack([q1.t(), q2.t()])) for q1, q2 in zip(*drawn, strict=True)
        )
        self.biases = nn.ParameterList(nn.Parameter(torch.zeros(2, 1, out)) for _, out in shapes)
        self.activation = INPLACE_ACTIVATIONS.get(
            network.activation, ACTIVATIONS[network.activation]
        )
        self.encoders: nn.ModuleList | None = None
        if layout is not None and not layout.plain:  # images to encode, or a mask to leave out
            self.encoders = nn.ModuleList(
                ObservationEncoder(layout, network, generator) for _ in range(2)
            )

    def forward(self, x: torch.Tensor, action: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        q = self.values(x, action)
        return q[0], q[1]

    def values(self, x: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
        """Both estimates as one ``[2, batch]`` tensor (row ``k``: critic ``k``)."""
        h, (weight, bias) = self._hidden(x, action)
        # The one-unit output layer as two matrix-vector products: bmm with a single output
        # column is several times slower, forward and backward.
        return torch.stack(
            [
                torch.addmv(b_k.view(1), h_k, w_k.view(-1))
                for h_k, w_k, b_k in zip(h.unbind(0), weight, bias, strict=True)
            ]
        )

    def action_values(self, x: torch.Tensor) -> torch.Tensor:
        """Both critics' values of every action, ``[2, batch, num_actions]`` (discrete
        critics: one batched matrix product per layer, the output layer included)."""
        h, (weight, bias) = self._hidden(x, None)
        return torch.baddbmm(bias, h, weight)

    def _hidden(
        self, x: torch.Tensor, action: torch.Tensor | None
    ) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
        """Both critics' last hidden layer ``[2, batch, hidden]``, and their output layer."""
        inputs = [] if action is None else [action]
        if self.encoders is None:
            h = torch.cat([x, *inputs], dim=-1).expand(2, -1, -1)
        else:  # each critic's own features of the observations
            h = torch.stack([torch.cat([encoder(x), *inputs], dim=-1) for encoder in self.encoders])
        *hidden, out = zip(self.weights, self.biases, strict=True)
        for w, b in hidden:
            h = self.activation(torch.baddbmm(b, h, w))
        return h, out


def from_two_networks(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """A :class:`TwinQ` state dict from one of the two-network layout (``q1.hidden.0.weight``
    ... ``q2.out.bias``, ``nn.Linear``'s ``[out, in]`` weights); any other state unchanged."""
    if "q1.out.weight" not in state:
        return state
    hidden = sum(1 for key in state if key.startswith("q1.hidden.") and key.endswith(".weight"))
    layers = [f"hidden.{i}" for i in range(hidden)] + ["out"]
    weights = {
        f"weights.{i}": torch.stack([state[f"q{k}.{layer}.weight"].t() for k in (1, 2)])
        for i, layer in enumerate(layers)
    }
    biases = {
        f"biases.{i}": torch.stack([state[f"q{k}.{layer}.bias"] for k in (1, 2)]).unsqueeze(1)
        for i, layer in enumerate(layers)
    }
    return weights | biases


def relayout_flat(
    optimizer_state: dict[str, Any], qf_state: dict[str, torch.Tensor]
) -> dict[str, Any]:
    """The critics' optimizer state with its flat tensors in :class:`TwinQ`'s parameter order,
    when ``qf_state`` (the critics' saved weights) is of the two-network layout.

    A flat optimizer tensor is the parameters' values (here their moments) concatenated in
    the module's parameter order; it is cut along the old parameters and put together again
    as :func:`from_two_networks` puts the parameters.
    """
    if "q1.out.weight" not in qf_state:
        return optimizer_state
    shapes = {name: tensor.shape for name, tensor in qf_state.items()}

    def relayout(flat: torch.Tensor) -> torch.Tensor:
        sizes = [math.prod(shape) for shape in shapes.values()]
        parts = torch.split(flat, sizes)
        old = {
            name: part.view(shape)
            for (name, shape), part in zip(shapes.items(), parts, strict=True)
        }
        return torch.cat([t.reshape(-1) for t in from_two_networks(old).values()])

    state = {
        index: {name: relayout(v) if name != "step" else v for name, v in saved.items()}
        for index, saved in optimizer_state["state"].items()
    }
    return {**optimizer_state, "state": state}
