"""SIGINT, SIGTERM and SIGHUP at chosen moments of a real ``evtrain learn`` process.

The moments are held open by the plugins of ``tests/interrupt_plugins/interrupt_gates.py``: the
final export waits at a gate (its ``.pt`` and ``checkpoint.pt`` are written by then), or the drain
does; the test sends the interrupt once the gate is reached, waits for the run's answer on
stderr, then opens the gate.  No sleeps: every wait is on a file or a log line, bounded.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime as ort  # type: ignore[import-untyped]  # ships no type information
import pytest
import yaml

from evtrain.run.checkpoints.checkpoint import load_checkpoint
from tests.helpers import isolated_python

GATES = Path(__file__).parent / "interrupt_plugins"
WAIT_S = 60.0


class Learn:
    """``evtrain learn`` in a subprocess, its stderr collected by a thread as it comes."""

    def __init__(self, folder: Path, max_steps: int, **env: str) -> None:
        config = {
            "behaviors": {
                "CartPole": {
                    "trainer_type": "gated_ppo",
                    "hyperparameters": {"batch_size": 64, "buffer_size": 128, "num_epoch": 2},
                    "network_settings": {"hidden_units": 32},
                    "max_steps": max_steps,
                    "time_horizon": 32,
                    "summary_freq": 256,
                    "checkpoint_interval": 10**7,
                    "keep_checkpoints": 1,
                }
            },
            "env_settings": {"env_id": "CartPole-v1", "num_envs": 4, "seed": 3},
            "checkpoint_settings": {"run_id": "run", "results_dir": str(folder / "results")},
            # A gated subscriber is not stalled: no warning among the lines the tests read.
            "bus": {"stall_timeout": 600},
        }
        (folder / "config.yaml").write_text(yaml.safe_dump(config))
        self.run = folder / "results" / "run"
        self.lines: list[str] = []
        self._changed = threading.Condition()
        self.proc = subprocess.Popen(
            [isolated_python(), "-m", "evtrain", "learn", "config.yaml", "--plugins", str(GATES)],
            cwd=folder,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, **env},
        )
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            with self._changed:
                self.lines.append(line.rstrip("\n"))
                self._changed.notify_all()
        with self._changed:  # the end of the output: the waits need not wait any more
            self.proc.wait()
            self._changed.notify_all()

    def wait_for_line(self, text: str) -> str:
        """The first stderr line containing ``text``, once it has come."""
        with self._changed:
            found = self._changed.wait_for(
                lambda: any(text in line for line in self.lines) or self.proc.poll() is not None,
                WAIT_S,
            )
            matches = [line for line in self.lines if text in line]
        assert found and matches, f"no line with {text!r}:\n" + "\n".join(self.lines)
        return matches[0]

    def wait_for_file(self, path: Path) -> None:
        deadline = time.monotonic() + WAIT_S
        while not path.exists():
            assert self.proc.poll() is None, "\n".join(self.lines)
            assert time.monotonic() < deadline, f"{path} never appeared"
            time.sleep(0.01)

    def finish(self) -> tuple[int, str, str]:
        """Exit code, stdout and stderr of the process, once it has ended."""
        assert self.proc.stdout is not None
        self.proc.wait(WAIT_S)  # stdout holds a few lines: it never fills the pipe
        out = self.proc.stdout.read()
        self._reader.join(WAIT_S)
        self.close()
        return self.proc.returncode, out, "\n".join(self.lines)

    def close(self) -> None:
        """Kill the process if it still runs, and close its pipes."""
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(WAIT_S)
        self._reader.join(WAIT_S)
        for pipe in (self.proc.stdout, self.proc.stderr):
            if pipe is not None:
                pipe.close()


@pytest.fixture
def learn(tmp_path: Path) -> Iterator[Callable[..., Learn]]:
    """Starts :class:`Learn` in ``tmp_path``; whatever a failing test left running is
    killed."""
    started: list[Learn] = []

    def start(max_steps: int, **env: str) -> Learn:
        started.append(Learn(tmp_path, max_steps, **env))
        return started[-1]

    yield start
    for process in started:
        process.close()


def assert_final_save_complete(run: Path, step: int) -> None:
    """The final checkpoint and ONNX are on disk, whole: the state loads at ``step``, and
    onnxruntime loads the policy and acts with it."""
    assert load_checkpoint(run / "CartPole" / "checkpoint.pt")["step"] == step
    assert load_checkpoint(run / "CartPole" / f"CartPole-{step}.pt")["step"] == step
    session = ort.InferenceSession(str(run / "CartPole.onnx"), providers=["CPUExecutionProvider"])
    actions = session.run(None, {"obs": np.zeros((3, 4), dtype=np.float32)})[0]
    assert actions.shape[0] == 3
    status = json.loads((run / "run_logs" / "training_status.json").read_text())
    final: dict[str, Any] = status["CartPole"]["final_checkpoint"]
    assert (final["steps"], Path(final["file_path"])) == (step, run / "CartPole.onnx")
    assert not list(run.rglob("*.tmp"))


@pytest.mark.parametrize("name", ["SIGTERM", "SIGINT", "SIGHUP"])
def test_an_interrupt_during_the_final_save_lets_it_finish_and_exits_zero(
    tmp_path: Path, learn: Callable[..., Learn], name: str
) -> None:
    run = learn(512, EVTRAIN_TEST_EXPORT_GATE=str(tmp_path))
    run.wait_for_file(tmp_path / "exporting")  # the final save is tracing its export
    run.proc.send_signal(getattr(signal, name))
    run.wait_for_line(f"{name} received")
    (tmp_path / "release").touch()
    code, out, err = run.finish()
    assert code == 0, err
    assert (
        f"[WARNING] {name} received during the final save: finishing it. Send it again to "
        "abort at once." in err.splitlines()
    )
    assert_final_save_complete(run.run, 512)
    # The run had reached max_steps: it completed, nothing to resume.
    assert out.splitlines() == [
        f"CartPole: 512 steps, policy exported to {run.run / 'CartPole.onnx'}",
        f"TensorBoard: tensorboard --logdir {tmp_path / 'results'}",
    ]


def test_sigterm_during_the_drain_lets_the_writers_finish_and_exits_zero(
    tmp_path: Path, learn: Callable[..., Learn]
) -> None:
    run = learn(512, EVTRAIN_TEST_DRAIN_GATE=str(tmp_path))
    run.wait_for_file(tmp_path / "draining")  # run_finished is being delivered
    run.proc.send_signal(signal.SIGTERM)
    run.wait_for_line("SIGTERM received")
    (tmp_path / "drained").touch()
    code, _, err = run.finish()
    assert code == 0, err
    assert (
        "[WARNING] SIGTERM received while the run closes: finishing the saves under way and the "
        "drain of the writers (at most bus.drain_timeout). Send it again to abort at once."
        in err.splitlines()
    )
    assert_final_save_complete(run.run, 512)


def test_a_second_interrupt_during_the_drain_aborts_at_once(
    tmp_path: Path, learn: Callable[..., Learn]
) -> None:
    run = learn(512, EVTRAIN_TEST_DRAIN_GATE=str(tmp_path))
    run.wait_for_file(tmp_path / "draining")  # a subscriber holds run_finished
    run.proc.send_signal(signal.SIGTERM)
    run.wait_for_line("SIGTERM received while the run closes")
    run.proc.send_signal(signal.SIGTERM)
    # The process ends although the subscriber never lets go (its gate stays closed).
    code, _, err = run.finish()
    assert code == 143, err
    lines = err.splitlines()
    assert lines[-4] == (
        "[WARNING] SIGTERM received again: aborting as soon as the file being written is complete."
    )
    # What the subscriber never got is reported (a writer still closing may be named too).
    assert lines[-3].startswith(
        "[WARNING] Bus closed before its subscribers finished (Aborted): 'drain_gate' (1 event "
        "undelivered, still running, abandoned)"
    )
    assert lines[-2:] == [
        "[WARNING] Aborted: the final save of CartPole was complete. Every file on disk is "
        "complete.",
        "evtrain: aborted",
    ]
    assert_final_save_complete(run.run, 512)


def test_learn_help_lists_the_exit_codes() -> None:
    result = subprocess.run(
        [isolated_python(), "-m", "evtrain", "learn", "--help"],
        capture_output=True,
        text=True,
        timeout=WAIT_S,
        check=False,
    )
    assert result.returncode == 0
    assert result.stdout.split("\ninterrupts:", 1)[1] == (
        " the first SIGINT (Ctrl-C), SIGTERM or SIGHUP stops the run cleanly: the current\n"
        "update finishes, then the final save and export, then the drain of the writers; during "
        "the\nfinal save it lets the save finish. A second interrupt aborts at once and says which "
        "files of\nthe interrupted save are on disk (each complete).\n\n"
        "exit codes:\n"
        "  0    the run ended with its final save complete (at max_steps, or stopped by an "
        "interrupt)\n"
        "  1    the run failed (e.g. a non-finite reward or loss; another rank died)\n"
        "  2    usage or configuration error; nothing was trained\n"
        "  130  aborted by a second interrupt: SIGINT (129 SIGHUP, 143 SIGTERM: 128 + its "
        "number)\n\n"
        'see docs/run-folder.md, "Exit codes and interrupts".\n'
    )


def test_an_interrupt_ends_the_wait_for_subscribers_before_the_final_save(
    tmp_path: Path, learn: Callable[..., Learn]
) -> None:
    run = learn(512, EVTRAIN_TEST_FLUSH_GATE=str(tmp_path), EVTRAIN_TEST_FLUSH_STEP="512")
    run.wait_for_file(tmp_path / "flushing")  # a subscriber holds the final summary
    run.proc.send_signal(signal.SIGTERM)
    # The final save goes ahead while the subscriber still holds its event.
    run.wait_for_line("Final save of CartPole at step 512")
    (tmp_path / "flushed").touch()
    code, _, err = run.finish()
    assert code == 0, err
    # The console writer prints the summaries on its own thread, so its line of step 512 may
    # fall anywhere among the main thread's: the main thread's lines are the ones in order.
    lines = [line for line in err.splitlines() if not line.startswith("[INFO] CartPole. Step:")]
    start = lines.index(
        "[WARNING] SIGTERM received during the final save: finishing it. Send it again to "
        "abort at once."
    )
    assert lines[start + 1 : start + 3] == [
        "[INFO] Not waiting for subscribers before the final save: a stop was requested.",
        "[INFO] Final save of CartPole at step 512: checkpoint and export",
    ]
    assert "[INFO] CartPole. Step: 512." in err  # the held summary reached the console too
    assert_final_save_complete(run.run, 512)


def test_sighup_during_training_stops_cleanly_with_a_checkpoint(
    tmp_path: Path, learn: Callable[..., Learn]
) -> None:
    run = learn(10**7)
    run.wait_for_line("CartPole. Step: 256.")
    run.proc.send_signal(signal.SIGHUP)
    code, out, err = run.finish()
    assert code == 0, err
    assert (
        "[WARNING] SIGHUP received: finishing the current update, then saving and exporting. "
        "Send it again to abort at once." in err.splitlines()
    )
    step = load_checkpoint(run.run / "CartPole" / "checkpoint.pt")["step"]
    assert step >= 256 and step % 128 == 0
    assert_final_save_complete(run.run, step)
    assert out.splitlines()[-1] == (
        f"Interrupted at step {step:,}. Continue with: evtrain learn config.yaml --plugins "
        f"{GATES} --run-id run --resume"
    )


@pytest.mark.parametrize(("name", "code"), [("SIGTERM", 143), ("SIGINT", 130), ("SIGHUP", 129)])
def test_a_second_interrupt_during_the_final_save_aborts_and_names_what_was_written(
    tmp_path: Path, learn: Callable[..., Learn], name: str, code: int
) -> None:
    run = learn(512, EVTRAIN_TEST_EXPORT_GATE=str(tmp_path))
    run.wait_for_file(tmp_path / "exporting")
    run.proc.send_signal(getattr(signal, name))
    run.wait_for_line(f"{name} received during the final save")
    run.proc.send_signal(getattr(signal, name))
    run.wait_for_line(f"{name} received again")
    # A third interrupt does not cut short the file being written.
    run.proc.send_signal(getattr(signal, name))
    run.wait_for_line(f"{name} received: already aborting")
    # The export being traced completes; the save stops before its next file.
    (tmp_path / "release").touch()
    returncode, _, err = run.finish()
    assert returncode == code, err
    lines = err.splitlines()
    assert lines[-4:] == [
        f"[WARNING] {name} received again: aborting as soon as the file being written is complete.",
        f"[WARNING] {name} received: already aborting, as soon as the file being written is "
        "complete.",
        "[WARNING] Aborted: the final save of CartPole at step 512 wrote CartPole/CartPole-512.pt"
        ", CartPole/checkpoint.pt, CartPole/CartPole-512.onnx before it was interrupted. Every "
        "file on disk is complete.",
        "evtrain: aborted",
    ]
    written = {
        str(p.relative_to(run.run))
        for p in run.run.rglob("*")
        if p.is_file() and "tfevents" not in p.name
    }
    assert written == {
        ".evtrain-run",  # the run folder's marker and lock (run-folder.md)
        ".evtrain-lock",
        "configuration.yaml",
        "run_logs/timers.json",
        "CartPole/CartPole-512.pt",
        "CartPole/checkpoint.pt",
        "CartPole/CartPole-512.onnx",
    }
    assert load_checkpoint(run.run / "CartPole" / "checkpoint.pt")["step"] == 512
    ort.InferenceSession(
        str(run.run / "CartPole" / "CartPole-512.onnx"), providers=["CPUExecutionProvider"]
    )
