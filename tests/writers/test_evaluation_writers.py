"""What the default writers make of ``evaluation`` and ``artifact`` events, delivered by a real
bus: TensorBoard's text naming a video read back with TensorBoard's EventAccumulator, the console
line, the CSV that gains the ``Evaluation/...`` columns mid-run, the gauges, Prometheus."""

from __future__ import annotations

import csv
import io
import json
import logging
from pathlib import Path

import numpy as np
import pytest
from PIL import Image
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from evtrain import (
    ArtifactEvent,
    Bus,
    EvaluationEvent,
    RunFinished,
    RunStatus,
    StatsEvent,
    StatsSummary,
    signals,
)
from evtrain.evaluation.video import VideoSettings, media_type_of, write_video
from evtrain_writers import ConsoleWriter, TensorboardWriter
from evtrain_writers.csv_file import CsvWriter
from evtrain_writers.gauge import GaugeWriter
from evtrain_writers.jsonl import JsonlWriter
from evtrain_writers.prometheus_writer import PrometheusOptions, PrometheusWriter

EVALUATION = EvaluationEvent(
    category="CartPole", step=1000, returns=(10.0, 20.0, 30.0, 40.0), lengths=(10, 20, 30, 40)
)
"""Mean return 25, std 11.180 (population), mean length 25."""


def training(step: int, reward: float) -> StatsEvent:
    values = {"Environment/Cumulative Reward": StatsSummary(full_dist=[reward])}
    return StatsEvent(category="CartPole", step=step, values=values)


def video(tmp_path: Path, video_format: str = "gif") -> ArtifactEvent:
    """A real evaluation video of 3 frames of 40x30, as the evaluator emits it."""
    frames = [np.full((30, 40, 3), (80 * i, 0, 0), np.uint8) for i in range(3)]
    settings = VideoSettings(format=video_format)  # type: ignore[arg-type]
    path = write_video(frames, tmp_path / "videos" / "step-1000-episode-0", settings)
    return ArtifactEvent(
        category="CartPole", step=1000, path=path, kind="video", media_type=media_type_of(path)
    )


def test_tensorboard_names_a_gif_video_at_its_step_without_copying_it(tmp_path: Path) -> None:
    """The video is stored once, as its file: the event file names it, and holds none of its
    bytes (it grew by every video, without bound, when it held them)."""
    artifact = video(tmp_path)
    with Bus() as bus:
        bus.add_writer(TensorboardWriter(tmp_path / "tb"))
        bus.emit(signals.stats, training(2000, 1.0))
        bus.emit(signals.evaluation, EVALUATION)
        bus.emit(signals.artifact, artifact)

    accumulator = EventAccumulator(str(tmp_path / "tb" / "CartPole"), size_guidance={"images": 0})
    accumulator.Reload()
    assert accumulator.Tags()["images"] == []
    [text] = accumulator.Tensors("Evaluation/Video")
    assert text.step == 1000
    assert text.tensor_proto.string_val == [f"`{artifact.path}` (GIF: open the file)".encode()]
    [event_file] = (tmp_path / "tb" / "CartPole").glob("events.out.tfevents.*")
    gif = artifact.path.read_bytes()
    assert gif[-64:] not in event_file.read_bytes()
    with Image.open(artifact.path) as image:
        assert (image.format, image.size, image.n_frames) == ("GIF", (40, 30), 3)
    # the evaluation's stats are scalars of its own step, after the trainer's later one
    assert [(e.step, e.value) for e in accumulator.Scalars("Evaluation/Mean Return")] == [
        (1000, 25.0)
    ]
    assert "Evaluation/Mean Return_hist" in accumulator.Tags()["histograms"]
    assert [e.value for e in accumulator.Scalars("Evaluation/Mean Episode Length")] == [25.0]


def test_tensorboard_names_an_mp4_in_a_text_summary(tmp_path: Path) -> None:
    artifact = video(tmp_path, "mp4")
    writer = TensorboardWriter(tmp_path / "tb")
    writer.on_artifact(artifact)
    writer.close()

    accumulator = EventAccumulator(str(tmp_path / "tb" / "CartPole"))
    accumulator.Reload()
    [text] = accumulator.Tensors("Evaluation/Video")
    assert text.step == 1000
    assert text.tensor_proto.string_val == [
        f"`{artifact.path}` (MP4: TensorBoard cannot play it; open the file)".encode()
    ]


