"""Building blocks shared by the trainers: MLPs with orthogonal init and an observation
normaliser that travels with the model (so an exported policy normalises by itself).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from typing import TYPE_CHECKING, cast

import torch
import torch.nn.functional as F
from torch import nn

from evtrain.trainers.settings import NetworkSettings

if TYPE_CHECKING:
    from evtrain.world import World

ACTIVATIONS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "tanh": torch.tanh,
    "relu": torch.relu,
    "elu": F.elu,
    "silu": F.silu,
}
"""``NetworkSettings.activation`` name to function."""

NORMALIZED_OBS_CLIP = 5.0
"""Normalised observations are clipped to ``±5`` standard deviations, as ML-Agents does."""


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
    """

    def __init__(
        self,
        in_features: int,
        out_features: int,
        network: NetworkSettings,
        *,
        out_gain: float,
        generator: torch.Generator | None = None,
    ) -> None:
        super().__init__()
        widths = [in_features] + [network.hidden_units] * network.num_layers
        self.hidden = hidden_layers(widths, generator)
        self.out = layer_init(nn.Linear(widths[-1], out_features), out_gain, generator)
        self.activation = ACTIVATIONS[network.activation]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in cast("list[nn.Linear]", self.hidden):
            x = self.activation(F.linear(x, layer.weight, layer.bias))
        return F.linear(x, self.out.weight, self.out.bias)


class ObservationNormalizer(nn.Module):
    """Running mean and variance of observations; ``forward`` standardises and clips.

    The statistics are buffers, so they are part of ``state_dict`` and of an exported model.
    When disabled, ``forward`` is the identity and ``update`` does nothing.

    In a distributed run (:attr:`deferred`), :meth:`update` only collects the batches, and
    :meth:`merge_ranks` merges every rank's into the statistics at once: all ranks then hold
    the same statistics and normalise alike until the next merge.
    """

    count: torch.Tensor
    mean: torch.Tensor
    var: torch.Tensor

    def __init__(self, shape: tuple[int, ...], *, enabled: bool) -> None:
        super().__init__()
        self.enabled = enabled
        # float64 statistics: millions of float32 updates drift visibly.
        self.register_buffer("count", torch.zeros((), dtype=torch.float64))
        self.register_buffer("mean", torch.zeros(shape, dtype=torch.float64))
        self.register_buffer("var", torch.ones(shape, dtype=torch.float64))
        self.deferred = False
        """Collect :meth:`update`'s batches for :meth:`merge_ranks` instead of merging them."""
        self._pending: tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None = None

    @torch.no_grad()
    def update(self, batch: torch.Tensor) -> None:
        """Merge a batch of observations (first dimension = batch) into the statistics."""
        if not self.enabled or batch.shape[0] == 0:
            return
        x = batch.to(torch.float64)
        n = float(x.shape[0])
        batch_mean = x.mean(0)
        batch_var = x.var(0, unbiased=False)
        if self.deferred:
            if self._pending is None:
                self._pending = (self.count.new_tensor(n), batch_mean, batch_var)
            else:
                self._pending = _merged(*self._pending, n, batch_mean, batch_var)
            return
        count, mean, var = _merged(self.count, self.mean, self.var, n, batch_mean, batch_var)
        self.mean.copy_(mean)
        self.var.copy_(var)
        self.count.copy_(count)

    def merge_ranks(self, world: World) -> None:
        """Merge every rank's batches since the last call, in rank order (a collective: every
        rank calls it together)."""
        if self.enabled:
            self.merge_rows(world.all_gather(self.pending_row().to(world.device)))

    def pending_row(self) -> torch.Tensor:
        """The batches collected since the last merge as one row: count, mean, variance; and
        forgets them."""
        empty = (torch.zeros_like(self.count), torch.zeros_like(self.mean), self.var)
        count, mean, var = self._pending or empty
        self._pending = None
        return torch.cat([count.reshape(1), mean.reshape(-1), var.reshape(-1)])

    @torch.no_grad()
    def merge_rows(self, rows: list[torch.Tensor]) -> None:
        """Merge :meth:`pending_row` outputs into the statistics, in order."""
        size = self.mean.numel()
        for row in rows:
            row = row.to(self.mean.device)
            n = float(row[0])
            if n > 0:
                batch_mean = row[1 : 1 + size].view_as(self.mean)
                batch_var = row[1 + size :].view_as(self.var)
                count, mean, var = _merged(
                    self.count, self.mean, self.var, n, batch_mean, batch_var
                )
                self.mean.copy_(mean)
                self.var.copy_(var)
                self.count.copy_(count)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        """Standardised, clipped observations (float32); the input itself when disabled."""
        if not self.enabled:
            return obs
        mean = self.mean.to(obs.dtype)
        std = (self.var + 1e-8).sqrt().to(obs.dtype)
        return ((obs - mean) / std).clamp(-NORMALIZED_OBS_CLIP, NORMALIZED_OBS_CLIP)

    def extra_repr(self) -> str:
        return f"enabled={self.enabled}"


def _merged(
    count: torch.Tensor,
    mean: torch.Tensor,
    var: torch.Tensor,
    n: float,
    batch_mean: torch.Tensor,
    batch_var: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Chan et al.'s parallel merge of two (count, mean, population variance) summaries."""
    total = count + n
    delta = batch_mean - mean
    m2 = var * count + batch_var * n + delta.square() * count * n / total
    return total, mean + delta * n / total, m2 / total


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
    capped at 1) in three kernels, without its per-call grouping of tensors by device and
    dtype, which costs twice as much as the arithmetic on one tensor.  Returns the norm.
    """
    if flat.grad is None:
        raise ValueError("this parameter has no gradient buffer: use flatten_parameters")
    norm: torch.Tensor = torch.linalg.vector_norm(flat.grad)
    flat.grad.mul_(torch.clamp(max_norm / (norm + 1e-6), max=1.0))
    return norm
