"""MlflowWriter against a real MLflow: the session's tracking server (sqlite backend, on
127.0.0.1; ``tests/conftest.py``) for real CLI runs, and a local ``sqlite:`` store for the
mapping, fed through a real bus.  Everything is read back with ``MlflowClient``."""

from __future__ import annotations

import os
import socket
import sys
import threading
import time
from collections import Counter
from pathlib import Path

import pytest

from evtrain import (
    Bus,
    ExportEvent,
    PropertyEvent,
    RunFinished,
    RunStarted,
    RunStatus,
    SaveEvent,
    StatsAggregationMethod,
    StatsEvent,
    StatsPropertyType,
    StatsSummary,
    signals,
)
from tests.helpers import config, run_config
from tests.writers.mlflow_server import MlflowServer

mlflow = pytest.importorskip("mlflow")

from mlflow import MlflowClient  # noqa: E402 - only once mlflow is known to be there

from evtrain_writers._mlflow_requests import _limits as limits  # noqa: E402
from evtrain_writers.mlflow_writer import (  # noqa: E402
    MAX_PARAM_VALUE,
    MlflowOptions,
    MlflowWriter,
    request_limits,
)

MLFLOW = Path(sys.executable).parent / "mlflow"
REWARD = "CartPole/Environment/Cumulative Reward"


def history(client: MlflowClient, run_id: str) -> dict[str, Counter[int]]:
    """How often each step was logged, per metric of the run."""
    run = client.get_run(run_id)
    return {
        key: Counter(m.step for m in client.get_metric_history(run_id, key))
        for key in run.data.metrics
    }


def test_a_cli_run_and_its_resume_log_one_mlflow_run(
    mlflow_server: MlflowServer, tmp_path: Path
) -> None:
    server = mlflow_server.uri
    options = config(tmp_path)
    options["writers"] = {"mlflow": {"tracking_uri": server, "experiment": "cli"}}
    result = run_config(tmp_path, options)
    assert result.returncode == 0, result.stderr
    client = MlflowClient(server)
    experiment = client.get_experiment_by_name("cli")
    assert experiment is not None
    (run,) = client.search_runs([experiment.experiment_id])
    run_id = run.info.run_id
    assert run.info.status == "FINISHED" and run.info.run_name == "run"
    record = (tmp_path / "results" / "run" / "run_logs" / "mlflow.json").read_text()
    assert run_id in record
    steps = history(client, run_id)
    assert steps[REWARD] == Counter({256: 1, 512: 1, 768: 1, 1024: 1})
    assert {
        f"{REWARD}/std",
        f"{REWARD}/min",
        f"{REWARD}/max",
        "CartPole/Losses/Policy Loss",
    } <= set(steps)
    assert all(count == 1 for counts in steps.values() for count in counts.values())
    assert run.data.params["CartPole/hyperparameters/batch_size"] == "64"
    assert run.data.params["CartPole/trainer_type"] == "ppo"
    assert run.data.tags["CartPole/onnx"] == str(tmp_path / "results" / "run" / "CartPole.onnx")
    assert run.data.tags["CartPole/checkpoint"].endswith("CartPole-1024.pt")

    options["behaviors"]["CartPole"]["max_steps"] = 1536
    result = run_config(tmp_path, options, "--resume")
    assert result.returncode == 0, result.stderr
    (again,) = client.search_runs([run.info.experiment_id])
    assert again.info.run_id == run_id and again.info.status == "FINISHED"
    steps = history(client, run_id)
    assert steps[REWARD] == Counter({s: 1 for s in (256, 512, 768, 1024, 1280, 1536)})
    assert all(count == 1 for counts in steps.values() for count in counts.values())
    assert again.data.params["CartPole/max_steps"] == "1024"  # params cannot change: kept


def summary(
    *values: float, method: StatsAggregationMethod = StatsAggregationMethod.AVERAGE
) -> StatsSummary:
    return StatsSummary(full_dist=values, aggregation_method=method)


