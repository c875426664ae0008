"""A checkpoint implies its statistics: ``kill -9`` a real CLI run, ``--resume`` it, and every
summary step is in TensorBoard, ``progress.csv`` and ``stats.jsonl`` exactly once."""

from __future__ import annotations

import json
import logging
import os
import re
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml

from evtrain import Bus, StatsEvent, StatsWriter, signals
from evtrain.events.stats import StatsSummary
from evtrain.run.checkpoints.checkpoint import load_checkpoint
from evtrain.run.learn import learn
from evtrain_writers.csv_file import CsvWriter
from evtrain_writers.jsonl import JsonlWriter
from tests.helpers import (
    clean_env,
    csv_steps,
    isolated_python,
    jsonl_steps,
    stats_event,
    tensorboard_steps,
)
from tests.torchrun_runs import CARTPOLE, PROBE, TORCHRUN, ppo

SUMMARY_FREQ = 128
MAX_STEPS = 1536
TAG = "Policy/Entropy"
REWARD = "Environment/Cumulative Reward"


def config(tmp_path: Path) -> dict[str, Any]:
    """A tiny CartPole PPO run: a summary every 128 steps (each update), a checkpoint every 512."""
    return {
        "behaviors": {
            "CartPole": {
                "trainer_type": "ppo",
                "hyperparameters": {"batch_size": 64, "buffer_size": 128, "num_epoch": 1},
                "network_settings": {"hidden_units": 16},
                "max_steps": MAX_STEPS,
                "time_horizon": 32,
                "summary_freq": SUMMARY_FREQ,
                "checkpoint_interval": 512,
                "keep_checkpoints": 2,
            }
        },
        "env_settings": {"env_id": "CartPole-v1", "num_envs": 4, "seed": 3},
        "checkpoint_settings": {"run_id": "run", "results_dir": str(tmp_path / "results")},
        "writers": {"csv": {}, "jsonl": {}},
    }


def kill_after_summaries_past_a_checkpoint(proc: subprocess.Popen[str], folder: Path) -> int:
    """Kill once a checkpoint is in place and two more summaries were emitted after it (the
    console has them): those are what a killed run wrote past its checkpoint.  Returns the step
    whose summaries must all have survived: the checkpoint's."""
    assert proc.stderr is not None
    seen_at = None
    for line in proc.stderr:
        match = re.search(r"CartPole\. Step: (\d+)", line)
        if match is None:
            continue
        if seen_at is None and (folder / "checkpoint.pt").exists():
            seen_at = int(match[1])
        if seen_at is not None and int(match[1]) >= seen_at + 2 * SUMMARY_FREQ:
            break
    else:
        raise AssertionError("the run ended before its checkpoint and the summaries after it")
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=60)
    step: int = load_checkpoint(folder / "checkpoint.pt")["step"]
    return step


def kill_as_a_checkpoint_file_appears(proc: subprocess.Popen[str], folder: Path) -> int:
    """Kill as soon as ``CartPole-1024.pt`` exists, while that save goes on: the summaries up
    to 1024 were made durable before it was written."""
    deadline = time.monotonic() + 60
    while not (folder / "CartPole-1024.pt").exists():
        assert proc.poll() is None and time.monotonic() < deadline
        time.sleep(0.002)
    os.kill(proc.pid, signal.SIGKILL)
    return 1024


