"""Elastic ``torchrun`` in one process: what a worker decides from the variables torchrun
sets (``TORCHELASTIC_RUN_ID``, ``TORCHELASTIC_RESTART_COUNT``, ...), set here by hand, and the
initializer's word on torch's shared rendezvous store.  ``tests/test_elastic.py`` runs the real
``torchrun``."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import pytest

from evtrain.distributed import SHARED_STORE, TorchInitializer
from evtrain.errors import RunFolderError
from evtrain.run.checkpoints.elastic import RECORD
from evtrain.run.learn import learn
from evtrain.run.options import load_options
from tests.helpers import csv_steps, free_port, tensorboard_steps

REWARD = "Environment/Cumulative Reward"


def tiny(tmp_path: Path, max_steps: int, **checkpoint_settings: Any) -> dict[str, Any]:
    """A CartPole PPO run of a few hundred steps: a summary every 128, a checkpoint every 256."""
    return {
        "behaviors": {
            "CartPole": {
                "trainer_type": "ppo",
                "hyperparameters": {"batch_size": 32, "buffer_size": 64, "num_epoch": 1},
                "network_settings": {"hidden_units": 16},
                "max_steps": max_steps,
                "time_horizon": 16,
                "summary_freq": 128,
                "checkpoint_interval": 256,
            }
        },
        "env_settings": {"env_id": "CartPole-v1", "num_envs": 2, "seed": 1},
        "checkpoint_settings": {
            "run_id": "run",
            "results_dir": str(tmp_path / "results"),
            **checkpoint_settings,
        },
        "writers": {"csv": {}},
    }


def torchrun_start(monkeypatch: pytest.MonkeyPatch, run_id: str, restart: int) -> None:
    """What torchrun sets in a worker's environment about its elastic run (no ``WORLD_SIZE``:
    one process, no process group)."""
    monkeypatch.setenv("TORCHELASTIC_RUN_ID", run_id)
    monkeypatch.setenv("TORCHELASTIC_RESTART_COUNT", str(restart))
    monkeypatch.setenv("TORCHELASTIC_MAX_RESTARTS", "3")


def test_a_start_of_the_same_elastic_run_resumes_even_with_force(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    torchrun_start(monkeypatch, "job-1", 0)
    learn(tiny(tmp_path, 512))
    run = tmp_path / "results" / "run"
    record = json.loads((run / "run_logs" / RECORD).read_text())
    assert record == {"torchelastic_run_id": "job-1", "restart_count": 0, "world_size": 1}
    torchrun_start(monkeypatch, "job-1", 1)
    with caplog.at_level(logging.INFO, logger="evtrain"):
        result = learn(tiny(tmp_path, 768, force=True))
    assert result.steps == {"CartPole": 768}
    said = [r.getMessage() for r in caplog.records if r.getMessage().startswith("torchrun")]
    assert said == [
        f"torchrun restarted the workers (restart 1 of run job-1; 1 rank): resuming from step "
        f"512 of {run}"
    ]
    # --force removed nothing: the curves go on.
    assert csv_steps(run / "CartPole" / "progress.csv") == list(range(128, 769, 128))
    assert tensorboard_steps(run / "CartPole", REWARD) == list(range(128, 769, 128))


def test_a_membership_change_resumes_and_says_the_world_size_changed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    torchrun_start(monkeypatch, "job-1", 0)
    learn(tiny(tmp_path, 256))
    run = tmp_path / "results" / "run"
    # As a group of 2 would have left it; a node left, torchrun started 1 rank, count unchanged.
    record = {"torchelastic_run_id": "job-1", "restart_count": 0, "world_size": 2}
    (run / "run_logs" / RECORD).write_text(json.dumps(record))
    with caplog.at_level(logging.INFO, logger="evtrain"):
        result = learn(tiny(tmp_path, 512))
    assert result.steps == {"CartPole": 512}
    assert (
        f"torchrun restarted the workers (a membership change of run job-1; 1 rank, 2 before): "
        f"resuming from step 256 of {run}"
    ) in [r.getMessage() for r in caplog.records]


def test_a_new_elastic_run_is_refused_the_folder_of_another(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A fresh ``torchrun --standalone`` draws a new run id: an existing run is refused
    without ``--resume`` or ``--force``, as outside torchrun."""
    torchrun_start(monkeypatch, "job-1", 0)
    learn(tiny(tmp_path, 256))
    torchrun_start(monkeypatch, "job-2", 0)
    with pytest.raises(RunFolderError, match=r"run 'run' already exists in .* Use --resume"):
        learn(tiny(tmp_path, 512))