def test_the_mapping_on_a_local_sqlite_store(tmp_path: Path) -> None:
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    writer = MlflowWriter(
        MlflowOptions(tracking_uri=uri, tags={"team": "rl"}, hidden_keys=["Step"]),
        run_id="local",
        run_logs=tmp_path / "run_logs",
    )
    histogram = StatsAggregationMethod.HISTOGRAM
    first = StatsEvent(
        category="B",
        step=10,
        values={"r": summary(1, 2, 6, method=histogram), "Step": summary(10), "e": summary()},
    )
    second = StatsEvent(category="B", step=20, values={"loss": summary(0.5)})
    with Bus(on_error="raise") as bus:
        bus.add_writer(writer)
        # a replayed journal may deliver statistics before run_started; every event twice,
        # as a retry or a replay would
        for _ in range(2):
            bus.emit(signals.stats, first)
        bus.emit(signals.run_started, RunStarted(run_id="local", rank=0))
        long = "x" * (MAX_PARAM_VALUE + 10)
        hyperparameters = {"hyperparameters": {"lr": 0.1, "note": long}, "max_steps": 5}
        for _ in range(2):
            bus.emit(
                signals.hyperparameters,
                PropertyEvent(
                    category="B",
                    property_type=StatsPropertyType.HYPERPARAMETERS,
                    value=hyperparameters,
                ),
            )
            bus.emit(signals.stats, second)
        bus.emit(signals.save, SaveEvent(category="B", step=20, path=tmp_path / "B-20.pt"))
        bus.emit(signals.export, ExportEvent(category="B", step=20, path=tmp_path / "B.onnx"))
        bus.emit(signals.run_finished, RunFinished(run_id="local", status=RunStatus.INTERRUPTED))
    client = MlflowClient(uri)
    run = client.get_run(writer.run_id or "")
    assert run.info.status == "KILLED"
    assert run.data.tags["team"] == "rl" and run.data.tags["evtrain.run_id"] == "local"
    assert {k: dict(c) for k, c in history(client, run.info.run_id).items()} == {
        "B/r": {10: 1},
        "B/r/std": {10: 1},
        "B/r/min": {10: 1},
        "B/r/max": {10: 1},
        "B/e": {10: 1},
        "B/loss": {20: 1},
    }
    values = {m.key: m.value for m in client.get_metric_history(run.info.run_id, "B/r")}
    assert values == {"B/r": 3.0}
    assert client.get_metric_history(run.info.run_id, "B/r/max")[0].value == 6.0
    assert run.data.params == {
        "B/hyperparameters/lr": "0.1",
        "B/hyperparameters/note": "x" * MAX_PARAM_VALUE,
        "B/max_steps": "5",
    }
    assert run.data.tags["B/checkpoint"] == str(tmp_path / "B-20.pt")
    assert run.data.tags["B/onnx"] == str(tmp_path / "B.onnx")
    assert run.data.tags["B/onnx_step"] == "20"


def test_requests_fail_fast_and_leave_other_mlflow_calls_alone(tmp_path: Path) -> None:
    """A server that accepts connections and never answers (as a hung one does)."""
    with socket.socket() as hung:
        hung.bind(("127.0.0.1", 0))
        hung.listen(8)
        uri = f"http://127.0.0.1:{hung.getsockname()[1]}"
        writer = MlflowWriter(
            MlflowOptions(tracking_uri=uri, request_timeout=0.5), run_id="r", run_logs=tmp_path
        )
        started = time.monotonic()
        with pytest.raises(mlflow.exceptions.MlflowException):
            writer.on_run_started(RunStarted(run_id="r", rank=0))
        assert time.monotonic() - started < 5  # mlflow's defaults: minutes
        assert writer.run_id is None
    assert "MLFLOW_HTTP_REQUEST_TIMEOUT" not in os.environ

    # the limits apply to the writer's own calls only: not outside them, nor on other threads
    assert request_limits() == {}
    inside: list[dict[str, object]] = []
    with limits(0.5, 1):
        inside.append(request_limits())
        thread = threading.Thread(target=lambda: inside.append(request_limits()))
        thread.start()
        thread.join()
    assert inside[0]["timeout"] == 0.5 and inside[0]["max_retries"] == 1
    assert inside[1:] == [{}]
    assert request_limits() == {}
