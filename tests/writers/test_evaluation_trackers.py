"""What the trackers make of evaluations, their videos, the best model and a stopped run: a
real MLflow server (its artifact store read back) and wandb offline (its run files read back)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from evtrain import (
    ArtifactEvent,
    Bus,
    EvaluationEvent,
    ExportEvent,
    RunFinished,
    RunStarted,
    RunStatus,
    SaveEvent,
    StatsEvent,
    StatsSummary,
    signals,
)
from evtrain.evaluation.video import VideoSettings, media_type_of, write_video
from tests.writers.mlflow_server import MlflowServer

REASON = "Evaluation/Mean Return reached 25.0 >= 20.0 at step 1000"


def emit_a_stopped_run(bus: Bus, folder: Path) -> Path:
    """A run's events: training at 2000, then the evaluation of step 1000 with its video, the
    best model, and the end of a run a subscriber stopped.  Returns the video."""
    frames = [np.full((30, 40, 3), (0, 60 * i, 0), np.uint8) for i in range(3)]
    video = write_video(frames, folder / "videos" / "step-1000-episode-0", VideoSettings())
    reward = {"Environment/Cumulative Reward": StatsSummary(full_dist=[1.0])}
    bus.emit(signals.run_started, RunStarted(run_id="run", rank=0))
    bus.emit(signals.stats, StatsEvent(category="CartPole", step=2000, values=reward))
    evaluation = EvaluationEvent(
        category="CartPole", step=1000, returns=(20.0, 30.0), lengths=(20, 30)
    )
    bus.emit(signals.evaluation, evaluation)
    artifact = ArtifactEvent(
        category="CartPole", step=1000, path=video, kind="video", media_type=media_type_of(video)
    )
    bus.emit(signals.artifact, artifact)
    best = folder / "CartPole-best.pt"
    best.write_bytes(b"checkpoint")
    bus.emit(signals.save, SaveEvent(category="CartPole", step=1000, path=best, best=True))
    onnx = folder / "CartPole-best.onnx"
    onnx.write_bytes(b"onnx")
    bus.emit(signals.export, ExportEvent(category="CartPole", step=1000, path=onnx, best=True))
    finished = RunFinished(run_id="run", status=RunStatus.STOPPED, reason=REASON)
    bus.emit(signals.run_finished, finished)
    return video


def test_mlflow_logs_the_evaluation_uploads_its_video_and_keeps_the_stop_reason(
    mlflow_server: MlflowServer, tmp_path: Path
) -> None:
    mlflow = pytest.importorskip("mlflow")
    from evtrain_writers.mlflow_writer import MlflowOptions, MlflowWriter

    options = MlflowOptions(
        tracking_uri=mlflow_server.uri,
        experiment="evaluation",
        upload_videos=True,
        upload_artifacts=True,
    )
    writer = MlflowWriter(options, run_id="run", run_logs=tmp_path / "run_logs")
    with Bus(on_error="raise") as bus:
        bus.add_writer(writer)
        video = emit_a_stopped_run(bus, tmp_path)

    client = mlflow.MlflowClient(mlflow_server.uri)
    run = client.get_run(writer.run_id or "")
    assert run.info.status == "FINISHED"
    tags = run.data.tags
    assert (tags["evtrain.status"], tags["evtrain.stop_reason"]) == ("stopped", REASON)
    assert (tags["CartPole/video"], tags["CartPole/video_step"]) == (str(video), "1000")
    assert tags["CartPole/best_checkpoint"] == str(tmp_path / "CartPole-best.pt")
    assert tags["CartPole/best_onnx"] == str(tmp_path / "CartPole-best.onnx")
    history = client.get_metric_history(run.info.run_id, "CartPole/Evaluation/Mean Return")
    assert [(m.step, m.value) for m in history] == [(1000, 25.0)]
    [uploaded] = client.list_artifacts(run.info.run_id, "CartPole/videos")
    assert uploaded.path == f"CartPole/videos/{video.name}"
    copy = client.download_artifacts(run.info.run_id, uploaded.path, str(tmp_path / "down"))
    assert Path(copy).read_bytes() == video.read_bytes()
    best = client.list_artifacts(run.info.run_id, "CartPole/best")
    assert sorted(a.path for a in best) == [
        "CartPole/best/CartPole-best.onnx",
        "CartPole/best/CartPole-best.pt",
    ]


def test_wandb_logs_the_evaluation_against_its_own_step_with_its_video(tmp_path: Path) -> None:
    pytest.importorskip("wandb")
    from evtrain_writers.wandb_writer import WandbOptions, WandbWriter
    from tests.writers.wandb_files import history

    options = WandbOptions(mode="offline", project="tests", upload_videos=True)
    writer = WandbWriter(options, run_id="run", run_folder=tmp_path, run_logs=tmp_path / "run_logs")
    with Bus(on_error="raise") as bus:
        bus.add_writer(writer)
        video = emit_a_stopped_run(bus, tmp_path)

    rows = history(tmp_path)
    assert [int(row["_step"]) for row in rows] == [2000]  # wandb's step only grows: one row
    [row] = rows
    assert json.loads(row["CartPole/Evaluation/Mean Return"]) == 25.0
    assert json.loads(row["CartPole/Evaluation/step"]) == 1000  # the x-axis of Evaluation/*
    video_key = "CartPole/Evaluation/Video"
    assert json.loads(row[f"{video_key}/_type"]) == "video-file"
    (media,) = tmp_path.glob(f"wandb/offline-run-*/files/{json.loads(row[f'{video_key}/path'])}")
    assert (media.suffix, media.read_bytes()) == (".gif", video.read_bytes())
    summary, axes, exit_code = summary_updates(tmp_path)
    assert axes == {"CartPole/Evaluation/*": "CartPole/Evaluation/step"}
    assert exit_code == 0
    assert (summary["evtrain.status"], summary["evtrain.stop_reason"]) == ("stopped", REASON)
    assert summary["CartPole/video"] == str(video)
    assert summary["CartPole/best_checkpoint"] == str(tmp_path / "CartPole-best.pt")


def summary_updates(run_folder: Path) -> tuple[dict[str, Any], dict[str, str], int]:
    """What the offline run's log records: the summary (the last value of each key), the
    x-axis of each ``define_metric`` glob, and the exit code."""
    from wandb.proto import wandb_internal_pb2

    from tests.writers.wandb_files import records

    (log,) = run_folder.glob("wandb/offline-run-*/run-*.wandb")
    summary: dict[str, Any] = {}
    axes: dict[str, str] = {}
    exit_code = -1
    for data in records(log):
        record = wandb_internal_pb2.Record()  # type: ignore[attr-defined]
        record.ParseFromString(data)
        kind = record.WhichOneof("record_type")
        if kind == "summary":
            for item in record.summary.update:
                summary[item.key or "/".join(item.nested_key)] = json.loads(item.value_json)
        elif kind == "metric" and record.metric.glob_name:
            axes[record.metric.glob_name] = record.metric.step_metric
        elif kind == "exit":
            exit_code = record.exit.exit_code
    return summary, axes, exit_code
