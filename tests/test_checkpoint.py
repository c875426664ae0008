"""Checkpoints: atomic files, kill -9, rotation, events after files, export failures, resume."""

from __future__ import annotations

import json
import logging
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np
import pytest
import torch

from evtrain import Bus, ExportEvent, SaveEvent, signals
from evtrain.atomic import atomic_write
from evtrain.events.signals import EventSignal
from evtrain.export import onnx_policy
from evtrain.run.checkpoints.checkpoint import CheckpointManager, load_checkpoint, save_checkpoint
from evtrain.run.checkpoints.training_status import ModelCheckpoint, TrainingStatus
from evtrain.testing import Recorder
from tests.export_policies import DiscretePolicy, RaisingPolicy, observations

B = "Walker"
EXAMPLE = torch.from_numpy(observations(2))


def state(step: int) -> dict[str, Any]:
    return {"step": step, "weights": torch.full((4,), float(step))}


def names(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


class CheckingBus(Bus):
    """A real bus that also records, at emit time, what the checkpoint folder holds."""

    def __init__(self, folder: Path) -> None:
        super().__init__()
        self.folder = folder
        self.at_emit: list[tuple[str, int, bool, list[str]]] = []

    def emit(self, signal: EventSignal[Any], payload: Any) -> None:
        if isinstance(payload, SaveEvent | ExportEvent):
            self.at_emit.append(
                (signal.name, payload.step, payload.path.exists(), names(self.folder))
            )
        super().emit(signal, payload)


# -- atomic files ---------------------------------------------------------------------------------


def test_atomic_write_replaces_and_leaves_no_temp(tmp_path: Path) -> None:
    path = tmp_path / "f.bin"
    path.write_bytes(b"old")

    assert atomic_write(path, lambda f: f.write(b"new content")) == path

    assert path.read_bytes() == b"new content"
    assert names(tmp_path) == ["f.bin"]


@pytest.mark.parametrize("error", [OSError("disk full"), KeyboardInterrupt()])
def test_atomic_write_failure_keeps_old_content(tmp_path: Path, error: BaseException) -> None:
    path = tmp_path / "f.bin"
    path.write_bytes(b"old")

    def half_then_fail(f: BinaryIO) -> None:
        f.write(b"half of the new")
        f.flush()
        raise error

    with pytest.raises(type(error)):
        atomic_write(path, half_then_fail)

    assert path.read_bytes() == b"old"
    assert names(tmp_path) == ["f.bin"]


def test_an_atomic_write_on_a_thread_cut_off_by_the_exit_leaves_no_temp(tmp_path: Path) -> None:
    """A second Ctrl-C ends the process while a writer's daemon thread is inside
    ``atomic_write`` (``timers.json``): its temporary file goes with the process; the target
    keeps its old content."""
    target = tmp_path / "timers.json"
    target.write_text("old")
    code = (
        "import threading, time\n"
        "from evtrain.atomic import atomic_write\n"
        "started = threading.Event()\n"
        "def hang(file):\n"
        "    file.write(b'new'); started.set(); time.sleep(600)\n"
        f"args = ({str(target)!r}, hang)\n"
        "threading.Thread(target=atomic_write, args=args, daemon=True).start()\n"
        "started.wait()\n"
    )
    ran = subprocess.run([sys.executable, "-c", code], capture_output=True, timeout=60, check=False)
    assert ran.returncode == 0, ran.stderr
    assert [p.name for p in tmp_path.iterdir()] == ["timers.json"]
    assert target.read_text() == "old"


def test_checkpoint_round_trip_loads_weights_only(tmp_path: Path) -> None:
    rng = np.random.default_rng(3)
    rng.random(5)
    generator = torch.Generator().manual_seed(4)
    model = torch.nn.Linear(3, 2)
    optimizer = torch.optim.Adam(model.parameters())
    model(torch.ones(1, 3)).sum().backward()
    optimizer.step()
    original = {
        "step": 7,
        "rng": rng.bit_generator.state,  # PCG64: a dict of ints (128-bit) and strings
        "generator": generator.get_state(),
        "model": model.state_dict(),
        "optimizer": optimizer.state_dict(),
        "history": [1.5, None, (2, "x")],
    }

    loaded = load_checkpoint(save_checkpoint(tmp_path / "c.pt", original))

    assert loaded["step"] == 7 and loaded["history"] == [1.5, None, (2, "x")]
    restored = np.random.default_rng()
    restored.bit_generator.state = loaded["rng"]
    np.testing.assert_array_equal(restored.random(3), rng.random(3))
    assert torch.equal(loaded["generator"], generator.get_state())
    assert torch.equal(loaded["model"]["weight"], model.weight)
    assert loaded["optimizer"]["state"][0]["step"] == 1


def test_unloadable_state_is_refused_before_writing(tmp_path: Path) -> None:
    mt = np.random.Generator(np.random.MT19937(0)).bit_generator.state  # holds an ndarray
    with pytest.raises(TypeError, match=r"^state\['rng'\]\['state'\]\['key'\] is a numpy\.ndarray"):
        save_checkpoint(tmp_path / "c.pt", {"rng": mt})
    assert names(tmp_path) == []


CHILD = """
import os, sys, torch
from evtrain.run.checkpoints.checkpoint import CheckpointManager
torch.set_num_threads(1)

def save_until_killed(folder, parent):
    manager = CheckpointManager(folder, "Kill", keep_checkpoints=2)
    step = 0
    while os.getppid() == parent:  # a test that failed half-way leaves no saver behind
        step += 1
        manager.save(step, {"step": step, "data": torch.full((500_000,), float(step))})
        if step == 1:  # one write, so the savers' lines never interleave on the shared pipe
            os.write(1, f"saved {os.getpid()}\\n".encode())

for folder in sys.argv[1:]:  # one saving process each, forked: torch imported once
    if os.fork() == 0:
        try:
            save_until_killed(folder, os.getppid())
        except BaseException:  # said before os._exit, which would swallow it
            import traceback
            traceback.print_exc()
            sys.stderr.flush()
        finally:
            os._exit(1)
for _ in sys.argv[1:]:
    os.wait()
"""
"""Forks one saving process per folder given; each says ``saved PID`` after its first save,
then saves on until it is killed."""


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork and kill -9")
def test_kill_9_at_random_moments_leaves_complete_files(tmp_path: Path) -> None:
    chance = random.Random(0)
    folders = [tmp_path / f"run{i}" for i in range(3)]
    # The savers start together, forked by one child after it imported torch, and each is
    # killed at its own moment after its first save: mid-write, mid-copy, mid-rotation...
    proc = subprocess.Popen(
        [sys.executable, "-c", CHILD, *map(str, folders)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    savers: list[int] = []
    try:
        assert proc.stdout is not None
        for _ in folders:
            line = proc.stdout.readline()
            if not line.startswith("saved "):
                proc.kill()
                _, stderr = proc.communicate()
                pytest.fail(f"a saving process failed: read {line!r} after {savers}; {stderr}")
            savers.append(int(line.split()[1]))
            time.sleep(chance.uniform(0.0, 0.4))
            os.kill(savers[-1], signal.SIGKILL)
        assert proc.wait(60) == 0, proc.communicate()[1]
    finally:
        proc.kill()  # the savers not killed yet stop at their next save
        proc.communicate()

    for folder in folders:
        behavior = folder / "Kill"
        latest = load_checkpoint(behavior / "checkpoint.pt")
        assert torch.all(latest["data"] == latest["step"])
        for pt in behavior.glob("Kill-*.pt"):
            saved = load_checkpoint(pt)
            assert pt.name == f"Kill-{saved['step']}.pt"
            assert torch.all(saved["data"] == saved["step"])
        status = TrainingStatus.load(folder / "run_logs" / "training_status.json")
        resumed = CheckpointManager(folder, "Kill", keep_checkpoints=2, status=status, resume=True)
        assert not [p for p in behavior.iterdir() if p.name.startswith(".")]  # temps removed
        assert all(any(f.exists() for f in c.files) for c in resumed.checkpoints)
        next_step = max(c.steps for c in resumed.checkpoints) + 1
        resumed.save(next_step, {"step": next_step, "data": torch.zeros(1)})
        assert len(list(behavior.glob("Kill-*.pt"))) == 2


# -- the manager -------------------------------------------------------------------------------


def test_rotation_keeps_pairs_and_events_follow_files(tmp_path: Path) -> None:
    folder = tmp_path / B
    recorder = Recorder()
    received: list[tuple[str, int, bool]] = []
    bus = CheckingBus(folder)
    with bus:
        recorder.connect(bus, signals.save, signals.export)
        bus.connect(
            (signals.save, signals.export),
            lambda e: received.append((type(e).__name__, e.step, e.path.exists())),
        )
        manager = CheckpointManager(tmp_path, B, keep_checkpoints=2, bus=bus)
        for step in (100, 200, 300):
            events = manager.save(step, state(step), DiscretePolicy(), example_obs=EXAMPLE)
            assert [type(e) for e in events] == [SaveEvent, ExportEvent]
        bus.flush()

    assert names(folder) == [
        "Walker-200.onnx",
        "Walker-200.pt",
        "Walker-300.onnx",
        "Walker-300.pt",
        "checkpoint.pt",
    ]
    assert load_checkpoint(folder / "checkpoint.pt")["step"] == 300
    assert [(c.steps, Path(c.file_path).name) for c in manager.checkpoints] == [
        (200, "Walker-200.onnx"),
        (300, "Walker-300.onnx"),
    ]
    assert [(e.step, e.path.name) for e in recorder.events] == [
        (100, "Walker-100.pt"),
        (100, "Walker-100.onnx"),
        (200, "Walker-200.pt"),
        (200, "Walker-200.onnx"),
        (300, "Walker-300.pt"),
        (300, "Walker-300.onnx"),
    ]
    assert all(exists for _, _, exists in received) and len(received) == 6
    assert all(exists for _, _, exists, _ in bus.at_emit)
    # The oldest pair is deleted only once the new pair is in place.
    name, step, _, listing = bus.at_emit[-1]
    assert (name, step) == ("export", 300)
    assert {"Walker-100.pt", "Walker-100.onnx", "Walker-300.pt", "Walker-300.onnx"} <= set(listing)


def test_export_failure_keeps_the_checkpoint(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with Bus() as bus, caplog.at_level(logging.ERROR, "evtrain.run.checkpoints.checkpoint"):
        recorder = Recorder()
        recorder.connect(bus, signals.save, signals.export)
        manager = CheckpointManager(tmp_path, B, bus=bus)
        events = manager.save(5, state(5), RaisingPolicy(), example_obs=EXAMPLE, reward=2.0)
        bus.flush()

    assert (
        events
        == recorder.events
        == [SaveEvent(category=B, step=5, path=tmp_path / B / "Walker-5.pt", reward=2.0)]
    )
    assert names(tmp_path / B) == ["Walker-5.pt", "checkpoint.pt"]
    assert load_checkpoint(tmp_path / B / "checkpoint.pt")["step"] == 5
    assert [c.file_path for c in manager.checkpoints] == [str(tmp_path / B / "Walker-5.pt")]
    [record] = caplog.records
    assert record.getMessage() == (
        f"Exporting the policy of Walker at step 5 to {tmp_path / B / 'Walker-5.onnx'} failed; "
        "the checkpoint is kept without it."
    )
    assert record.exc_info is not None


def test_final_save(tmp_path: Path) -> None:
    with Bus() as bus:
        recorder = Recorder()
        recorder.connect(bus, signals.save, signals.export)
        manager = CheckpointManager(tmp_path, B, keep_checkpoints=2, bus=bus)
        policy = DiscretePolicy()
        manager.save(10, state(10), reward=1.0)
        # The run ends at a checkpoint step: the final save re-saves that step.
        events = manager.save_final(
            10, state(10), policy, example_obs=EXAMPLE[:1].numpy(), reward=3.0
        )
        bus.flush()

    final = tmp_path / "Walker.onnx"
    assert [(type(e).__name__, e.path) for e in events] == [
        ("SaveEvent", tmp_path / B / "Walker-10.pt"),
        ("ExportEvent", tmp_path / B / "Walker-10.onnx"),
        ("ExportEvent", final),
    ]
    assert len(recorder.events) == 4
    obs = observations(8)
    with torch.no_grad():
        np.testing.assert_array_equal(onnx_policy(final)(obs), policy(torch.from_numpy(obs)))
    assert [c.steps for c in manager.checkpoints] == [10]
    status = TrainingStatus.load(tmp_path / "run_logs" / "training_status.json")
    assert status.final_checkpoint(B) == ModelCheckpoint(
        steps=10,
        file_path=str(final),
        reward=3.0,
        creation_time=manager.checkpoints[0].creation_time,
        auxillary_file_paths=(str(tmp_path / B / "Walker-10.pt"),),
    )


def test_other_ranks_write_nothing(tmp_path: Path) -> None:
    with Bus() as bus:
        recorder = Recorder()
        recorder.connect(bus)
        manager = CheckpointManager(tmp_path, B, bus=bus, is_writer=False)
        assert manager.save(1, state(1), DiscretePolicy(), example_obs=EXAMPLE) == []
        assert manager.save_final(1, state(1), DiscretePolicy(), example_obs=EXAMPLE) == []
        bus.flush()
    assert recorder.events == []
    assert names(tmp_path) == []
    assert manager.load_latest() is None


def test_closed_bus_does_not_stop_saving(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    bus = Bus()
    bus.close()
    manager = CheckpointManager(tmp_path, B, bus=bus)
    with caplog.at_level(logging.WARNING, "evtrain.run.checkpoints.checkpoint"):
        manager.save(1, state(1))
    assert names(tmp_path / B) == ["Walker-1.pt", "checkpoint.pt"]
    assert "The bus is closed; save was not emitted" in caplog.text


# -- training_status.json and resume -------------------------------------------------------------


def test_training_status_round_trip(tmp_path: Path) -> None:
    manager = CheckpointManager(tmp_path, B, keep_checkpoints=3)
    manager.save(1, state(1), reward=float("nan"))
    manager.save(2, state(2), reward=0.5)
    other = CheckpointManager(tmp_path, "Other", status=manager.status)
    other.save(9, state(9))

    path = tmp_path / "run_logs" / "training_status.json"
    document = json.loads(path.read_text())
    assert document["metadata"] == {
        "evtrain_version": "0.1.0",
        "torch_version": torch.__version__,
    }
    assert sorted(document) == ["Other", B, "metadata"]
    first = document[B]["checkpoints"][0]
    assert first == {
        "steps": 1,
        "file_path": str(tmp_path / B / "Walker-1.pt"),
        "reward": None,
        "creation_time": first["creation_time"],
        "auxillary_file_paths": [],
    }
    loaded = TrainingStatus.load(path)
    assert loaded.checkpoints(B) == list(manager.checkpoints)
    assert loaded.checkpoints("Other") == list(other.checkpoints)
    assert loaded.as_dict() == document


def test_resume_continues_rotation(tmp_path: Path) -> None:
    first = CheckpointManager(tmp_path / "results" / "run", B, keep_checkpoints=3)
    for step in (1, 2, 3, 4):
        first.save(step, state(step))
    # The run folder moves; a later process (killed before recording) left step 5 behind.
    run = tmp_path / "moved"
    shutil.move(tmp_path / "results" / "run", run)
    save_checkpoint(run / B / "Walker-5.pt", state(5))
    (run / B / ".Walker-6.pt.0123456789ab.tmp").write_bytes(b"torn")

    status = TrainingStatus.load(run / "run_logs" / "training_status.json")
    resumed = CheckpointManager(run, B, keep_checkpoints=3, status=status, resume=True)

    assert [(c.steps, Path(c.file_path).parent) for c in resumed.checkpoints] == [
        (2, run / B),
        (3, run / B),
        (4, run / B),
        (5, run / B),
    ]
    latest = resumed.load_latest()
    assert latest is not None and latest["step"] == 4
    resumed.save(6, state(6))
    assert names(run / B) == ["Walker-4.pt", "Walker-5.pt", "Walker-6.pt", "checkpoint.pt"]
    assert [c.steps for c in TrainingStatus.load(status.path).checkpoints(B)] == [4, 5, 6]


def test_status_without_metadata_is_refused(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "training_status.json"
    with caplog.at_level(logging.WARNING, "evtrain.run.checkpoints.checkpoint"):
        assert TrainingStatus.load(path).checkpoints(B) == []
    assert "Training status file" in caplog.text and "not found" in caplog.text

    path.write_text(json.dumps({B: {"checkpoints": []}}))
    with pytest.raises(ValueError, match="has no metadata: it was not written by evtrain"):
        TrainingStatus.load(path)

    path.write_text(json.dumps({"metadata": {"evtrain_version": "0.0.1"}}))
    with caplog.at_level(logging.WARNING, "evtrain.run.checkpoints.checkpoint"):
        TrainingStatus.load(path)
    assert "evtrain_version 0.0.1" in caplog.text


def test_non_finite_reward_is_recorded_as_none(tmp_path: Path) -> None:
    manager = CheckpointManager(tmp_path, B)
    [event] = manager.save(3, state(3), reward=float("inf"))
    assert event == SaveEvent(category=B, step=3, path=tmp_path / B / "Walker-3.pt", reward=None)
    assert manager.checkpoints[0].reward is None
