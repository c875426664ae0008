"""The wandb writer in offline mode (no network): real ``evtrain learn`` runs, alone and under
a real ``torchrun`` with 2 ranks, and the offline run directory read back record by record.

wandb 0.31 ships no Python reader of its ``.wandb`` transaction log, so :func:`history` reads
the format itself: a 7-byte header, then LevelDB-log records (32 KiB blocks, a 7-byte record
header: crc32, length, type FULL/FIRST/MIDDLE/LAST) of ``wandb_internal_pb2.Record`` protos."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.helpers import config, isolated_python, run_config

pytest.importorskip("wandb")

from tests.writers.wandb_files import history

REWARD = "CartPole/Environment/Cumulative Reward"
TORCHRUN = (isolated_python(), "-m", "torch.distributed.run")
"""``torchrun`` in a Python without other packages' evtrain plugins."""


def offline(options: dict[str, Any]) -> dict[str, Any]:
    options["writers"] = {"wandb": {"mode": "offline", "project": "tests"}}
    return options


def test_an_offline_run_holds_every_step_once(tmp_path: Path) -> None:
    options = offline(config(tmp_path))
    result = run_config(tmp_path, options)
    assert result.returncode == 0, result.stderr
    run = tmp_path / "results" / "run"
    rows = history(run)
    assert [int(r["_step"]) for r in rows] == [256, 512, 768, 1024]
    assert all(REWARD in r and "CartPole/Losses/Policy Loss" in r for r in rows)
    assert (run / "run_logs" / "wandb.json").exists()


def test_two_ranks_make_one_wandb_run(tmp_path: Path) -> None:
    options = offline(config(tmp_path, max_steps=512))  # 2 summaries
    options["torch_settings"] = {"distributed_timeout": 60}
    (tmp_path / "run.yaml").write_text(yaml.safe_dump(options))
    result = subprocess.run(
        [*TORCHRUN, "--standalone", "--nproc-per-node", "2", "-m", "evtrain", "learn", "run.yaml"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=180,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
        check=False,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    run = tmp_path / "results" / "run"
    assert len(list(run.glob("wandb/offline-run-*"))) == 1  # rank 0's only
    steps = [int(r["_step"]) for r in history(run)]
    assert steps == sorted(set(steps)) and steps[-1] == 512
