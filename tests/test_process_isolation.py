"""``isolation="process"``: a subscriber in a child process that is killed, spins holding the
GIL, or leaks is restarted with nothing lost, and the trainer's emits go on meanwhile."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

from evtrain import Bus, StatsEvent
from evtrain.bus import SubscriberSettings, journal_backlog
from evtrain.errors import SubscriberProcessError
from evtrain.events.signals import stats
from tests.helpers import ROOT, isolated_python, stats_event
from tests.isolated_subscribers import Leaker, Raiser, Recorder, Spinner, steps

WAIT_S = 60.0


def wait_for(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + WAIT_S
    while not condition():
        assert time.monotonic() < deadline, f"gave up waiting for {what}"
        time.sleep(0.01)


def restarts(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if "restarting it" in r.getMessage()]


def test_a_child_killed_mid_stream_is_restarted_and_every_event_is_handled(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    bus = Bus()
    bus.connect(stats, Recorder(tmp_path), isolation="process", name="recorder")
    for step in range(500):
        bus.emit(stats, stats_event(step))
    wait_for(lambda: len(steps(tmp_path)) >= 100, "100 events handled")
    pid = int((tmp_path / "pid").read_text())
    os.kill(pid, signal.SIGKILL)
    for step in range(500, 1000):
        bus.emit(stats, stats_event(step))
    bus.close()
    assert set(steps(tmp_path)) == set(range(1000))
    assert bus.metrics()["recorder"].delivered == 1000
    assert len(list(tmp_path.glob("pid.*"))) == 2
    assert any(f"process {pid} exited with code -9" in m for m in restarts(caplog))


def test_a_spool_subscriber_in_a_killed_child_loses_nothing_and_its_journal_empties(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    out = tmp_path / "out"
    out.mkdir()
    bus = Bus(journal_dir=tmp_path / "journal")
    bus.connect(stats, Recorder(out), isolation="process", overflow="spool", name="tracker")
    for step in range(300):
        bus.emit(stats, stats_event(step))
    wait_for(lambda: len(steps(out)) >= 50, "50 events handled")
    pid = int((out / "pid").read_text())
    os.kill(pid, signal.SIGKILL)
    for step in range(300, 600):
        bus.emit(stats, stats_event(step))
    report = bus.close()
    recorded = steps(out)
    assert set(recorded) == set(range(600))
    # A spool subscriber's window is one event: at most that one is handled twice.
    assert len(recorded) - 600 in (0, 1)
    assert journal_backlog(tmp_path / "journal", "tracker") == 0
    assert report.clean
    assert any(f"process {pid} exited with code -9" in m for m in restarts(caplog))


def test_a_child_spinning_with_the_gil_held_leaves_emit_free_and_is_restarted_when_hung(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    bus = Bus(subscribers={"spinner": SubscriberSettings(hang_timeout=4.0)}, stall_timeout=1.0)
    bus.connect(stats, Spinner(tmp_path), isolation="process", name="spinner")
    bus.emit(stats, stats_event(0))
    wait_for((tmp_path / "spun").exists, "the child to start spinning")
    emitted = []

    def produce() -> None:
        for step in range(1, 1001):
            bus.emit(stats, stats_event(step))
            emitted.append(step)

    producer = threading.Thread(target=produce)
    producer.start()
    producer.join(WAIT_S)
    # Every emit returned while the child held its GIL in the regex engine.
    assert len(emitted) == 1000
    assert restarts(caplog) == []  # all of them while the child spun
    bus.close()
    assert sorted(steps(tmp_path)) == list(range(1001))
    # The worker's wait on the hung child was one call: one stall for the watchdog.
    assert bus.metrics()["spinner"].stalls == 1
    spun = int((tmp_path / "spun").read_text())
    assert restarts(caplog) == [
        f"Subscriber 'spinner''s process {spun} made no progress in 4 s; restarting it and "
        "sending its 256 unacknowledged events again."
    ]


def test_a_leaking_child_is_restarted_past_its_memory_limit_and_loses_nothing(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    limit = 600 << 20
    bus = Bus(subscribers={"leaker": SubscriberSettings(max_rss_bytes=limit)})
    bus.connect(stats, Leaker(tmp_path, 64 << 20), isolation="process", name="leaker")
    for step in range(16):
        bus.emit(stats, stats_event(step))
    bus.close()
    # Each event is acknowledged before the child leaves: handled once.
    assert steps(tmp_path) == list(range(16))
    messages = restarts(caplog)
    assert messages and all(f"grew past max_rss_bytes ({limit})" in m for m in messages)
    assert len(list(tmp_path.glob("pid.*"))) == len(messages) + 1


TRAINER = """
import sys, time
from pathlib import Path
from evtrain import Bus
from evtrain.errors import SubscriberProcessError
from evtrain.events.signals import stats
from tests.helpers import stats_event
from tests.isolated_subscribers import Recorder

