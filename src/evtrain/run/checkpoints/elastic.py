"""Elastic ``torchrun``: a group that torchrun started again resumes its run by itself.

Under ``torchrun --max-restarts N`` (and elastic ``--nnodes MIN:MAX``) the agent stops every
worker when one fails, or when a node joins or leaves, and starts them all again with the same
command line.  Each worker finds ``TORCHELASTIC_RUN_ID`` (the ``--rdzv-id``; a random one under
``--standalone``) and ``TORCHELASTIC_RESTART_COUNT`` in its environment.  Only failures count as
restarts: a membership change starts the workers again with the count unchanged (torch's
``SimpleElasticAgent._invoke_run``), so the count alone cannot tell a restart from a first
start.  Rank 0 therefore records the elastic run id in the run folder
(``run_logs/elastic.json``) at every start; a later start of the same elastic run whose folder
holds that record is a restart, and continues the run as ``--resume`` would — also when
``--force`` is on the command line, which then applies to the job's first start only.

torchrun's own default id, ``none`` (``--rdzv-backend c10d`` without ``--rdzv-id``), is the
same for every job, so it cannot say that a folder is this job's: such a job never resumes by
itself, and a restart of it meets the run folder error.  A fixed ``--rdzv-id`` reused for a new
job resumes the run folder of the old one (docs/distributed.md, "Elastic restarts").

Rank 0 decides and tells the other ranks (:meth:`World.broadcast_object`), so every rank
builds its writers and trainers for the same choice.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import attrs

from evtrain.atomic import atomic_write
from evtrain.config.options import RunOptions
from evtrain.ranks import ElasticStart
from evtrain.run.checkpoints.run_folder import unwritable
from evtrain.world import World

logger = logging.getLogger("evtrain")

RECORD = "elastic.json"
"""In ``run_logs/``: the elastic run that last started the run, and its world size."""


def resumed_after_restart(options: RunOptions, world: World) -> RunOptions:
    """``options`` as every rank must run them: with ``resume`` set (and ``force`` cleared)
    when torchrun started this group again for a run whose folder rank 0 recorded, else
    unchanged.  A collective: every rank calls it, before the run folder is prepared."""
    start = ElasticStart.of_environment()
    cs = options.checkpoint_settings
    if start is None or cs.inference:
        return options
    line = _restart_line(options, start, world.size) if world.rank == 0 else None
    line = world.broadcast_object(line)
    if line is None:
        return options
    if world.rank == 0:
        logger.info("%s", line)
    return attrs.evolve(options, checkpoint_settings=attrs.evolve(cs, resume=True, force=False))


def _restart_line(options: RunOptions, start: ElasticStart, size: int) -> str | None:
    """Rank 0's decision: the line that says the group resumes, or ``None`` (a first start)."""
    cs = options.checkpoint_settings
    if not start.named:
        if start.restart_count == 0 and start.max_restarts > 0:
            logger.warning(
                "torchrun was given no --rdzv-id: a restart cannot tell this job's run folder "
                "from an earlier job's, so it will not resume %s by itself; give each job its "
                "own --rdzv-id (docs/distributed.md, Elastic restarts)",
                cs.write_path,
            )
        return None
    record = read_record(cs.run_logs_dir / RECORD)
    if record.get("torchelastic_run_id") != start.run_id:
        return None
    cause = f"restart {start.restart_count}" if start.restart_count else "a membership change"
    before = record.get("world_size")
    ranks = f"{size} rank{'s' if size != 1 else ''}"
    if isinstance(before, int) and before != size:
        ranks += f", {before} before"
    return (
        f"torchrun restarted the workers ({cause} of run {start.run_id}; {ranks}): resuming "
        f"from {_last_steps(options)} of {cs.write_path}"
    )


def _last_steps(options: RunOptions) -> str:
    """Each behavior's ``checkpoint.pt`` step, the one its trainer resumes from (``step
    1024``; ``Walker: step 2048, Runner: step 0``): memory-mapped, so that a large replay
    buffer is not read for it."""
    import torch

    steps = {}
    for name in options.behaviors:
        path = options.checkpoint_settings.write_path / name / "checkpoint.pt"
        try:
            state = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
            steps[name] = str(int(state["step"]))
        except FileNotFoundError:
            steps[name] = "0"
        except Exception:  # the trainer's own load says what is wrong with it
            steps[name] = "? (an unreadable checkpoint)"
    if len(steps) == 1:
        return f"step {next(iter(steps.values()))}"
    return ", ".join(f"{name}: step {step}" for name, step in steps.items())


def read_record(path: Path) -> dict[str, Any]:
    """A JSON object file of the run folder; empty when missing or not a JSON object."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def record_start(options: RunOptions, world: World) -> None:
    """On rank 0, once the run folder is this run's: write which elastic run started it (under
    torchrun only), so that a restart of the same run finds it.

    :raises RunFolderError: the folder cannot be written.
    """
    start = ElasticStart.of_environment()
    if start is None or world.rank != 0 or options.checkpoint_settings.inference:
        return
    record = {
        "torchelastic_run_id": start.run_id,
        "restart_count": start.restart_count,
        "world_size": world.size,
    }
    folder = options.checkpoint_settings.run_logs_dir
    text = json.dumps(record, indent=2) + "\n"
    try:
        folder.mkdir(parents=True, exist_ok=True)
        atomic_write(folder / RECORD, lambda f: f.write(text.encode()))
    except OSError as error:
        raise unwritable(options, error) from None
