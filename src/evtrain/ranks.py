"""This process's rank and the job's world size, and how ``torchrun`` started it, without
importing torch.

The rank is ``torch.distributed.get_rank()`` once a process group is initialised, else the
``RANK`` environment variable ``torchrun`` sets, else 0.  torch is never imported here just to
ask: if ``torch.distributed`` is not imported yet, no process group can exist.
:class:`ElasticStart` reads the elastic agent's variables (restarts, the run id, its store).
"""

from __future__ import annotations

import os
import sys
from typing import Any

import attrs


def process_group() -> Any:
    """``torch.distributed`` if a process group is initialised (never importing torch)."""
    dist: Any = sys.modules.get("torch.distributed")
    if dist is not None and dist.is_available() and dist.is_initialized():
        return dist
    return None


def _env_int(name: str, default: int) -> int:
    raw = os.environ.get(name, "")
    try:
        return int(raw) if raw else default
    except ValueError:
        raise ValueError(f"{name} environment variable must be an integer, got {raw!r}") from None


def get_rank() -> int:
    """This process's rank in the distributed job (0 when not distributed)."""
    dist = process_group()
    return int(dist.get_rank()) if dist is not None else _env_int("RANK", 0)


def get_world_size() -> int:
    """Processes in the distributed job: the process group's size, else ``WORLD_SIZE``, else 1."""
    dist = process_group()
    return int(dist.get_world_size()) if dist is not None else _env_int("WORLD_SIZE", 1)


UNNAMED = "none"
"""``TORCHELASTIC_RUN_ID`` when ``torchrun`` was given no ``--rdzv-id`` (not standalone)."""


@attrs.frozen(kw_only=True)
class ElasticStart:
    """How torchrun started this worker: its elastic run and how many restarts came before."""

    run_id: str
    """``TORCHELASTIC_RUN_ID``: the rendezvous id, shared by every start of the job."""
    restart_count: int
    """``TORCHELASTIC_RESTART_COUNT``: failures torchrun restarted the group after."""
    max_restarts: int
    """``TORCHELASTIC_MAX_RESTARTS``: ``--max-restarts``."""
    agent_store: bool
    """``TORCHELASTIC_USE_AGENT_STORE``: the workers' process group goes through the agent's
    own rendezvous TCPStore (torch's default)."""

    @classmethod
    def of_environment(cls) -> ElasticStart | None:
        """This process's start, or ``None`` when no torchrun agent started it.  A count that
        is not a number reads as 0 (no restart to act on)."""
        run_id = os.environ.get("TORCHELASTIC_RUN_ID")
        if not run_id:
            return None
        try:
            restart_count = _env_int("TORCHELASTIC_RESTART_COUNT", 0)
            max_restarts = _env_int("TORCHELASTIC_MAX_RESTARTS", 0)
        except ValueError:
            restart_count = max_restarts = 0
        return cls(
            run_id=run_id,
            restart_count=restart_count,
            max_restarts=max_restarts,
            agent_store=os.environ.get("TORCHELASTIC_USE_AGENT_STORE") == "True",
        )

    @property
    def named(self) -> bool:
        """Whether the run id names this job (``--rdzv-id`` given, or ``--standalone``)."""
        return self.run_id != UNNAMED