def test_the_console_logs_one_line_per_evaluation_and_where_its_video_is(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    caplog.set_level(logging.INFO, logger="evtrain")
    artifact = video(tmp_path)
    stochastic = EvaluationEvent(
        category="Walker", step=5, returns=(1.0,), lengths=(7,), deterministic=False
    )
    with Bus() as bus:
        bus.add_writer(ConsoleWriter())
        bus.emit(signals.evaluation, EVALUATION)
        bus.emit(signals.evaluation, stochastic)
        bus.emit(signals.artifact, artifact)

    assert [r.getMessage() for r in caplog.records if r.name == "evtrain"] == [
        "CartPole. Step: 1000. Evaluation of 4 episodes. Mean Return: 25.000 \u00b1 11.180. "
        "Mean Episode Length: 25.0.",
        "Walker. Step: 5. Evaluation of 1 episodes (stochastic actions). Mean Return: 1.000 "
        "\u00b1 0.000. Mean Episode Length: 7.0.",
        f"CartPole. Step: 1000. Video: {artifact.path}.",
    ]


def test_csv_and_jsonl_gain_the_evaluation_keys_mid_run(tmp_path: Path) -> None:
    with Bus() as bus:
        bus.add_writer(CsvWriter(tmp_path))
        bus.add_writer(JsonlWriter(tmp_path))
        bus.emit(signals.stats, training(500, 1.0))
        bus.emit(signals.stats, training(1500, 2.0))
        bus.emit(signals.evaluation, EVALUATION)  # of step 1000, done after step 1500
        bus.emit(signals.artifact, video(tmp_path))  # neither file records artifacts
        bus.emit(signals.stats, training(2000, 3.0))

    text = (tmp_path / "CartPole" / "progress.csv").read_text()
    assert list(csv.reader(io.StringIO(text))) == [
        [
            "step",
            "Environment/Cumulative Reward",
            "Evaluation/Mean Episode Length",
            "Evaluation/Mean Return",
        ],
        ["500", "1.0", "", ""],
        ["1500", "2.0", "", ""],
        ["1000", "", "25.0", "25.0"],
        ["2000", "3.0", "", ""],
    ]
    lines = (tmp_path / "CartPole" / "stats.jsonl").read_text().splitlines()
    records = [json.loads(line) for line in lines]
    assert [r["step"] for r in records] == [500, 1500, 1000, 2000]
    assert records[2]["stats"]["Evaluation/Mean Return"]["values"] == [10.0, 20.0, 30.0, 40.0]


def test_gauges_and_prometheus_keep_the_evaluation_without_moving_the_trainers_step(
    tmp_path: Path,
) -> None:
    gauges = GaugeWriter(tmp_path)
    prometheus = PrometheusWriter(PrometheusOptions(port=0, linger=0))
    for writer in (gauges, prometheus):
        writer.write_stats_event(training(1500, 2.0))
        writer.on_evaluation(EVALUATION)
        writer.on_artifact(video(tmp_path))
    prometheus.on_run_finished(RunFinished(run_id="r", status=RunStatus.STOPPED, reason="enough"))
    gauges.close()
    prometheus.close()

    saved = json.loads((tmp_path / "timers.json").read_text())["gauges"]
    assert saved["CartPole.Evaluation.MeanReturn.mean"]["value"] == 25.0
    assert saved["CartPole.Evaluation.MeanReturn.sum"]["value"] == 100.0
    sample = prometheus.registry.get_sample_value
    labels = {"behavior": "CartPole", "key": "Evaluation/Mean Return"}
    assert sample("evtrain_stat", labels) == 25.0
    assert sample("evtrain_step", {"behavior": "CartPole"}) == 1500
    assert sample("evtrain_run_finished", {"status": "stopped"}) == 1


def test_a_run_a_subscriber_stopped_is_a_success_in_tensorboards_hparams(tmp_path: Path) -> None:
    from tensorboard.plugins.hparams import api_pb2, metadata

    from tests.writers.tensorboard_files import hparams_content, run

    run(tmp_path, "B", {"lr": 0.1}, [1.0], RunStatus.STOPPED)

    content = hparams_content(tmp_path / "B")
    end = metadata.parse_session_end_info_plugin_data(content[metadata.SESSION_END_INFO_TAG])
    assert end.status == api_pb2.STATUS_SUCCESS
