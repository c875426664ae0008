from __future__ import annotations

from pathlib import Path

from evtrain_example_plugin import (
    ArtifactLog,
    JsonLinesWriter,
    connect_save_log,
    get_jsonl_writers,
)

from evtrain import (
    Bus,
    ExportEvent,
    RunOptions,
    SaveEvent,
    StatsAggregationMethod,
    StatsPropertyType,
    StatsReporter,
    signals,
)

REWARD = "Environment/Cumulative Reward"


def run_options(results_dir: Path, *, resume: bool = False) -> RunOptions:
    return RunOptions.from_dict(
        {
            "checkpoint_settings": {
                "run_id": "run1",
                "results_dir": str(results_dir),
                "resume": resume,
            }
        }
    )


def jsonl_writer(options: RunOptions) -> JsonLinesWriter:
    writers = get_jsonl_writers(options)
    assert len(writers) == 1 and isinstance(writers[0], JsonLinesWriter)
    return writers[0]


def report_two_periods(bus: Bus) -> None:
    reporter = StatsReporter(bus, "CartPole")
    reporter.add_property(StatsPropertyType.HYPERPARAMETERS, {"lr": 0.0003, "batch_size": 64})
    for value in (1.0, 2.0):
        reporter.add_stat(REWARD, value)
    reporter.set_stat("Is Training", 1.0)
    reporter.write_stats(1000)
    for value in (0.0, 1.0, 2.0, 3.0, 4.0):
        reporter.add_stat("Losses/Steps", value, StatsAggregationMethod.SUM)
    reporter.write_stats(2000)


STATS_JSONL = (
    '{"category": "CartPole", "hyperparameters": {"lr": 0.0003, "batch_size": 64}}\n'
    '{"category": "CartPole", "step": 1000, "values": {'
    '"Environment/Cumulative Reward": '
    '{"mean": 1.5, "std": 0.5, "num": 2, "sum": 3.0, "aggregated": 1.5}, '
    '"Is Training": {"mean": 1.0, "std": 0.0, "num": 1, "sum": 1.0, "aggregated": 1.0}}}\n'
    '{"category": "CartPole", "step": 2000, "values": {'
    '"Losses/Steps": {"mean": 2.0, "std": 1.4142135623730951, "num": 5, "sum": 10.0, '
    '"aggregated": 10.0}}}\n'
)


def test_registration_returns_a_rank_zero_writer_for_the_run_folder(tmp_path: Path) -> None:
    writer = jsonl_writer(run_options(tmp_path))
    assert writer.path == tmp_path / "run1" / "stats.jsonl"
    assert writer.ranks == frozenset({0})
    assert writer.append is False
    assert jsonl_writer(run_options(tmp_path, resume=True)).append is True


def test_jsonl_writer_writes_one_line_per_period_through_a_bus(tmp_path: Path) -> None:
    options = run_options(tmp_path)
    with Bus(rank=0, on_error="raise") as bus:
        bus.add_writer(jsonl_writer(options))
        report_two_periods(bus)
        bus.flush()
        # Bus.flush() flushes writers: the lines are visible while the run goes on.
        assert (tmp_path / "run1" / "stats.jsonl").read_text() == STATS_JSONL
    assert (tmp_path / "run1" / "stats.jsonl").read_text() == STATS_JSONL


def test_resumed_run_appends_and_fresh_run_replaces(tmp_path: Path) -> None:
    stats = tmp_path / "run1" / "stats.jsonl"
    stats.parent.mkdir(parents=True)
    stats.write_text("earlier run\n")
    with Bus(rank=0, on_error="raise") as bus:
        bus.add_writer(jsonl_writer(run_options(tmp_path, resume=True)))
        report_two_periods(bus)
    assert stats.read_text() == "earlier run\n" + STATS_JSONL
    with Bus(rank=0, on_error="raise") as bus:
        bus.add_writer(jsonl_writer(run_options(tmp_path)))
        report_two_periods(bus)
    assert stats.read_text() == STATS_JSONL


def test_other_property_types_are_not_written(tmp_path: Path) -> None:
    writer = jsonl_writer(run_options(tmp_path))
    writer.add_property("CartPole", StatsPropertyType.SELF_PLAY, True)
    writer.add_property("CartPole", StatsPropertyType.HYPERPARAMETERS, {"path": Path("a/b")})
    writer.close()
    assert (
        writer.path.read_text() == '{"category": "CartPole", "hyperparameters": {"path": "a/b"}}\n'
    )


def test_writer_without_events_leaves_no_file_and_closes_twice(tmp_path: Path) -> None:
    writer = jsonl_writer(run_options(tmp_path))
    writer.flush()
    writer.close()
    writer.close()
    assert not (tmp_path / "run1").exists()


def test_other_ranks_write_nothing(tmp_path: Path) -> None:
    options = run_options(tmp_path)
    with Bus(rank=1, on_error="raise") as bus:
        assert not bus.add_writer(jsonl_writer(options)).active
        connect_save_log(options, bus)
        report_two_periods(bus)
        bus.emit(signals.save, SaveEvent(category="CartPole", step=1, path=tmp_path / "c.pt"))
    assert not (tmp_path / "run1").exists()
    assert bus.metrics() == {}


def test_save_log_records_every_checkpoint_and_export(tmp_path: Path) -> None:
    options = run_options(tmp_path)
    behavior_dir = options.checkpoint_settings.write_path / "CartPole"
    with Bus(rank=0, on_error="raise") as bus:
        connect_save_log(options, bus)
        bus.emit(
            signals.save,
            SaveEvent(
                category="CartPole", step=1000, path=behavior_dir / "CartPole-1000.pt", reward=9.5
            ),
        )
        bus.emit(
            signals.export,
            ExportEvent(category="CartPole", step=1000, path=behavior_dir / "CartPole-1000.onnx"),
        )
        bus.emit(signals.save, SaveEvent(category="Walker", step=2000, path=Path("w.pt")))
    run = options.checkpoint_settings.write_path
    assert (run / "artifacts.jsonl").read_text() == (
        '{"signal": "save", "category": "CartPole", "step": 1000, '
        f'"path": "{run}/CartPole/CartPole-1000.pt", "reward": 9.5}}\n'
        '{"signal": "export", "category": "CartPole", "step": 1000, '
        f'"path": "{run}/CartPole/CartPole-1000.onnx", "format": "onnx"}}\n'
        '{"signal": "save", "category": "Walker", "step": 2000, "path": "w.pt", "reward": null}\n'
    )
    metrics = bus.metrics()["evtrain_example_plugin.save_log"]
    assert (metrics.delivered, metrics.failed) == (3, 0)


def test_artifact_log_appends_to_an_existing_log(tmp_path: Path) -> None:
    log = ArtifactLog(tmp_path / "deep" / "artifacts.jsonl")
    log(ExportEvent(category="C", step=5, path=Path("c.onnx")))
    log(ExportEvent(category="C", step=6, path=Path("c.onnx"), format="onnx-int8"))
    assert log.path.read_text() == (
        '{"signal": "export", "category": "C", "step": 5, "path": "c.onnx", "format": "onnx"}\n'
        '{"signal": "export", "category": "C", "step": 6, "path": "c.onnx", '
        '"format": "onnx-int8"}\n'
    )
