"""Tracker delivery against a real ``mlflow server`` on 127.0.0.1: recovery while the run goes
on, misconfiguration at start, a server down for the whole run, a rejected key dead-lettered.
"""

from __future__ import annotations

import json
import signal
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from evtrain import Bus, StatsEvent, StatsSummary, learn, signals
from evtrain.bus import journal_backlog
from evtrain.events.stats import StatsAggregationMethod
from tests.helpers import config, run_config, sync
from tests.writers.mlflow_server import MlflowServer

pytest.importorskip("mlflow")

from mlflow import MlflowClient

from evtrain_writers.mlflow_writer import MlflowOptions, MlflowWriter

WRITER = "evtrain_writers.mlflow_writer.MlflowWriter"


def tracked(tmp_path: Path, uri: str, experiment: str, **behavior: Any) -> dict[str, Any]:
    options = config(tmp_path, summary_freq=128, **behavior)
    options["writers"] = {
        "mlflow": {"tracking_uri": uri, "experiment": experiment, "request_timeout": 1.0}
    }
    options["bus"] = {"retry_backoff_s": 0.2, "drain_timeout": 600}
    return options


def only_run(uri: str, experiment: str) -> Any:
    client = MlflowClient(uri)
    found = client.get_experiment_by_name(experiment)
    assert found is not None
    (run,) = client.search_runs([found.experiment_id])
    return run


def points(uri: str, run_id: str) -> Counter[tuple[str, int, int]]:
    """``(key, step, timestamp ms)`` of every stored point, counted."""
    client = MlflowClient(uri)
    return Counter(
        (key, m.step, m.timestamp)
        for key in client.get_run(run_id).data.metrics
        for m in client.get_metric_history(run_id, key)
    )


def test_a_malformed_tracking_uri_stops_the_run_before_its_first_step(tmp_path: Path) -> None:
    options = tracked(tmp_path, "htp:/x", "bad")
    result = run_config(tmp_path, options)
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith(
        "evtrain: error: writers.mlflow.tracking_uri: 'htp:/x' is not a URI MLflow can use ("
    )
    assert not (tmp_path / "results" / "run" / "CartPole").exists()  # no step was taken


def test_a_key_mlflow_rejects_is_dead_lettered_and_every_other_point_lands(
    mlflow_server: MlflowServer, tmp_path: Path
) -> None:
    run_logs = tmp_path / "run_logs"
    writer = MlflowWriter(
        MlflowOptions(tracking_uri=mlflow_server.uri, experiment="dead-letter"),
        run_id="dl",
        run_logs=run_logs,
    )
    long_key = "k" * 300
    sent = []
    with Bus(journal_dir=run_logs / "journal") as bus:
        bus.add_writer(writer)
        for step in range(1, 6):
            keys = ["reward", long_key] if step == 3 else ["reward"]
            values = {
                key: StatsSummary(
                    full_dist=[float(step)], aggregation_method=StatsAggregationMethod.AVERAGE
                )
                for key in keys
            }
            event = StatsEvent(category="B", step=step, values=values)
            sent.append(event)
            bus.emit(signals.stats, event)
        bus.flush(timeout=60)
        metrics = bus.metrics()[WRITER]
        report = bus.close(timeout=60)
    assert (metrics.dead_lettered, metrics.journaled, metrics.dropped) == (1, 0, 0)
    assert report.dead_lettered == {WRITER: 1}
    run = only_run(mlflow_server.uri, "dead-letter")
    assert points(mlflow_server.uri, run.info.run_id) == Counter(
        ("B/reward", e.step, int(e.time * 1000)) for e in sent
    )
    (record,) = [
        json.loads(line)
        for line in (run_logs / "dead_letter" / f"{WRITER}.jsonl").read_text().splitlines()
    ]
    assert (record["signal"], record["keys"], record["event"]["step"]) == (
        "stats",
        [f"B/{long_key}"],
        3,
    )
    assert record["reason"] == f"metric key 'B/{long_key}' is longer than MLflow's 250"


