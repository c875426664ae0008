"""An initializer plugin: set up ``torch.distributed`` from the variables SLURM's ``srun`` sets.

``torchrun`` is one way to start ranks; a cluster scheduler is another.  Under SLURM, ``srun``
starts one process per task and tells each its place through ``SLURM_PROCID`` (the rank),
``SLURM_NTASKS`` (the world size) and ``SLURM_LOCALID`` (its index on its node).  The ranks meet
at ``MASTER_ADDR:MASTER_PORT`` (the first node's address, set in the job script)::

    export MASTER_ADDR=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)
    export MASTER_PORT=29500
    srun evtrain learn config.yaml --initializer slurm

With this package installed next to evtrain, two initializers are installed (evtrain's
``torch`` and this ``slurm``).  Each says whether it applies to the process: ``slurm`` under
``srun`` (``SLURM_PROCID`` is set), ``torch`` under ``torchrun``, so a plain ``evtrain learn``
uses neither and ``srun`` uses ``slurm``.  ``--initializer`` (or ``plugins.initializer``)
chooses one explicitly, e.g. when a job step runs ``torchrun`` under ``srun``.
"""

from __future__ import annotations

import datetime
import logging
import os

import torch
import torch.distributed as dist

from evtrain import ConfigError, RunOptions
from evtrain.distributed import Initializer

# Under "evtrain": the CLI shows that logger's INFO lines (other loggers only from WARNING).
logger = logging.getLogger("evtrain.slurm")

VARIABLES = ("SLURM_PROCID", "SLURM_NTASKS", "MASTER_ADDR", "MASTER_PORT")


class SlurmInitializer(Initializer):
    """One process group for the tasks of a SLURM job step."""

    def __init__(self) -> None:
        self._owns_group = False

    def applies(self, options: RunOptions) -> bool:
        return "SLURM_PROCID" in os.environ

    def load(self, options: RunOptions) -> None:
        missing = [name for name in VARIABLES if name not in os.environ]
        if missing:
            raise ConfigError(
                [
                    f"plugins.initializer: 'slurm' needs the variables {', '.join(missing)}; "
                    "start the run with srun, and export MASTER_ADDR and MASTER_PORT in the "
                    "job script"
                ]
            )
        rank = int(os.environ["SLURM_PROCID"])
        world_size = int(os.environ["SLURM_NTASKS"])
        local_rank = int(os.environ.get("SLURM_LOCALID", "0"))
        backend = "gloo"
        if (options.torch_settings.device or "cpu").startswith("cuda"):
            self.device = f"cuda:{local_rank}"
            torch.cuda.set_device(self.device)
            backend = "nccl"
        address = f"tcp://{os.environ['MASTER_ADDR']}:{os.environ['MASTER_PORT']}"
        dist.init_process_group(
            backend,
            init_method=address,
            rank=rank,
            world_size=world_size,
            timeout=datetime.timedelta(seconds=options.torch_settings.distributed_timeout),
        )
        self._owns_group = True
        logger.info("SLURM task %d of %d joined at %s (%s)", rank, world_size, address, backend)

    def teardown(self) -> None:
        if self._owns_group and dist.is_initialized():
            dist.destroy_process_group()
        self._owns_group = False


def slurm_initializer() -> Initializer:
    """Registration function of the ``evtrain.initializer`` entry point ``slurm``."""
    return SlurmInitializer()
