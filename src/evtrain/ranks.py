"""This process's rank and the job's world size, without importing torch.

The rank is ``torch.distributed.get_rank()`` once a process group is initialised, else the
``RANK`` environment variable ``torchrun`` sets, else 0.  torch is never imported here just to
ask: if ``torch.distributed`` is not imported yet, no process group can exist.
"""

from __future__ import annotations

import os
import sys
from typing import Any


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
