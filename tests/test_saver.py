"""Checkpoints in the background: the BackgroundSaver, and what a run's saves look like with it."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
import torch

from evtrain.run.checkpoints.checkpoint import SaveCancelled, load_checkpoint
from evtrain.run.checkpoints.saver import BackgroundSaver, snapshot
from evtrain.run.learn import learn
from tests.helpers import config


def test_saves_run_in_order_and_submit_waits_for_room() -> None:
    saver = BackgroundSaver(max_pending=2)
    release = threading.Event()
    done: list[int] = []

    def job(i: int) -> None:
        release.wait(10)
        done.append(i)

    saver.submit("0", lambda: job(0))
    saver.submit("1", lambda: job(1))
    assert saver.pending == 2
    third = threading.Thread(target=saver.submit, args=("2", lambda: job(2)))
    third.start()
    third.join(0.3)
    assert third.is_alive()  # no room: the third save waits instead of piling up
    release.set()
    third.join(10)
    saver.wait()
    assert done == [0, 1, 2] and saver.completed == 3 and saver.pending == 0
    saver.close()
    with pytest.raises(RuntimeError, match="closed"):
        saver.submit("late", lambda: None)


def test_a_failed_save_raises_on_the_submitting_thread_and_drops_what_was_queued() -> None:
    saver = BackgroundSaver(max_pending=3)
    gate = threading.Event()
    ran: list[str] = []

    def failing() -> None:
        gate.wait(10)
        raise OSError("disk full")

    saver.submit("bad", failing)
    saver.submit("next", lambda: ran.append("next"))
    gate.set()
    with pytest.raises(OSError, match="disk full"):
        saver.wait()
    assert ran == []  # a save queued behind a failed one does not run
    saver.wait()  # raised once
    saver.submit("after", lambda: ran.append("after"))
    saver.close()
    assert ran == ["after"]


def test_close_logs_an_error_instead_of_raising_it(caplog: pytest.LogCaptureFixture) -> None:
    saver = BackgroundSaver()

    def failing() -> None:
        raise OSError("read-only file system")

    saver.submit("bad", failing)
    saver.close()
    assert "read-only file system" in caplog.text


def test_abort_drops_queued_saves_and_stops_the_running_one_at_its_next_file() -> None:
    saver = BackgroundSaver(max_pending=3)
    cancelled = threading.Event()
    started = threading.Event()
    files: list[str] = []

    def save() -> None:
        started.set()
        for name in ("a.pt", "checkpoint.pt", "a.onnx"):
            if cancelled.is_set():
                raise SaveCancelled(name)
            time.sleep(0.1)  # writing a file
            files.append(name)

    saver.submit("running", save)
    saver.submit("queued", lambda: files.append("queued"))
    assert started.wait(10)
    dropped = saver.abort(cancelled.set)
    assert dropped == ["queued"]
    assert saver.pending == 0
    assert 1 <= len(files) < 3 and files == ["a.pt", "checkpoint.pt", "a.onnx"][: len(files)]
    saver.close()  # after an abort, close does not wait again


def test_snapshot_is_a_copy_that_keeps_shared_storage_shared() -> None:
    flat = torch.arange(6.0)
    state: dict[str, torch.Tensor] = {"w": flat[:4].view(2, 2), "b": flat[4:]}
    copied = snapshot(state)
    flat.add_(100)
    assert copied["w"].tolist() == [[0.0, 1.0], [2.0, 3.0]] and copied["b"].tolist() == [4.0, 5.0]
    assert copied["w"].untyped_storage().data_ptr() == copied["b"].untyped_storage().data_ptr()


def test_a_background_checkpoint_holds_the_state_of_its_step_and_changes_no_result(
    tmp_path: Path,
) -> None:
    # Constant learning rate, so a run of 512 steps trains exactly as the first 512 of 1024.
    constant = {"learning_rate_schedule": "constant", "epsilon_schedule": "constant"}
    hyperparameters = {"batch_size": 64, "buffer_size": 128, "num_epoch": 2, **constant}
    long = config(
        tmp_path,
        "long",
        hyperparameters=hyperparameters,
        checkpoint_interval=256,
        keep_checkpoints=10,
    )
    short = config(tmp_path, "short", hyperparameters=hyperparameters, max_steps=512)
    unsaved = config(
        tmp_path, "unsaved", hyperparameters=hyperparameters, checkpoint_interval=10**6
    )
    for options in (long, short, unsaved):
        learn(options)
    results = tmp_path / "results"
    at_512 = load_checkpoint(results / "long" / "CartPole" / "CartPole-512.pt")
    short_final = load_checkpoint(results / "short" / "CartPole" / "CartPole-512.pt")
    assert at_512["step"] == 512
    for key, value in short_final["agent"].items():
        assert torch.equal(at_512["agent"][key], value), key
    # Saving and exporting every 256 steps on another thread changed nothing of the training.
    final = load_checkpoint(results / "long" / "CartPole" / "checkpoint.pt")
    final_unsaved = load_checkpoint(results / "unsaved" / "CartPole" / "checkpoint.pt")
    assert final["step"] == final_unsaved["step"] == 1024
    for key, value in final_unsaved["agent"].items():
        assert torch.equal(final["agent"][key], value), key
    assert sorted(p.name for p in (results / "long" / "CartPole").glob("*.onnx")) == [
        "CartPole-1024.onnx",
        "CartPole-256.onnx",
        "CartPole-512.onnx",
        "CartPole-768.onnx",
    ]


def test_a_saves_snapshots_are_released_before_wait_returns_and_close_ends_the_thread() -> None:
    # Released later, on the saver's daemon thread while the interpreter finalizes, torch code
    # that gives up the GIL ended processes with "terminate called without an active
    # exception" (exit -6) right after the final save.
    import gc
    import weakref

    class Snapshot:
        pass

    saver = BackgroundSaver()
    held = Snapshot()
    released = weakref.ref(held)

    def job(held: Snapshot = held) -> None:
        del held

    saver.submit("final save", job)
    del held, job
    saver.wait()
    gc.collect()  # nothing but the job held it: no cycle keeps it either way
    assert released() is None
    thread = saver._thread
    assert thread is not None
    saver.close()
    assert not thread.is_alive()
