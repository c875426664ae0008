"""A real MLflow server that hangs, dies and comes back, under real PPO runs: the MLflow run
ends with every (metric, step) exactly once, and training never waited for the server.

* hung: the server is ``SIGSTOP``-ed from a third of the run to two thirds, then continued;
* killed: the server is down when the run starts, the trainer is ``kill -9``-ed mid-run, the
  server comes back on the same store, ``evtrain sync`` delivers the journal, and ``--resume``
  finishes the run.
"""

from __future__ import annotations

import signal
import subprocess
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import yaml

from evtrain import Bus, StatsEvent, learn, signals
from evtrain.bus import journal_backlog
from tests.helpers import config, isolated_python, run_config, sync
from tests.writers.mlflow_server import MlflowServer

pytest.importorskip("mlflow")

from mlflow import MlflowClient

WRITER = "evtrain_writers.mlflow_writer.MlflowWriter"
REWARD = "CartPole/Environment/Cumulative Reward"


def tracked(tmp_path: Path, uri: str, experiment: str, **behavior: Any) -> dict[str, Any]:
    """A tiny PPO run (summary every 128 steps) logging to ``uri``, failing fast."""
    options = config(tmp_path, summary_freq=128, **behavior)
    options["writers"] = {
        "mlflow": {"tracking_uri": uri, "experiment": experiment, "request_timeout": 1.0}
    }
    options["bus"] = {"stall_timeout": 0.5, "retry_backoff_s": 0.1, "retry_backoff_max_s": 0.5}
    return options


def only_run(uri: str, name: str) -> Any:
    client = MlflowClient(uri)
    experiment = client.get_experiment_by_name(name)
    assert experiment is not None
    (run,) = client.search_runs([experiment.experiment_id])
    return run


def steps_logged(uri: str, run_id: str) -> dict[str, Counter[int]]:
    client = MlflowClient(uri)
    return {
        key: Counter(m.step for m in client.get_metric_history(run_id, key))
        for key in client.get_run(run_id).data.metrics
    }


def test_a_server_hung_for_the_middle_third_loses_nothing_and_duplicates_nothing(
    mlflow_server: MlflowServer, tmp_path: Path
) -> None:
    max_steps = 2048  # 16 summaries: hung from the 4th for 2 or more, back by the 12th
    options = tracked(tmp_path, mlflow_server.uri, "outage-hung", max_steps=max_steps)
    sent: list[StatsEvent] = []
    trainer_steps: list[int] = []
    """The trainer's step when the server was stopped, and when it was continued."""
    outage_done = threading.Event()

    def felt(bus: Bus) -> bool:
        metrics = bus.metrics().get(WRITER)
        return metrics is not None and (metrics.failed > 0 or metrics.stalls > 0)

    def outage(bus: Bus) -> None:
        # Hung until the writer has felt it (a request timed out, or a call stalled) and the
        # trainer has gone on for two more summaries meanwhile.
        mlflow_server.signal(signal.SIGSTOP)
        trainer_steps.append(sent[-1].step)
        deadline = time.monotonic() + 30
        while not (felt(bus) and sent[-1].step >= trainer_steps[0] + 2 * 128):
            if time.monotonic() > deadline:
                break
            time.sleep(0.05)
        trainer_steps.append(sent[-1].step)
        mlflow_server.signal(signal.SIGCONT)
        outage_done.set()

    with Bus() as bus:

        def watch(event: StatsEvent) -> None:
            sent.append(event)
            if event.step >= max_steps // 4 and not trainer_steps and not outage_done.is_set():
                threading.Thread(target=outage, args=(bus,), daemon=True).start()
            if event.step >= max_steps * 3 // 4:
                # The server is back, and the writer caught up, before training ends: at exit a
                # tracker still down is given up within seconds (its events stay journaled).
                outage_done.wait(60)
                deadline = time.monotonic() + 120
                while bus.metrics()[WRITER].journaled and time.monotonic() < deadline:
                    time.sleep(0.05)

        bus.connect(signals.stats, watch, name="sent", block_timeout=300)
        try:
            result = learn(options, bus)
        finally:
            outage_done.wait(60)
            mlflow_server.signal(signal.SIGCONT)
        metrics = bus.metrics()
    assert sum(result.steps.values()) == max_steps
    assert len(trainer_steps) == 2
    assert trainer_steps[1] > trainer_steps[0]  # training went on while the server hung...
    tracker = metrics[WRITER]
    assert tracker.failed > 0 or tracker.stalls > 0  # ...and the writer felt the outage
    assert tracker.dropped == 0 and tracker.journaled == 0  # nothing is left behind
    run = only_run(mlflow_server.uri, "outage-hung")
    assert run.info.status == "FINISHED"
    logged = steps_logged(mlflow_server.uri, run.info.run_id)
    expected = Counter((f"{e.category}/{key}", e.step) for e in sent for key in e.values)
    got = Counter({(key, step): n for key, counts in logged.items() for step, n in counts.items()})
    assert {k: got[k] for k in expected} == dict.fromkeys(expected, 1)  # all there, once each
    assert all(n == 1 for n in got.values())


