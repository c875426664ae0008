"""``torchrun`` runs that several test modules read, made once per test session.

Each ``torchrun`` of two ranks costs 10-20 s (three processes import torch), so a run that
tests of ``tests/test_distributed.py`` and ``tests/test_elastic.py`` both read is made by the
first test that asks for it; the others, in this pytest process or another pytest-xdist worker
of the session, wait for it under a file lock and take the same folder.  A test that writes
into a run copies it first (:func:`shutil.copytree`).
"""

from __future__ import annotations

import fcntl
import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.torchrun_runs import Run, torchrun

SAC: dict[str, Any] = {
    "trainer_type": "probe_sac",
    "hyperparameters": {
        "batch_size": 32,
        "buffer_init_steps": 64,
        "buffer_size": 1000,
        "save_replay_buffer": True,
    },
    "network_settings": {"hidden_units": 16, "normalize": True},
    "max_steps": 256,
    "summary_freq": 128,
    "checkpoint_interval": 10**6,
}
"""2 ranks x 2 Pendulums: 128 steps of each rank, a summary after each; the checkpoint (at the
end only) holds rank 0's replay buffer."""

PENDULUM = {"env_id": "Pendulum-v1", "num_envs": 2, "seed": 1}


def _session_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder every pytest-xdist worker of this session shares (this session's own base
    folder when pytest runs without workers)."""
    base = tmp_path_factory.getbasetemp()
    return base if os.environ.get("PYTEST_XDIST_WORKER") is None else base.parent


def shared_run(
    tmp_path_factory: pytest.TempPathFactory,
    name: str,
    behavior: dict[str, Any],
    env_settings: dict[str, Any],
) -> Run:
    """The finished :func:`tests.torchrun_runs.torchrun` of ``behavior`` on ``env_settings``,
    made once per session under ``name``; its outcome is kept, a failed run too, so that
    every test reading it sees the same result."""
    root = _session_folder(tmp_path_factory)
    folder, record = root / f"shared-{name}", root / f"shared-{name}.json"
    with (root / f"shared-{name}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        if not record.exists():
            run = torchrun(folder, behavior, env_settings)
            outcome = [run.result.returncode, run.result.stdout, run.result.stderr, run.took]
            record.write_text(json.dumps(outcome))
        code, stdout, stderr, took = json.loads(record.read_text())
    return Run(folder, subprocess.CompletedProcess([], code, stdout, stderr), took)


def sac_on_two_ranks(tmp_path_factory: pytest.TempPathFactory) -> Run:
    """:data:`SAC` on :data:`PENDULUM` under ``torchrun --standalone --nproc-per-node 2``."""
    return shared_run(tmp_path_factory, "sac-two-ranks", SAC, PENDULUM)
