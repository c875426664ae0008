"""Data-parallel training on ``torch.distributed``: initializers, and the collectives trainers use.

An :class:`Initializer` (entry-point group ``evtrain.initializer``, registration function
``() -> Initializer``) prepares the process before the run starts: process group, seeds,
device.  At most one is active in a run (see :func:`evtrain.plugins.load_initializer`);
evtrain ships ``torch`` (:class:`TorchInitializer`), which reads the environment ``torchrun``
sets and does nothing in a process ``torchrun`` did not start.

:class:`World` is the one place trainers and the runner talk to other ranks.  Every method is
a collective: all ranks call it, in the same order, or the job hangs.  In a one-process run
each method returns at once without touching ``torch.distributed``.  A collective that fails
— almost always because another rank died — raises :class:`~evtrain.errors.DistributedError`.

torch is imported only when a method needs it: ``evtrain plugins`` lists the ``torch``
initializer without loading torch.
"""

from __future__ import annotations

import abc
import contextlib
import datetime
import logging
import os
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any, TypeVar

from evtrain.errors import DistributedError
from evtrain.filters import _process_group
from evtrain.stats import StatsAggregationMethod, StatsSummary

if TYPE_CHECKING:
    import torch

    from evtrain.settings import RunOptions

logger = logging.getLogger("evtrain")

T = TypeVar("T")


class Initializer(abc.ABC):
    """Sets a process up for a (possibly) distributed run, and takes it down afterwards.

    ``load`` runs once, before the run folder, the bus or any trainer exists; ``teardown``
    runs once at the very end, also after a failure.  After ``load``, ``torch.distributed``
    must be initialised for a multi-process run (evtrain's collectives go through it), and
    :attr:`device` names this rank's device when the initializer chooses it.
    """

    device: str | None = None
    """This rank's torch device (``"cuda:1"``), or ``None`` to leave it to
    ``torch_settings.device``."""

    def applies(self, options: RunOptions) -> bool:
        """Whether this process was started the way this initializer expects (``torch``:
        by ``torchrun``; a SLURM initializer: by ``srun``).

        When the options choose no initializer, a run uses the one installed initializer
        that applies, so installing a second one does not change plain runs.  The default,
        ``True``, suits an initializer that should always run.
        """
        return True

    @abc.abstractmethod
    def load(self, options: RunOptions) -> None:
        """Set up the process group, seeds and device for ``options``."""

    def teardown(self) -> None:  # noqa: B027 - optional hook, nothing to undo by default
        """Undo :meth:`load` (destroy the process group it created)."""


class TorchInitializer(Initializer):
    """``torchrun``'s environment (``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ``MASTER_ADDR``,
    ``MASTER_PORT``) to a process group: ``nccl`` when training on CUDA, else ``gloo``.

    Single node::

        torchrun --standalone --nproc-per-node 2 -m evtrain learn config.yaml

    Without ``WORLD_SIZE`` (no ``torchrun``) it does nothing: one process, no process group.
    A process group the caller initialised already is used as it is, and left alone at
    teardown.
    """

    def __init__(self) -> None:
        self._owns_group = False

    def applies(self, options: RunOptions) -> bool:
        return "WORLD_SIZE" in os.environ

    def load(self, options: RunOptions) -> None:
        if not self.applies(options):
            return
        import torch
        import torch.distributed as dist

        if dist.is_initialized():
            return
        rank = int(os.environ["RANK"])
        local_rank = int(os.environ.get("LOCAL_RANK", "0"))
        requested = options.torch_settings.device
        if requested is None:
            requested = "cuda" if torch.cuda.is_available() else "cpu"
        backend = "gloo"
        if requested.startswith("cuda"):
            # "cuda" means this node's GPU number LOCAL_RANK; "cuda:N" is taken as given.
            device = torch.device("cuda", local_rank) if requested == "cuda" else requested
            torch.cuda.set_device(device)
            self.device = str(device)
            backend = "nccl"
        timeout = datetime.timedelta(seconds=options.torch_settings.distributed_timeout)
        dist.init_process_group(backend, timeout=timeout)
        self._owns_group = True
        if options.env_settings.seed >= 0:
            torch.manual_seed(options.env_settings.seed + 1000 * rank)
        logger.info(
            "Rank %d of %d: process group up (%s backend, device %s)",
            rank,
            dist.get_world_size(),
            backend,
            self.device or requested,
        )

    def teardown(self) -> None:
        if not self._owns_group:
            return
        import torch.distributed as dist

        if dist.is_initialized():
            dist.destroy_process_group()
        self._owns_group = False


def torch_initializer() -> Initializer:
    """Registration function of the built-in ``torch`` initializer."""
    return TorchInitializer()


_ACTIVE: ContextVar[Initializer | None] = ContextVar("evtrain_initializer", default=None)


def active_initializer() -> Initializer | None:
    """The initializer :func:`initialized` loaded for the run in progress, if any."""
    return _ACTIVE.get()


@contextlib.contextmanager
def initialized(options: RunOptions) -> Iterator[Initializer | None]:
    """Load the run's initializer (if one is active) and tear it down on the way out.

    Nested use is a no-op: the CLI loads it before creating its progress display and bus,
    and :func:`evtrain.learn` inside finds it loaded.

    :raises PluginError: see :func:`evtrain.plugins.load_initializer`.
    """
    from evtrain.plugins import load_initializer

    if _ACTIVE.get() is not None:
        yield _ACTIVE.get()
        return
    initializer = load_initializer(options)
    if initializer is None:
        yield None
        return
    try:
        initializer.load(options)
        token = _ACTIVE.set(initializer)
        try:
            yield initializer
        finally:
            _ACTIVE.reset(token)
    finally:
        initializer.teardown()


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
        return cls(_process_group())

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
                "the last checkpoint on disk is complete (resume with --resume)."
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
        ring all-reduce takes several round trips, 1.7 ms for a 9,000-float gradient between
        two processes of this 2-core machine against 0.3 ms for the swap, and PPO averages a
        gradient 20 times per update.  ``a + b == b + a`` exactly, so both ranks still hold
        the same bits.
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