def test_without_a_rendezvous_id_a_restart_does_not_resume(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """``none``, torchrun's id when given no ``--rdzv-id``, is every such job's: it cannot
    say that a folder is this job's."""
    torchrun_start(monkeypatch, "none", 0)
    with caplog.at_level(logging.WARNING, logger="evtrain"):
        learn(tiny(tmp_path, 256))
    assert [r.getMessage() for r in caplog.records if "--rdzv-id" in r.getMessage()] == [
        "torchrun was given no --rdzv-id: a restart cannot tell this job's run folder from an "
        f"earlier job's, so it will not resume {tmp_path / 'results' / 'run'} by itself; give "
        "each job its own --rdzv-id (docs/distributed.md, Elastic restarts)"
    ]
    torchrun_start(monkeypatch, "none", 1)
    with pytest.raises(RunFolderError, match="already exists"):
        learn(tiny(tmp_path, 512))


# -- torch's shared rendezvous store -------------------------------------------------------------


def worker_of_one(monkeypatch: pytest.MonkeyPatch, port: int, restart: int) -> None:
    """A one-rank worker as torchrun starts it, with the agent's store on ``port`` shared."""
    for name, value in {
        "RANK": "0",
        "LOCAL_RANK": "0",
        "WORLD_SIZE": "1",
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(port),
        "TORCHELASTIC_USE_AGENT_STORE": "True",
        "TORCHELASTIC_RUN_ID": "job-1",
        "TORCHELASTIC_RESTART_COUNT": str(restart),
        "TORCHELASTIC_MAX_RESTARTS": "1",
    }.items():
        monkeypatch.setenv(name, value)


def test_a_first_start_with_restarts_warns_of_the_shared_store(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    from torch._C._distributed_c10d import TCPStore

    store = TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False)  # the agent's
    worker_of_one(monkeypatch, store.port, restart=0)
    options, _ = load_options(tiny(tmp_path, 256))
    initializer = TorchInitializer()
    with caplog.at_level(logging.WARNING, logger="evtrain"):
        initializer.load(options)
    initializer.teardown()
    assert [r.getMessage() for r in caplog.records if "TCPStore" in r.getMessage()] == [
        SHARED_STORE
    ]
    assert "TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1" in SHARED_STORE


def test_a_restart_that_cannot_connect_names_the_shared_store(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    worker_of_one(monkeypatch, free_port(), restart=1)  # the store is gone: nobody listens
    options, _ = load_options({**tiny(tmp_path, 256), "torch_settings": {"distributed_timeout": 1}})
    with caplog.at_level(logging.ERROR, logger="evtrain"), pytest.raises(RuntimeError):
        TorchInitializer().load(options)
    said = [r.getMessage() for r in caplog.records if "TCPStore" in r.getMessage()]
    assert said == [f"Rank 0: {SHARED_STORE}"]


def test_a_new_job_that_reuses_the_rendezvous_id_resumes_the_old_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The caveat docs/distributed.md names: a fixed ``--rdzv-id`` cannot tell a new job from
    a restart; the old run, finished, ends at once with a warning."""
    torchrun_start(monkeypatch, "nightly", 0)
    learn(tiny(tmp_path, 256))
    with caplog.at_level(logging.WARNING, logger="evtrain"):
        result = learn(tiny(tmp_path, 256))
    assert result.steps == {"CartPole": 256}
    assert (
        "CartPole: run run already reached max_steps 256 (at step 256); raise "
        "behaviors.CartPole.max_steps to continue"
    ) in [r.getMessage() for r in caplog.records]
