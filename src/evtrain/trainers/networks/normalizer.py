"""The observation normaliser that travels with the model, so an exported policy normalises by
itself (ML-Agents' running mean and variance, clipped to ``NORMALIZED_OBS_CLIP``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
from torch import nn

if TYPE_CHECKING:
    from evtrain.world import World

NORMALIZED_OBS_CLIP = 5.0
"""Normalised observations are clipped to ``±5`` standard deviations, as ML-Agents does."""


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
