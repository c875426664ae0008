"""The ranks of a data-parallel run, and the collectives trainers and the runner use.

:class:`World` is the one place trainers and the runner talk to other ranks.  Every method is
a collective: all ranks call it, in the same order, or the job hangs.  In a one-process run
each method returns at once without touching ``torch.distributed``.  A collective that fails
— almost always because another rank died — raises :class:`~evtrain.errors.DistributedError`.

torch is imported only when a method needs it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from evtrain.errors import DistributedError
from evtrain.events.stats import StatsAggregationMethod, StatsSummary
from evtrain.ranks import ElasticStart, process_group

if TYPE_CHECKING:
    import torch

logger = logging.getLogger("evtrain")

T = TypeVar("T")


class World:
    """The ranks of this job, and the collectives a data-parallel run needs.

    :param dist: ``torch.distributed`` with an initialised process group, or ``None`` for a
        one-process run.
    """

    def __init__(self, dist: Any = None) -> None:
        self._dist = dist
        self.rank: int = 0 if dist is None else int(dist.get_rank())
        self.size: int = 1 if dist is None else int(dist.get_world_size())
        self._device: torch.device | None = None

    @classmethod
    def current(cls) -> World:
        """This process's world: the initialised process group, or one process."""
        return cls(process_group())

    @property
    def device(self) -> torch.device:
        """Where small tensors for collectives live: the current CUDA device under ``nccl``,
        else the CPU."""
        if self._device is None:
            import torch

            self._device = torch.device("cpu")
            if self._dist is not None and self._dist.get_backend() == "nccl":
                self._device = torch.device("cuda", torch.cuda.current_device())
        return self._device

    def _collective(self, what: str, function: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        try:
            return function(*args, **kwargs)
        except RuntimeError as error:  # DistBackendError and gloo's errors are RuntimeErrors
            message = (
                f"rank {self.rank}: {what} across {self.size} ranks failed, most likely because "
                f"another rank stopped ({type(error).__name__}: {error}). This rank stops too; "
                f"the last checkpoint on disk is complete ({_how_to_resume()})."
            )
            # Logged here, at once: torchrun terminates the surviving ranks moments after one
            # dies, possibly before the error reaches anyone who would print it.
            logger.error("%s", message)
            raise DistributedError(message) from error

    # -- tensors -------------------------------------------------------------------------------

    def broadcast_(self, tensors: Iterable[torch.Tensor]) -> None:
        """Overwrite ``tensors`` in place with rank 0's values (one broadcast per dtype)."""
        if self.size == 1:
            return
        import torch

        groups: dict[tuple[torch.dtype, torch.device], list[torch.Tensor]] = {}
        for tensor in tensors:
            groups.setdefault((tensor.dtype, tensor.device), []).append(tensor)
        with torch.no_grad():
            for (_, device), group in groups.items():
                flat = torch.cat([t.detach().reshape(-1) for t in group]).to(self.device)
                self._collective("broadcasting parameters", self._dist.broadcast, flat, src=0)
                flat = flat.to(device)
                offset = 0
                for tensor in group:
                    n = tensor.numel()
                    tensor.copy_(flat[offset : offset + n].view_as(tensor))
                    offset += n

    def average_(self, tensor: torch.Tensor | None) -> None:
        """Replace ``tensor`` in place by its mean over the ranks (a gradient).

        :raises ValueError: ``tensor`` is ``None`` (a parameter without a gradient buffer).
        """
        if self.size == 1:
            return
        if tensor is None:
            raise ValueError("no gradient to average: the parameter has no .grad")
        self._sum_(tensor, "averaging gradients")
        tensor.div_(self.size)

    def _sum_(self, tensor: torch.Tensor, what: str) -> None:
        """All-reduce (sum) ``tensor`` in place.

        Two ranks on gloo swap their tensors instead (one message each way) and add: gloo's
        ring all-reduce takes several round trips for the same result, and PPO averages a
        gradient at every minibatch step, so on CPU ranks the exchange can cost as much as the
        step's computation (measured in ``docs/benchmark.md``, ``bench_distributed.py``).
        ``a + b == b + a`` exactly, so both ranks still hold the same bits.
        """
        if self.size != 2 or self._dist.get_backend() != "gloo":
            self._collective(what, self._dist.all_reduce, tensor)
            return
        import torch

        peer = 1 - self.rank
        other = torch.empty_like(tensor)
        sent = self._collective(what, self._dist.isend, tensor, peer)
        self._collective(what, self._dist.recv, other, peer)
        self._collective(what, sent.wait)
        tensor.add_(other)

    def all_gather(self, tensor: torch.Tensor) -> list[torch.Tensor]:
        """Every rank's ``tensor`` (same shape everywhere), in rank order."""
        if self.size == 1:
            return [tensor]
        import torch

        gathered = [torch.empty_like(tensor) for _ in range(self.size)]
        self._collective("gathering", self._dist.all_gather, gathered, tensor)
        return gathered

    # -- plain values --------------------------------------------------------------------------

    def sum(self, values: Sequence[float]) -> list[float]:
        """Element-wise sums of every rank's ``values`` (exact for integers below 2**53)."""
        if self.size == 1:
            return list(values)
        import torch

        tensor = torch.tensor(values, dtype=torch.float64, device=self.device)
        self._sum_(tensor, "summing")
        return [float(v) for v in tensor.tolist()]

    def any(self, flag: bool) -> bool:
        """Whether ``flag`` is true on at least one rank."""
        if self.size == 1:
            return flag
        return self.sum([float(flag)])[0] > 0

    def broadcast_object(self, obj: T) -> T:
        """Rank 0's ``obj`` (picklable) on every rank."""
        if self.size == 1:
            return obj
        box = [obj]
        self._collective("sharing rank 0's decision", self._dist.broadcast_object_list, box, src=0)
        return box[0]

    # -- statistics ----------------------------------------------------------------------------

    def merge_stats(self, summaries: Mapping[str, StatsSummary]) -> dict[str, StatsSummary]:
        """One summary period of every rank merged, on rank 0; other ranks get their own back.

        Values of every aggregation but ``MOST_RECENT`` are concatenated in rank order, so
        rank 0 reports the returns of every rank's episodes and loss means over all ranks;
        ``MOST_RECENT`` keeps the lowest rank's value (``Step`` is global on every rank).
        """
        if self.size == 1:
            return dict(summaries)
        plain = {key: (s.aggregation_method.value, s.full_dist) for key, s in summaries.items()}
        gathered: list[Any] | None = [None] * self.size if self.rank == 0 else None
        self._collective("gathering statistics", self._dist.gather_object, plain, gathered, dst=0)
        if gathered is None:
            return dict(summaries)
        merged: dict[str, tuple[int, list[float]]] = {}
        for table in gathered:
            for key, (method, values) in table.items():
                if key not in merged:
                    merged[key] = (method, list(values))
                elif method != StatsAggregationMethod.MOST_RECENT.value:
                    merged[key][1].extend(values)
        return {
            key: StatsSummary(full_dist=values, aggregation_method=StatsAggregationMethod(method))
            for key, (method, values) in merged.items()
        }


def _how_to_resume() -> str:
    """How the run goes on after a rank failed: torchrun restarts the group while it has
    restarts left (which then resumes by itself, :mod:`evtrain.run.checkpoints.elastic`), else by
    hand."""
    start = ElasticStart.of_environment()
    if start is not None and start.restart_count < start.max_restarts:
        used, allowed = start.restart_count, start.max_restarts
        return f"torchrun starts the workers again, restart {used + 1} of {allowed}, to resume it"
    return "resume with --resume"