def test_kill_9_with_the_server_down_then_sync_and_resume_log_every_step_once(
    mlflow_server: MlflowServer, tmp_path: Path
) -> None:
    options = tracked(
        tmp_path, mlflow_server.uri, "outage-killed", max_steps=200_000, checkpoint_interval=512
    )
    mlflow_server.kill()  # down before the run starts
    (tmp_path / "run.yaml").write_text(yaml.safe_dump(options))
    trainer = subprocess.Popen(
        [isolated_python(), "-m", "evtrain", "learn", "run.yaml"],
        cwd=tmp_path,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    run_folder = tmp_path / "results" / "run"
    journal = run_folder / "run_logs" / "journal"
    try:
        deadline = time.monotonic() + 90
        while not (
            any(
                int(p.stem.rpartition("-")[2]) >= 1024
                for p in (run_folder / "CartPole").glob("CartPole-*.pt")
            )
            and journal_backlog(journal, WRITER) >= 10
        ):
            assert trainer.poll() is None, trainer.stderr.read() if trainer.stderr else ""
            assert time.monotonic() < deadline, "the run did not get far enough in 90 s"
            time.sleep(0.1)
    finally:
        trainer.kill()  # SIGKILL: no handler, no drain, no close
        trainer.wait(timeout=30)
        if trainer.stderr is not None:
            trainer.stderr.close()
    assert trainer.returncode == -signal.SIGKILL
    journaled = journal_backlog(journal, WRITER)
    assert journaled >= 10

    mlflow_server.start()  # the same store, the same port
    synced = sync("run", "--results-dir", str(tmp_path / "results"), cwd=tmp_path)
    assert synced.returncode == 0, synced.stderr
    assert synced.stdout.splitlines() == [
        f"{WRITER}: {journaled:,} of {journaled:,} journaled events delivered"
    ]
    assert journal_backlog(journal, WRITER) == 0
    run = only_run(mlflow_server.uri, "outage-killed")
    assert run.info.status == "KILLED"  # the run was killed: sync ends its MLflow run so
    after_sync = steps_logged(mlflow_server.uri, run.info.run_id)[REWARD]
    last = max(after_sync)
    assert after_sync == Counter(range(128, last + 1, 128))  # every step up to the kill, once

    options["behaviors"]["CartPole"]["max_steps"] = last + 512
    resumed = run_config(tmp_path, options, "--resume")
    assert resumed.returncode == 0, resumed.stderr
    again = only_run(mlflow_server.uri, "outage-killed")
    assert again.info.run_id == run.info.run_id and again.info.status == "FINISHED"
    logged = steps_logged(mlflow_server.uri, run.info.run_id)
    assert logged[REWARD] == Counter(range(128, last + 512 + 1, 128))
    assert all(n == 1 for counts in logged.values() for n in counts.values())
