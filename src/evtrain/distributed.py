"""Data-parallel training on ``torch.distributed``: initializers.

An :class:`Initializer` (entry-point group ``evtrain.initializer``, registration function
``() -> Initializer``) prepares the process before the run starts: process group, seeds,
device.  At most one is active in a run (see :func:`evtrain.run.wiring.load_initializer`);
evtrain ships ``torch`` (:class:`TorchInitializer`), which applies to processes ``torchrun``
started and does nothing in others.  The collectives themselves are :class:`World`'s
(:mod:`evtrain.world`, re-exported here).

torch is imported only when a method needs it: ``evtrain plugins`` lists the ``torch``
initializer without loading torch.
"""

from __future__ import annotations

import abc
import datetime
import logging
import os
from typing import TYPE_CHECKING

from evtrain.ranks import ElasticStart
from evtrain.world import World

if TYPE_CHECKING:
    from evtrain.config.options import RunOptions

logger = logging.getLogger("evtrain")

__all__ = ["Initializer", "TorchInitializer", "World", "torch_initializer"]


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
        start = ElasticStart.of_environment()
        _warn_of_shared_store(start, rank)
        try:
            dist.init_process_group(backend, timeout=timeout)
        except RuntimeError:  # DistBackendError, DistNetworkError and gloo's are RuntimeErrors
            if start is not None and start.agent_store and start.restart_count > 0:
                logger.error("Rank %d: %s", rank, SHARED_STORE)
            raise
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


SHARED_STORE = (
    "torchrun shares its rendezvous TCPStore with the workers, and a group it starts again can "
    "read the addresses of the group before it and fail to connect (pytorch/pytorch#135712): "
    "set TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1 in torchrun's environment for --max-restarts "
    "or --nnodes MIN:MAX (docs/distributed.md, Elastic restarts)"
)


def _warn_of_shared_store(start: ElasticStart | None, rank: int) -> None:
    """On rank 0 of a first start with restarts allowed: say that a restart would fail to
    connect with the agent's shared store (torch's default), and how to avoid it."""
    if (
        rank == 0
        and start is not None
        and start.restart_count == 0
        and start.max_restarts > 0
        and start.agent_store
    ):
        logger.warning("%s", SHARED_STORE)


def torch_initializer() -> Initializer:
    """Registration function of the built-in ``torch`` initializer."""
    return TorchInitializer()
