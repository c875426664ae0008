"""A full disk, on a real small filesystem (a tmpfs mounted for the test): writers pause and
resume when space returns, rows are whole, metrics count only what was written, and the CLI says
one line and leaves its last checkpoint loadable."""

from __future__ import annotations

import logging
import re
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from evtrain import Bus, SubscriberFailed, signals
from evtrain.run.checkpoints.checkpoint import load_checkpoint
from evtrain.testing import Recorder
from evtrain_writers import TensorboardWriter
from evtrain_writers.csv_file import CsvWriter
from evtrain_writers.jsonl import JsonlWriter
from tests.helpers import (
    clean_env,
    csv_steps,
    fill,
    isolated_python,
    jsonl_steps,
    stats_event,
    tensorboard_steps,
)

KEYS = {f"Stat/Key number {i}": float(i) for i in range(40)}
"""Forty keys: about a kilobyte a row, so that the writers soon need a new page."""


def wait_for(ready: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + 60
    while not ready():
        assert time.monotonic() < deadline, what
        time.sleep(0.01)


def whole(path: Path) -> Path:
    """``path``, once it is seen to hold whole rows only (the last one ends its line)."""
    assert path.read_bytes().endswith(b"\n")
    return path


def test_writers_pause_on_a_full_disk_and_write_everything_once_space_returns(
    disk: Path, caplog: pytest.LogCaptureFixture
) -> None:
    emit: Callable[[range], None]
    failed = Recorder()
    caplog.set_level(logging.WARNING, logger="evtrain.bus")
    with Bus(capacity=1000) as bus:
        bus.connect(signals.subscriber_failed, failed, name="failures")
        bus.add_writer(TensorboardWriter(disk, flush_secs=0.05), name="tensorboard")
        bus.add_writer(CsvWriter(disk), name="csv")
        bus.add_writer(JsonlWriter(disk), name="jsonl")

        def emit(steps: range) -> None:
            for step in steps:
                bus.emit(signals.stats, stats_event(step, "CartPole", **KEYS))

        emit(range(1, 51))
        bus.flush(timeout=60)
        filler = fill(disk)
        emit(range(51, 151))

        def reported(name: str) -> bool:
            return any(e.subscriber == name for e in failed.of(SubscriberFailed))

        wait_for(lambda: reported("csv") and reported("jsonl"), "both files met the full disk")
        # While the disk is full: rows are whole and in order, and what the metrics count as
        # delivered is exactly what is in the file.
        rows = csv_steps(whole(disk / "CartPole" / "progress.csv"))
        assert rows == list(range(1, len(rows) + 1)) and len(rows) < 150
        assert bus.metrics()["csv"].delivered == len(rows)
        lines = jsonl_steps(whole(disk / "CartPole" / "stats.jsonl"))
        assert lines == list(range(1, len(lines) + 1)) and len(lines) < 150
        assert bus.metrics()["jsonl"].delivered == len(lines)
        [event] = [e for e in failed.of(SubscriberFailed) if e.subscriber == "csv"]
        assert (event.error_type, event.disabled, event.retry_in_s) == ("OSError", False, 0.5)
        assert event.error == (
            f"[Errno 28] No space left on device: '{disk / 'CartPole' / 'progress.csv'}'"
        )

        [said] = [r for r in caplog.records if r.getMessage().startswith("Subscriber 'csv'")]
        assert said.exc_info is None  # one line, no traceback
        assert said.getMessage() == (
            f"Subscriber 'csv': {event.error}; its events wait, in order, and are retried "
            "every 0.5 s until space is freed."
        )

        filler.unlink()
        emit(range(151, 201))
        bus.flush(timeout=60)
        everything = list(range(1, 201))
        assert csv_steps(whole(disk / "CartPole" / "progress.csv")) == everything
        assert jsonl_steps(whole(disk / "CartPole" / "stats.jsonl")) == everything
        assert tensorboard_steps(disk / "CartPole", "Stat/Key number 7") == everything
        for name in ("tensorboard", "csv", "jsonl"):
            metrics = bus.metrics()[name]
            assert (metrics.delivered, metrics.dropped, metrics.disabled) == (200, 0, False)
    assert bus.close().clean


def config(results: Path, **behavior: Any) -> dict[str, Any]:
    settings: dict[str, Any] = {
        "trainer_type": "ppo",
        "hyperparameters": {"batch_size": 64, "buffer_size": 128, "num_epoch": 1},
        "network_settings": {"hidden_units": 16},
        "max_steps": 10_000_000,
        "time_horizon": 32,
        "summary_freq": 256,
        "checkpoint_interval": 512,
        "keep_checkpoints": 1,
    }
    settings.update(behavior)
    return {
        "behaviors": {"CartPole": settings},
        "env_settings": {"env_id": "CartPole-v1", "num_envs": 4, "seed": 3},
        "checkpoint_settings": {"run_id": "run", "results_dir": str(results)},
        "writers": {"csv": {}},
        "bus": {"drain_timeout": 3},
    }


def test_a_run_on_a_full_disk_stops_with_one_line_and_its_last_checkpoint_loads(
    disk: Path, tmp_path: Path
) -> None:
    (tmp_path / "run.yaml").write_text(yaml.safe_dump(config(disk)))
    folder = disk / "run" / "CartPole"
    proc = subprocess.Popen(
        [isolated_python(), "-m", "evtrain", "learn", "run.yaml"],
        cwd=tmp_path,
        stderr=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env=clean_env(),
    )
    assert proc.stderr is not None
    lines = []
    try:
        # A checkpoint is in place (its save runs on a thread of its own: under load it lands
        # after later summaries), and the run goes on past it.
        for line in proc.stderr:
            lines.append(line)
            step = re.search(r"CartPole\. Step: (\d+)", line)
            if step and int(step[1]) >= 768 and (folder / "checkpoint.pt").exists():
                break
        else:
            raise AssertionError("the run ended before its first checkpoint:\n" + "".join(lines))
        filler = fill(disk)
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:  # failed above: end the run, and close its pipes
            proc.kill()
            proc.communicate()
    stderr = "".join(lines) + err
    assert proc.returncode == 1, stderr
    assert "Traceback" not in stderr and "Exception in thread" not in stderr
    [line] = [line for line in stderr.splitlines() if line.startswith("evtrain: error:")]
    assert line.startswith("evtrain: error: No space left on device: ")
    assert line.endswith(
        ". Free space there, then continue with --resume (the last checkpoint on disk is complete)."
    )
    assert str(disk / "run") in line  # the path that met the full disk
    assert load_checkpoint(folder / "checkpoint.pt")["step"] >= 512
    assert not [p for p in (disk / "run").rglob("*.tmp")]  # no half-written file left
    rows = csv_steps(whole(folder / "progress.csv"))
    assert rows == list(range(256, 256 * (len(rows) + 1), 256))

    # Space is freed and the run resumed: every summary step once, in every writer.
    filler.unlink()
    (tmp_path / "run.yaml").write_text(yaml.safe_dump(config(disk, max_steps=3072)))
    resumed = subprocess.run(
        [isolated_python(), "-m", "evtrain", "learn", "run.yaml", "--resume"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env=clean_env(),
        timeout=300,
        check=False,
    )
    assert resumed.returncode == 0, resumed.stderr
    everything = list(range(256, 3073, 256))
    assert csv_steps(whole(folder / "progress.csv")) == everything
    assert tensorboard_steps(folder, "Policy/Entropy") == everything


def test_closing_a_spool_whose_journal_disk_is_full_kills_no_thread(
    disk: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    died: list[str] = []
    monkeypatch.setattr(threading, "excepthook", lambda args: died.append(str(args.thread)))
    received = Recorder()
    # The acknowledgement is recorded only at close, when the disk is full.
    bus = Bus(journal_dir=disk / "journal", journal_fsync_s=600)
    bus.connect(signals.stats, received, overflow="spool", name="tracker")
    for step in range(1, 51):
        bus.emit(signals.stats, stats_event(step, "CartPole", **KEYS))
    wait_for(lambda: bus.metrics()["tracker"].delivered == 50, "every event delivered")
    fill(disk)
    with caplog.at_level(logging.ERROR, logger="evtrain.bus"):
        report = bus.close(timeout=30)
    assert died == []
    assert report.timed_out == () and report.delivered == {"tracker": 50}
    # Not recorded as acknowledged: kept, and delivered again by the next bus (at least once).
    assert report.journaled == {"tracker": 50}
    ack = disk / "journal" / "tracker" / "ack"
    assert (
        "Journal of subscriber 'tracker': cannot record its acknowledgement ([Errno 28] No space "
        f"left on device: '{ack}'); the events delivered since the last one recorded stay in it "
        "and are delivered again."
    ) in caplog.messages
    assert [e.step for e in received.events] == list(range(1, 51))