@pytest.mark.parametrize(
    "kill", [kill_after_summaries_past_a_checkpoint, kill_as_a_checkpoint_file_appears]
)
def test_kill_9_after_a_checkpoint_then_resume_holds_each_summary_step_once(
    tmp_path: Path, kill: Callable[[subprocess.Popen[str], Path], int]
) -> None:
    (tmp_path / "run.yaml").write_text(yaml.safe_dump(config(tmp_path)))
    folder = tmp_path / "results" / "run" / "CartPole"
    proc = subprocess.Popen(
        [isolated_python(), "-m", "evtrain", "learn", "run.yaml"],
        cwd=tmp_path,
        stderr=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        text=True,
        env=clean_env(),
    )
    assert proc.stderr is not None
    durable = kill(proc, folder)
    proc.wait(timeout=60)
    proc.stderr.close()
    assert load_checkpoint(folder / "checkpoint.pt")["step"] >= 512
    # Every summary up to the checkpoint survived the kill, in every writer.
    upto = list(range(SUMMARY_FREQ, durable + 1, SUMMARY_FREQ))
    assert [s for s in tensorboard_steps(folder, TAG) if s <= durable] == upto
    assert [s for s in csv_steps(folder / "progress.csv") if s <= durable] == upto
    assert [s for s in jsonl_steps(folder / "stats.jsonl") if s <= durable] == upto

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
    expected = list(range(SUMMARY_FREQ, MAX_STEPS + 1, SUMMARY_FREQ))
    assert tensorboard_steps(folder, TAG) == expected
    assert csv_steps(folder / "progress.csv") == expected
    assert jsonl_steps(folder / "stats.jsonl") == expected


def test_a_resumed_writer_cuts_torn_tails_and_rows_past_the_checkpoint(tmp_path: Path) -> None:
    folder = tmp_path / "CartPole"
    folder.mkdir()
    # What a killed run left: rows up to step 768, the last one torn mid-line.
    (folder / "progress.csv").write_bytes(b"step,a\r\n256,1.0\r\n512,2.0\r\n768,3.0\r\n1024,4")
    (folder / "stats.jsonl").write_bytes(
        b'{"property": "hyperparameters", "value": {}}\n'
        b'{"step": 256, "stats": {}}\n{"step": 512, "stats": {}}\n{"step": 768, "st'
    )
    values = {"a": StatsSummary(full_dist=[9.0])}
    for writer in (CsvWriter(tmp_path), JsonlWriter(tmp_path)):
        writer.write_stats("CartPole", values, 512)  # resumed from the checkpoint of 256
        writer.write_stats("CartPole", values, 768)
        writer.close()
    assert (folder / "progress.csv").read_bytes() == b"step,a\r\n256,1.0\r\n512,9.0\r\n768,9.0\r\n"
    lines = (folder / "stats.jsonl").read_text().splitlines()
    assert lines[:2] == [
        '{"property": "hyperparameters", "value": {}}',
        '{"step": 256, "stats": {}}',
    ]
    assert [json.loads(line)["step"] for line in lines[2:]] == [512, 768]