def test_a_server_killed_and_restarted_mid_run_misses_nothing_at_exit_without_sync(
    mlflow_server: MlflowServer, tmp_path: Path
) -> None:
    max_steps = 2048  # 16 summaries: the outage from the 4th, the tracker back by the 12th
    options = tracked(tmp_path, mlflow_server.uri, "restart", max_steps=max_steps)
    sent: list[StatsEvent] = []
    back = threading.Event()
    killed = threading.Event()

    def outage(bus: Bus) -> None:
        mlflow_server.kill()
        killed.set()
        deadline = time.monotonic() + 60
        while bus.metrics()[WRITER].failed == 0 and time.monotonic() < deadline:
            time.sleep(0.05)  # the writer felt it; training goes on meanwhile
        mlflow_server.start()
        back.set()

    with Bus() as bus:

        def watch(event: StatsEvent) -> None:
            sent.append(event)
            if event.step >= max_steps // 4 and not killed.is_set():
                killed.set()
                threading.Thread(target=outage, args=(bus,), daemon=True).start()
            if event.step >= max_steps * 3 // 4:
                # The tracker is back, and caught up, before training ends (a restart takes
                # a while on a loaded machine): this subscriber holds the trainer meanwhile.
                back.wait(120)
                deadline = time.monotonic() + 120
                while bus.metrics()[WRITER].journaled and time.monotonic() < deadline:
                    time.sleep(0.05)

        bus.connect(signals.stats, watch, name="sent", overflow="block", block_timeout=300)
        result = learn(options, bus)
        metrics = bus.metrics()[WRITER]
    assert sum(result.steps.values()) == max_steps
    assert back.is_set()
    assert metrics.failed > 0 and metrics.journaled == 0 and metrics.dropped == 0
    run = only_run(mlflow_server.uri, "restart")
    assert run.info.status == "FINISHED"
    stored = points(mlflow_server.uri, run.info.run_id)
    expected = Counter(
        (f"{e.category}/{key}", e.step, int(e.time * 1000)) for e in sent for key in e.values
    )
    assert {k: stored[k] for k in expected} == dict.fromkeys(expected, 1)  # once, own time
    assert all(n == 1 for n in stored.values())  # and nothing twice


def test_a_server_down_for_the_whole_run_is_given_up_at_exit_and_sync_delivers_with_event_times(
    mlflow_server: MlflowServer, tmp_path: Path
) -> None:
    mlflow_server.kill()  # nothing listens on its port until it starts again, below
    options = tracked(tmp_path, mlflow_server.uri, "down", max_steps=1024)
    # drain_timeout is 600 s: the run returns (within run_config's 120 s) only if it gives up.
    result = run_config(tmp_path, options)
    assert result.returncode == 0, result.stderr
    lines = result.stderr.strip().splitlines()
    assert "Traceback" not in result.stderr
    assert "training continues" not in result.stderr
    kept = journal_backlog(tmp_path / "results" / "run" / "run_logs" / "journal", WRITER)
    assert kept > 0
    assert result.stdout.strip().splitlines()[-1] == (
        f"{kept:,} tracker events wait in the journal of {WRITER}; deliver them once the "
        f"tracker answers: evtrain sync run --results-dir {tmp_path / 'results'}"
    )
    assert sum(f"Subscriber {WRITER!r} is down since" in line for line in lines) == 1
    assert "(its sink is down)" in result.stderr
    # A sync while the server is still down gives up in seconds too (its --timeout is 300 s,
    # run_config's limit 120 s), keeps the journal and says so, with nothing about training.
    early = sync("run", "--results-dir", str(tmp_path / "results"), cwd=tmp_path)
    assert early.returncode == 1, early.stderr
    assert early.stdout.splitlines()[-1] == (
        "Some events are still journaled; run evtrain sync run again once the tracker answers."
    )
    assert "training" not in early.stderr and "Traceback" not in early.stderr
    started = time.time()
    mlflow_server.start()
    synced = sync("run", "--results-dir", str(tmp_path / "results"), cwd=tmp_path)
    assert synced.returncode == 0, synced.stderr
    assert "training continues" not in synced.stderr
    run = only_run(mlflow_server.uri, "down")
    assert run.info.status == "FINISHED"
    stored = points(mlflow_server.uri, run.info.run_id)
    reward = sorted(
        (step, at) for (key, step, at) in stored if key == "CartPole/Environment/Cumulative Reward"
    )
    assert [step for step, _ in reward] == list(range(128, 1025, 128))
    # Each point carries the time it was summarised: while the server was down.
    assert all(at < started * 1000 for _, at in reward)
    assert [at for _, at in reward] == sorted(at for _, at in reward)
    assert all(n == 1 for n in stored.values())


