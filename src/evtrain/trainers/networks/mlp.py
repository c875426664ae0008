"""Building blocks shared by the trainers: MLPs with orthogonal init, and all of a network's
parameters in one flat tensor (one optimizer kernel per step).  The observation normaliser is
in :mod:`evtrain.trainers.networks.normalizer`.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from typing import TYPE_CHECKING, cast

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from evtrain.trainers.settings import NetworkSettings

if TYPE_CHECKING:
    pass

ACTIVATIONS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "tanh": torch.tanh,
    "relu": torch.relu,
    "elu": F.elu,
    "silu": F.silu,
}
"""``NetworkSettings.activation`` name to function."""


def layer_init(
    layer: nn.Linear, gain: float, generator: torch.Generator | None = None
) -> nn.Linear:
    """Orthogonal weights scaled by ``gain`` and zero bias (Engstrom et al. 2020, SB3, cleanrl)."""
    nn.init.orthogonal_(layer.weight, gain, generator=generator)
    nn.init.zeros_(layer.bias)
    return layer


def hidden_layers(widths: list[int], generator: torch.Generator | None) -> nn.ModuleList:
    """Linear layers from each width of ``widths`` to the next, orthogonal init with gain
    ``sqrt(2)`` drawn in order from ``generator``."""
    return nn.ModuleList(
        layer_init(nn.Linear(a, b), math.sqrt(2), generator) for a, b in itertools.pairwise(widths)
    )


class MLP(nn.Module):
    """``num_layers`` hidden layers of ``hidden_units`` and a linear output layer.

    Hidden layers get orthogonal init with gain ``sqrt(2)``; ``out_gain`` is the output
    layer's (0.01 keeps an initial policy near uniform, 1 suits a value head).  ``forward``
    applies the layers itself rather than through ``nn.Sequential``: on the small batches of
    a rollout, per-module call overhead costs as much as the matrix products.

    :param num_layers: hidden layers in place of ``network.num_layers``; 0 makes a head (the
        output layer alone), e.g. value heads on another network's :meth:`body`.
    """

    def __init__(
        self,
        in_features: int,
        out_features: int,
        network: NetworkSettings,
        *,
        out_gain: float,
        generator: torch.Generator | None = None,
        num_layers: int | None = None,
    ) -> None:
        super().__init__()
        layers = network.num_layers if num_layers is None else num_layers
        widths = [in_features] + [network.hidden_units] * layers
        self.hidden = hidden_layers(widths, generator)
        self.out = layer_init(nn.Linear(widths[-1], out_features), out_gain, generator)
        self.activation = ACTIVATIONS[network.activation]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in cast("list[nn.Linear]", self.hidden):
            x = self.activation(F.linear(x, layer.weight, layer.bias))
        return F.linear(x, self.out.weight, self.out.bias)

    def body(self, x: torch.Tensor) -> torch.Tensor:
        """The hidden layers' output (what :meth:`head` takes)."""
        for layer in cast("list[nn.Linear]", self.hidden):
            x = self.activation(F.linear(x, layer.weight, layer.bias))
        return x

    def head(self, h: torch.Tensor) -> torch.Tensor:
        """The output layer of :meth:`body`'s output: ``forward`` is ``head(body(x))``."""
        return F.linear(h, self.out.weight, self.out.bias)


def flatten_parameters(module: nn.Module) -> nn.Parameter:
    """Move all of ``module``'s parameters, and their gradients, into one contiguous buffer.

    Returns that buffer as a single parameter, whose ``grad`` holds every gradient: an
    optimizer, gradient clipping and zeroing then each run one kernel on one tensor instead of
    a Python loop over a dozen small ones, which is most of their cost on RL-sized networks.
    The module's parameters become views into the buffer; backward accumulates into their
    gradient views in place, so clear gradients with :func:`zero_grad_` (an optimizer's
    ``zero_grad()`` would set the buffer's ``grad`` to ``None`` and silently cut it off from
    the views).  Call it after moving the module to its device; the module keeps working and
    saving as before.  A module whose parameters do not require gradients (a target network)
    gets a buffer without ``grad``.
    """
    params = list(module.parameters())
    requires_grad = any(p.requires_grad for p in params)
    with torch.no_grad():
        flat = nn.Parameter(
            torch.cat([p.detach().reshape(-1) for p in params]), requires_grad=requires_grad
        )
    if requires_grad:
        flat.grad = torch.zeros_like(flat)
    offset = 0
    for p in params:
        n = p.numel()
        p.data = flat.data[offset : offset + n].view_as(p)
        if requires_grad:
            p.grad = flat.grad[offset : offset + n].view_as(p)  # type: ignore[index]
        offset += n
    return flat


def zero_grad_(flat: nn.Parameter) -> None:
    """Zero the gradient of a :func:`flatten_parameters` buffer in place."""
    if flat.grad is None:
        raise ValueError("this parameter has no gradient buffer: use flatten_parameters")
    flat.grad.zero_()


def clip_grad_norm_(flat: nn.Parameter, max_norm: float) -> torch.Tensor:
    """Scale a :func:`flatten_parameters` buffer's gradient to norm ``max_norm`` at most.

    ``torch.nn.utils.clip_grad_norm_``'s rule (coefficient ``max_norm / (norm + 1e-6)``,
    capped at 1) without its per-call grouping of tensors by device and dtype, which costs
    twice as much as the arithmetic on one tensor.  Returns the norm.

    On the CPU the coefficient is computed on the norm's value in numpy's float32, the
    operations torch would run on the 0-d tensor (``max_norm / t`` is ``t.reciprocal() *
    max_norm``), so the gradient gets the same bits for a fraction of the cost of four
    kernels; a coefficient of 1 leaves it as it is.  Elsewhere the kernels run on the device,
    which reading the norm would wait for.
    """
    grad = flat.grad
    if grad is None:
        raise ValueError("this parameter has no gradient buffer: use flatten_parameters")
    norm: torch.Tensor = torch.linalg.vector_norm(grad)
    if grad.device.type != "cpu" or grad.dtype != torch.float32:
        grad.mul_(torch.clamp(max_norm / (norm + 1e-6), max=1.0))
        return norm
    value = np.float32(norm.item())
    reciprocal = np.float32(1.0) / (value + np.float32(1e-6))
    coef = np.minimum(reciprocal * np.float32(max_norm), np.float32(1.0))
    if coef != 1.0:
        grad.mul_(float(coef))
    return norm