if __name__ == "__main__":
    bus = Bus()
    bus.connect(stats, Recorder(Path(sys.argv[1])), isolation="process", name="recorder")
    bus.emit(stats, stats_event(0))
    bus.flush()
    print("flushed", flush=True)
    time.sleep(600)
"""


def ended(pid: int) -> bool:
    """No such process, or a zombie (nobody may reap an orphan in a container)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except FileNotFoundError:
        return True
    return "\nState:\tZ" in status


def test_the_child_of_a_trainer_killed_outright_ends_too(tmp_path: Path) -> None:
    script = tmp_path / "trainer.py"
    script.write_text(TRAINER)
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
    }
    with subprocess.Popen(
        [sys.executable, str(script), str(tmp_path)], stdout=subprocess.PIPE, text=True, env=env
    ) as trainer:
        assert trainer.stdout is not None
        assert trainer.stdout.readline() == "flushed\n"
        child = int((tmp_path / "pid").read_text())
        os.kill(trainer.pid, signal.SIGKILL)
        trainer.wait(WAIT_S)
    wait_for(lambda: ended(child), "the orphaned child to end")
    assert steps(tmp_path) == [0]


def test_an_exception_in_the_child_reaches_the_failure_policy(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    bus = Bus(on_error="log")
    bus.connect(stats, Raiser(tmp_path), isolation="process", name="raiser")
    for step in range(10):
        bus.emit(stats, stats_event(step))
    bus.close()
    assert steps(tmp_path) == [0, 1, 2, 4, 5, 6, 7, 8, 9]
    metrics = bus.metrics()["raiser"]
    assert (metrics.delivered, metrics.failed) == (10, 1)
    errors = [r.exc_info[1] for r in caplog.records if r.exc_info and r.exc_info[1]]
    assert [str(e) for e in errors] == [
        "subscriber 'raiser' raised in its child process: ValueError: step 3 is refused (its "
        "traceback is the child's; run it with isolation='thread' to debug it in-process)"
    ]
    assert isinstance(errors[0], SubscriberProcessError)


def test_connect_refuses_a_subscriber_a_child_cannot_import() -> None:
    bus = Bus()
    with pytest.raises(TypeError) as info:
        bus.connect(stats, lambda event: None, isolation="process", name="anonymous")
    assert str(info.value) == (
        "subscriber 'anonymous' (test_connect_refuses_a_subscriber_a_child_cannot_import."
        "<locals>.<lambda>) cannot run in a child process: the child imports it by name, and a "
        "lambda or nested function has none. Define it at module level."
    )

    async def handler(event: StatsEvent) -> None:
        return None

    with pytest.raises(TypeError, match="is async; isolation='process' runs sync subscribers"):
        bus.connect(stats, handler, isolation="process", name="async")
    with pytest.raises(TypeError) as info:
        bus.connect(stats, Holder(threading.Lock()), isolation="process", name="holder")
    assert str(info.value) == (
        "subscriber 'holder' cannot run in a child process: it cannot be pickled (TypeError: "
        "cannot pickle '_thread.lock' object). Use a module-level function or class whose "
        "instances hold plain values (open files and clients in its first call)."
    )
    assert bus.metrics() == {}
    bus.close()


class Holder:
    def __init__(self, lock: object) -> None:
        self.lock = lock

    def __call__(self, event: StatsEvent) -> None:
        return None


def test_a_cli_run_with_a_process_isolated_jsonl_writer_holds_every_step(tmp_path: Path) -> None:
    options = {
        "behaviors": {
            "CartPole": {
                "trainer_type": "ppo",
                "hyperparameters": {"batch_size": 64, "buffer_size": 128, "num_epoch": 1},
                "network_settings": {"hidden_units": 16},
                "max_steps": 512,
                "time_horizon": 32,
                "summary_freq": 128,
            }
        },
        "env_settings": {"env_id": "CartPole-v1", "num_envs": 4, "seed": 3},
        "checkpoint_settings": {"run_id": "run", "results_dir": str(tmp_path / "results")},
        "writers": {"jsonl": {}},
        "bus": {"subscribers": {"evtrain_writers.jsonl.JsonlWriter": {"isolation": "process"}}},
    }
    (tmp_path / "run.yaml").write_text(yaml.safe_dump(options))
    done = subprocess.run(
        [isolated_python(), "-m", "evtrain", "learn", "run.yaml"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    assert "Subscriber 'evtrain_writers.jsonl.JsonlWriter' runs in process " in done.stderr
    lines = (tmp_path / "results/run/CartPole/stats.jsonl").read_text().splitlines()
    records = [json.loads(line) for line in lines]
    assert [r["step"] for r in records if "step" in r] == list(range(128, 513, 128))