def test_wandb_rows_carry_the_events_own_time(tmp_path: Path) -> None:
    pytest.importorskip("wandb")
    from evtrain import RunFinished, RunStatus
    from evtrain_writers.wandb_writer import WandbOptions, WandbWriter
    from tests.writers.wandb_files import history

    writer = WandbWriter(
        WandbOptions(mode="offline", project="tests"),
        run_id="w",
        run_folder=tmp_path,
        run_logs=tmp_path / "run_logs",
    )
    summarised = {step: 1_700_000_000.0 + step for step in (1, 2, 3)}  # long before delivery
    with Bus(journal_dir=tmp_path / "run_logs" / "journal") as bus:
        bus.add_writer(writer)
        for step, at in summarised.items():
            values = {"r": StatsSummary(full_dist=[float(step)])}
            bus.emit(signals.stats, StatsEvent(category="B", step=step, values=values, time=at))
        bus.emit(signals.run_finished, RunFinished(run_id="w", status=RunStatus.COMPLETED))
    rows = history(tmp_path)
    assert [(int(r["_step"]), float(r["_timestamp"])) for r in rows] == list(summarised.items())


def test_disconnecting_a_tracker_that_is_down_gives_up_and_keeps_its_journal(
    tmp_path: Path,
) -> None:
    from evtrain import BusTimeoutError

    def down(event: StatsEvent) -> None:
        raise ConnectionRefusedError("nobody listens")

    with Bus(journal_dir=tmp_path, retry_backoff_s=0.05) as bus:
        handle = bus.connect(signals.stats, down, overflow="spool", name="tracker")
        for step in range(5):
            bus.emit(signals.stats, StatsEvent(category="B", step=step, values={}))
        # 60 s allowed: it returns once the sink made no progress for 2 s
        with pytest.raises(BusTimeoutError) as error:
            handle.disconnect(timeout=60)
    assert str(error.value) == (
        "subscriber 'tracker' gave up: its sink is down; 5 events are kept in its journal"
    )
    assert journal_backlog(tmp_path, "tracker") == 5


def test_a_hung_mlflow_request_is_reported_as_a_stall_before_it_times_out(
    mlflow_server: MlflowServer, tmp_path: Path
) -> None:
    from evtrain import SubscriberStalled

    writer = MlflowWriter(
        MlflowOptions(tracking_uri=mlflow_server.uri, experiment="hung", request_timeout=2.0),
        run_id="hung",
        run_logs=tmp_path / "run_logs",
    )
    stalled: list[SubscriberStalled] = []
    seen = threading.Event()

    def on_stall(event: SubscriberStalled) -> None:
        stalled.append(event)
        seen.set()

    with Bus(journal_dir=tmp_path / "journal", retry_backoff_s=0.1) as bus:
        bus.connect(signals.subscriber_stalled, on_stall, name="stalls")
        bus.add_writer(writer)
        mlflow_server.signal(signal.SIGSTOP)
        try:
            values = {"r": StatsSummary(full_dist=[1.0])}
            bus.emit(signals.stats, StatsEvent(category="B", step=1, values=values))
            assert seen.wait(60)
        finally:
            mlflow_server.signal(signal.SIGCONT)
        bus.flush(timeout=60)
    assert [(s.subscriber, s.signal, s.stall_timeout) for s in stalled] == [(WRITER, "stats", 1.0)]