class BufferedSink(StatsWriter):
    """A sink that keeps steps in memory until ``flush()`` appends them to its file."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.buffer: list[int] = []

    def write_stats(self, category: str, values: Mapping[str, StatsSummary], step: int) -> None:
        self.buffer.append(step)

    def flush(self) -> None:
        with self.path.open("a", encoding="utf-8") as file:
            file.writelines(f"{step}\n" for step in self.buffer)
        self.buffer.clear()


def wait_all_acknowledged(bus: Bus, name: str, count: int) -> None:
    deadline = time.monotonic() + 60
    while True:
        metrics = bus.metrics()[name]
        if metrics.delivered == count and metrics.journaled == 0:
            return
        assert time.monotonic() < deadline, metrics
        time.sleep(0.01)


def test_a_spool_writer_acknowledges_only_what_its_sink_made_durable(tmp_path: Path) -> None:
    sink = BufferedSink(tmp_path / "sink.txt")
    csv_writer = CsvWriter(tmp_path / "run")
    with Bus(journal_dir=tmp_path / "journal") as bus:
        bus.add_writer(sink, overflow="spool", name="sink")
        bus.add_writer(csv_writer, overflow="spool", name="csv")
        for step in range(1, 51):
            bus.emit(signals.stats, stats_event(step, reward=float(step)))
        # Once the journal has dropped every event, each one is in its sink's file.
        wait_all_acknowledged(bus, "sink", 50)
        assert (tmp_path / "sink.txt").read_text().split() == [str(s) for s in range(1, 51)]
        wait_all_acknowledged(bus, "csv", 50)
        assert csv_steps(tmp_path / "run" / "CartPole" / "progress.csv") == list(range(1, 51))


def test_a_hung_subscriber_holds_a_checkpoint_back_by_the_drain_timeout_and_is_named(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    options = config(tmp_path)
    options["behaviors"]["CartPole"].update(
        max_steps=1024, checkpoint_interval=512, summary_freq=256
    )
    options["bus"] = {"drain_timeout": 1}
    release = threading.Event()

    def hung(event: StatsEvent) -> None:
        release.wait(60)

    with Bus() as bus:
        bus.connect(signals.stats, hung, name="hung")
        with caplog.at_level(logging.WARNING, logger="evtrain"):
            learn(options, bus)
        release.set()
    folder = tmp_path / "results" / "run" / "CartPole"
    assert load_checkpoint(folder / "checkpoint.pt")["step"] == 1024
    assert (folder / "CartPole-512.pt").exists() and (folder / "CartPole-1024.pt").exists()
    said = [
        r.getMessage()
        for r in caplog.records
        if r.getMessage().startswith("Subscribers still behind before saving CartPole")
    ]
    # Once per checkpoint: the periodic one and the final one.
    assert len(said) == 2
    for message in said:
        prefix = "Subscribers still behind before saving CartPole after bus.drain_timeout (1 s): "
        assert message.startswith(prefix)
        assert "hung" in message[len(prefix) :].split(". The run goes on")[0].split(", ")
        assert message.endswith(". The run goes on without waiting for them.")


def torchrun(
    folder: Path, behavior: dict[str, Any], envs: dict[str, Any], *args: str
) -> subprocess.CompletedProcess[str]:
    """``torchrun`` of ``evtrain learn`` on 2 ranks, as ``tests/test_distributed.py`` runs it,
    importing evtrain from where this test does."""
    config = {
        "behaviors": {"Agent": behavior},
        "env_settings": envs,
        "checkpoint_settings": {"run_id": "run", "results_dir": str(folder / "results")},
        "plugins": {"paths": [str(PROBE)]},
        "torch_settings": {"distributed_timeout": 60},
    }
    path = folder / f"config-{len(list(folder.glob('config-*')))}.yaml"
    path.write_text(yaml.safe_dump(config))
    paths = [str(PROBE), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
    env = {
        **os.environ,
        "EVTRAIN_PROBE_OUT": str(folder / "probe"),
        "PYTHONPATH": os.pathsep.join(paths),
        "OMP_NUM_THREADS": "1",
    }
    command = [str(TORCHRUN), "--standalone", "--nproc-per-node", "2", "-m", "evtrain", "learn"]
    return subprocess.run(
        [*command, str(path), *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        check=False,
    )


def test_a_rank_dies_under_torchrun_and_the_resumed_run_shows_each_step_once(
    tmp_path: Path,
) -> None:
    # Rank 1 dies at 100 of its steps (800 global steps), once the checkpoint of 512 is on
    # disk: rank 0 has written the summaries of 640 and 768 past it when it stops.
    behavior = {
        **ppo(10**6),
        "trainer_type": "ppo",
        "summary_freq": 128,
        "checkpoint_interval": 512,
    }
    folder = tmp_path / "results" / "run" / "Agent"
    dying = {
        "env_id": "dist_probe:dying_cartpole",
        "env_kwargs": {"die_at": 100, "dying_rank": 1, "wait_for": str(folder / "checkpoint.pt")},
        "num_envs": 4,
        "seed": 5,
    }
    died = torchrun(tmp_path, behavior, dying)
    assert died.returncode != 0
    assert load_checkpoint(folder / "checkpoint.pt")["step"] == 512
    assert tensorboard_steps(folder, REWARD)[-2:] == [640, 768]

    resumed = torchrun(tmp_path, {**behavior, "max_steps": 1024}, CARTPOLE, "--resume")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert tensorboard_steps(folder, REWARD) == list(range(128, 1025, 128))
