"""Evaluations that go wrong never end the run: an evaluation environment that raises, hangs
(``evaluation.timeout``) or renders no frame, a worker killed with ``kill -9``, interrupts sent
to the whole process group, a NaN return; each is reported (a warning, a stat) and training
goes on to its final save.  The faults are those of ``tests/evaluation_envs.py``."""

from __future__ import annotations

import contextlib
import json
import logging
import math
import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
import torch
import yaml

from evtrain import (
    ArtifactEvent,
    Bus,
    EvaluationEvent,
    ExportEvent,
    RunStatus,
    SaveEvent,
    StatsEvent,
)
from evtrain.run.checkpoints.checkpoint import load_checkpoint
from evtrain.run.learn import learn
from evtrain.testing import Recorder
from tests.helpers import ROOT, clean_env, fill, isolated_python

ENV_ID = "tests.evaluation_envs:cartpole"
WAIT_S = 120.0


def config(tmp_path: Path, evaluation: dict[str, Any], max_steps: int = 1536) -> dict[str, Any]:
    """A tiny CartPole PPO run evaluated every 512 steps, its evaluation environments given
    ``evaluation``'s ``env_kwargs`` (the fault)."""
    return {
        "behaviors": {
            "CartPole": {
                "trainer_type": "ppo",
                "hyperparameters": {"batch_size": 64, "buffer_size": 128, "num_epoch": 1},
                "network_settings": {"hidden_units": 16},
                "max_steps": max_steps,
                "time_horizon": 32,
                "summary_freq": 256,
                "checkpoint_interval": 10**7,
                "keep_checkpoints": 1,
                "evaluation": {"every": 512, "episodes": 2, "num_envs": 2, **evaluation},
            }
        },
        "env_settings": {"env_id": ENV_ID, "num_envs": 4, "seed": 3},
        "checkpoint_settings": {"run_id": "run", "results_dir": str(tmp_path / "results")},
    }


def run(options: dict[str, Any]) -> tuple[RunStatus, Recorder]:
    recorder = Recorder()
    with Bus() as bus:
        recorder.connect(bus)
        result = learn(options, bus)
    return result.status, recorder


def failed_count(recorder: Recorder, key: str) -> float:
    """The sum of ``key`` over every summary."""
    return sum(e.values[key].sum for e in recorder.of(StatsEvent) if key in e.values)


def failures(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.levelno == logging.WARNING and "failed and is skipped" in r.getMessage()
    ]


def test_an_evaluation_environment_that_raises_fails_one_evaluation_not_the_run(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    once = tmp_path / "once"
    once.mkdir()
    evaluation = {"env_kwargs": {"fault": "raise", "once": str(once)}}
    status, recorder = run(config(tmp_path, evaluation))
    assert status is RunStatus.COMPLETED
    # the first worker raised at 512; its replacement played the next ones
    assert [e.step for e in recorder.of(EvaluationEvent)] == [1024, 1536]
    assert failures(caplog) == [
        "CartPole: the evaluation at step 512 failed and is skipped (the evaluation of CartPole "
        "failed: RuntimeError: the evaluation environment broke); training goes on, and a new "
        "evaluation worker plays the next one"
    ]
    assert failed_count(recorder, "Evaluation/Failed Evaluations") == 1.0
    assert (tmp_path / "results" / "run" / "CartPole.onnx").exists()  # the final save


def test_a_worker_killed_with_kill_9_is_replaced_and_the_run_goes_on(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The first evaluation hangs (training waits for it at the next due step) until the test
    kills its worker: the run reports it and goes on with a new worker."""
    once = tmp_path / "once"
    once.mkdir()
    killed: list[int] = []

    def kill_the_worker() -> None:
        marker = once / "faulted"
        wait_for_file(marker)
        killed.append(int(marker.read_text()))
        os.kill(killed[0], signal.SIGKILL)

    killer = threading.Thread(target=kill_the_worker)
    killer.start()
    evaluation = {"env_kwargs": {"fault": "hang", "once": str(once)}}
    try:
        status, recorder = run(config(tmp_path, evaluation))
    finally:
        killer.join(WAIT_S)
    assert killed and status is RunStatus.COMPLETED
    assert [e.step for e in recorder.of(EvaluationEvent)] == [1024, 1536]
    assert failures(caplog) == [
        "CartPole: the evaluation at step 512 failed and is skipped (the evaluation process of "
        "CartPole ended without answering (exit code -9); its error, if any, is in the log "
        "above); training goes on, and a new evaluation worker plays the next one"
    ]
    assert failed_count(recorder, "Evaluation/Failed Evaluations") == 1.0
    assert (tmp_path / "results" / "run" / "CartPole.onnx").exists()


def test_an_evaluation_that_outlasts_its_timeout_is_killed_and_the_run_goes_on(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    once = tmp_path / "once"
    once.mkdir()
    evaluation = {"timeout": 3, "env_kwargs": {"fault": "hang", "once": str(once)}}
    status, recorder = run(config(tmp_path, evaluation))
    assert status is RunStatus.COMPLETED
    assert [e.step for e in recorder.of(EvaluationEvent)] == [1024, 1536]
    assert failures(caplog) == [
        "CartPole: the evaluation at step 512 failed and is skipped (the evaluation of CartPole "
        "took more than 3 s (behaviors.CartPole.evaluation.timeout); its worker was killed); "
        "training goes on, and a new evaluation worker plays the next one"
    ]
    pid = int((once / "faulted").read_text())
    with pytest.raises(ProcessLookupError):  # killed, and reaped
        os.kill(pid, 0)


def test_an_environment_that_renders_no_frame_loses_its_videos_not_its_evaluations(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """``render_mode`` set to ``None`` in ``env_kwargs``: no video can be made; each one says
    why in one line naming its file, and the evaluations count."""
    evaluation = {"env_kwargs": {"render_mode": None}, "video": {"max_frames": 5}}
    status, recorder = run(config(tmp_path, evaluation))
    assert status is RunStatus.COMPLETED
    assert [e.step for e in recorder.of(EvaluationEvent)] == [512, 1024, 1536]
    assert recorder.of(ArtifactEvent) == []
    videos = tmp_path / "results" / "run" / "CartPole" / "videos"
    said = [r.getMessage() for r in caplog.records if "was not written" in r.getMessage()]
    assert said == [
        f"CartPole: a video of the evaluation at step {step} was not written: "
        f"{videos / f'CartPole-{step}-episode-0.gif'}: ValueError: the evaluation environment "
        "rendered no frame (render() returned None, render_mode None); set render_mode: "
        "rgb_array in behaviors.CartPole.evaluation.env_kwargs, or remove it there; the "
        "evaluation counts, and the run goes on"
        for step in (512, 1024, 1536)
    ]
    # counted in the next summary: the evaluation at 1024 starts only once the one at 512 is
    # collected, however slow it was, so its failure is in the summary at 1280 at the latest;
    # the last evaluation's, after the last summary, is in the log only
    assert failed_count(recorder, "Evaluation/Failed Videos") >= 1.0
    assert failures(caplog) == []


def test_a_nan_return_is_never_the_best(tmp_path: Path) -> None:
    status, recorder = run(config(tmp_path, {"env_kwargs": {"fault": "nan"}}, max_steps=1024))
    assert status is RunStatus.COMPLETED
    evaluations = recorder.of(EvaluationEvent)
    assert [e.step for e in evaluations] == [512, 1024]
    assert all(math.isnan(e.mean_return) for e in evaluations)
    assert [e for e in recorder.events if isinstance(e, (SaveEvent, ExportEvent)) and e.best] == []
    assert not (tmp_path / "results" / "run" / "CartPole" / "best.json").exists()


class Cli:
    """``evtrain learn`` in a subprocess, in a session (process group) of its own, its stderr
    collected by a thread as it comes."""

    def __init__(
        self,
        folder: Path,
        options: dict[str, Any],
        preexec_fn: Callable[[], object] | None = None,
    ) -> None:
        (folder / "config.yaml").write_text(yaml.safe_dump(options))
        self.lines: list[str] = []
        self._changed = threading.Condition()
        self.proc = subprocess.Popen(
            [isolated_python(), "-m", "evtrain", "learn", "config.yaml"],
            cwd=folder,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=clean_env(
                PYTHONPATH=os.pathsep.join(str(ROOT / p) for p in ("src", "writers", ""))
            ),
            start_new_session=True,
            preexec_fn=preexec_fn,
        )
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            with self._changed:
                self.lines.append(line.rstrip("\n"))
                self._changed.notify_all()
        with self._changed:
            self.proc.wait()
            self._changed.notify_all()

    def wait_for_line(self, text: str) -> None:
        with self._changed:
            found = self._changed.wait_for(
                lambda: any(text in line for line in self.lines) or self.proc.poll() is not None,
                WAIT_S,
            )
            seen = any(text in line for line in self.lines)
        assert found and seen, f"no line with {text!r}:\n" + "\n".join(self.lines)

    def finish(self) -> tuple[int, str, str]:
        """Exit code, stdout and stderr, once the process has ended (by itself, in time)."""
        assert self.proc.stdout is not None
        code = self.proc.wait(WAIT_S)
        out = self.proc.stdout.read()  # a few lines: they never filled the pipe
        self._reader.join(WAIT_S)
        return code, out, "\n".join(self.lines)

    def close(self) -> None:
        """Kill what is left of the session (a failed test), and close the pipes."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(WAIT_S)
        self._reader.join(WAIT_S)
        for pipe in (self.proc.stdout, self.proc.stderr):
            if pipe is not None:
                pipe.close()


@pytest.fixture
def cli(tmp_path: Path) -> Iterator[Callable[..., Cli]]:
    started: list[Cli] = []

    def start(options: dict[str, Any], **kwargs: Any) -> Cli:
        started.append(Cli(tmp_path, options, **kwargs))
        return started[-1]

    yield start
    for process in started:
        process.close()


def wait_for_file(path: Path) -> None:
    """Wait until ``path`` exists and holds something."""
    deadline = time.monotonic() + WAIT_S
    while not (path.exists() and path.read_text()):
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.01)


def assert_final_save(tmp_path: Path, stderr: str) -> None:
    """The final checkpoint is on disk and loads; nothing printed a traceback."""
    assert "Traceback" not in stderr
    folder = tmp_path / "results" / "run" / "CartPole"
    assert load_checkpoint(folder / "checkpoint.pt")["step"] >= 1024
    assert (tmp_path / "results" / "run" / "CartPole.onnx").exists()


def test_sigterm_while_training_waits_for_a_hung_evaluation_stops_with_the_final_save(
    tmp_path: Path, cli: Callable[..., Cli]
) -> None:
    """The evaluation at 512 hangs (timeout 600 s); at 1024 training waits for it.  A first
    SIGTERM ends the wait: the run makes its final save and exits 0."""
    once = tmp_path / "once"
    once.mkdir()
    evaluation = {"env_kwargs": {"fault": "hang", "once": str(once)}}
    learn_ = cli(config(tmp_path, evaluation, max_steps=10**6))
    learn_.wait_for_line("CartPole. Step: 1024.")
    os.kill(learn_.proc.pid, signal.SIGTERM)
    code, _, stderr = learn_.finish()
    assert code == 0, stderr
    assert "SIGTERM received: finishing the current update" in stderr
    assert_final_save(tmp_path, stderr)


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP])
def test_an_interrupt_to_the_whole_process_group_stops_the_run_with_its_final_save(
    tmp_path: Path, cli: Callable[..., Cli], signum: signal.Signals
) -> None:
    """As systemd, SLURM, Kubernetes or a closed terminal send it (``os.killpg``), with an
    evaluation in flight (it hangs): the worker leaves the signal to the run, which stops
    cleanly, and says nothing of the worker."""
    once = tmp_path / "once"
    once.mkdir()
    evaluation = {"env_kwargs": {"fault": "hang", "once": str(once)}}
    learn_ = cli(config(tmp_path, evaluation, max_steps=10**6))
    learn_.wait_for_line("CartPole. Step: 1024.")
    wait_for_file(once / "faulted")  # the evaluation at 512 is in flight, and hangs
    os.killpg(learn_.proc.pid, signum)
    code, _, stderr = learn_.finish()
    assert code == 0, stderr
    assert f"{signum.name} received: finishing the current update" in stderr
    assert "failed and is skipped" not in stderr and "Exception" not in stderr
    assert_final_save(tmp_path, stderr)


def test_a_sighup_ignored_at_start_stays_ignored(tmp_path: Path, cli: Callable[..., Cli]) -> None:
    """``nohup evtrain learn ... &``: SIGHUP is ignored when the run starts, so a SIGHUP (the
    terminal closed) leaves it running to ``max_steps``."""
    options = config(tmp_path, {}, max_steps=1024)
    del options["behaviors"]["CartPole"]["evaluation"]

    def nohup() -> None:
        signal.signal(signal.SIGHUP, signal.SIG_IGN)

    learn_ = cli(options, preexec_fn=nohup)
    learn_.wait_for_line("CartPole. Step: 256.")
    os.kill(learn_.proc.pid, signal.SIGHUP)
    code, _, stderr = learn_.finish()
    assert code == 0, stderr
    assert "SIGHUP" not in stderr
    assert "CartPole. Step: 1024." in stderr
    checkpoint = load_checkpoint(tmp_path / "results" / "run" / "CartPole" / "checkpoint.pt")
    assert checkpoint["step"] == 1024


def tensors(value: Any) -> Iterator[np.ndarray]:
    """Every tensor in a checkpoint's state, as arrays."""
    if isinstance(value, torch.Tensor):
        yield value.detach().cpu().numpy()
    elif isinstance(value, dict):
        for item in value.values():
            yield from tensors(item)
    elif isinstance(value, (list, tuple)):
        for item in value:
            yield from tensors(item)


def assert_one_unit(folder: Path, model: Path) -> None:
    """``best.json``, ``best.pt`` and the best ONNX describe the same step: the record's step is
    the checkpoint's, and the ONNX holds the checkpoint's weights (which every update
    changes); no staged file is left."""
    record = json.loads((folder / "best.json").read_text())
    state = load_checkpoint(folder / "best.pt")
    assert state["step"] == record["step"]
    weights = [t for t in tensors(state) if t.ndim == 2 and t.size > 16]
    graph = onnx.load(str(model)).graph
    initializers = [onnx.numpy_helper.to_array(i) for i in graph.initializer]
    matrices = [i for i in initializers if i.ndim == 2 and i.size > 16]
    assert matrices
    for matrix in matrices:
        assert any(w.shape == matrix.shape and np.array_equal(w, matrix) for w in weights)
    assert not list(folder.glob("*.next")) and not list(model.parent.glob("*.next"))


@pytest.mark.parametrize("renamed", ["best.json.next", "best.pt.next", "CartPole-best.onnx.next"])
def test_the_best_model_stays_one_unit_after_kill_9_between_its_writes(
    tmp_path: Path, renamed: str
) -> None:
    """Every evaluation beats the last (``improving``): the second best model's unit is killed
    (SIGKILL in place of a rename, ``tests/evaluation_kills.py``) before its commit, or after
    it, between the renames of its files; ``--resume`` finishes or discards it, and the files
    agree."""
    evaluation = {"episodes": 1, "num_envs": 1, "env_kwargs": {"improving": True}}
    # killed at the evaluation of 1024; resumed, it evaluates (and saves a best) once more
    options = config(tmp_path, evaluation, max_steps=1536)
    options["behaviors"]["CartPole"]["checkpoint_interval"] = 512
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(options))
    run_folder = tmp_path / "results" / "run"
    folder = run_folder / "CartPole"
    staged = (run_folder if renamed.endswith(".onnx.next") else folder) / renamed
    env = clean_env(PYTHONPATH=os.pathsep.join(str(ROOT / p) for p in ("src", "writers", "")))
    learn_ = ["learn", "config.yaml"]
    # the second rename of the staged file: the second unit's (the first one's is the first)
    killed = subprocess.run(
        [isolated_python(), "-m", "tests.evaluation_kills", str(staged), "2", *learn_],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    assert staged.exists()  # killed before renaming it
    resumed = subprocess.run(
        [isolated_python(), "-m", "evtrain", *learn_, "--resume"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert resumed.returncode == 0, resumed.stderr
    assert_one_unit(folder, run_folder / "CartPole-best.onnx")


def test_the_worker_ends_with_a_run_killed_with_kill_9(
    tmp_path: Path, cli: Callable[..., Cli]
) -> None:
    """The worker plays an evaluation that hangs when the run is killed: it ends too."""
    once = tmp_path / "once"
    once.mkdir()
    evaluation = {"env_kwargs": {"fault": "hang", "once": str(once)}}
    learn_ = cli(config(tmp_path, evaluation, max_steps=10**6))
    learn_.wait_for_line("CartPole. Step: 1024.")
    wait_for_file(once / "faulted")
    worker = int((once / "faulted").read_text())
    os.kill(learn_.proc.pid, signal.SIGKILL)
    learn_.proc.wait(WAIT_S)
    deadline = time.monotonic() + WAIT_S
    while Path(f"/proc/{worker}").exists() and _state(worker) != "Z":
        assert time.monotonic() < deadline, "the worker outlived the run"
        time.sleep(0.01)


def _state(pid: int) -> str:
    """The state letter of process ``pid`` (``Z``: ended, not reaped yet), or ``""``."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, IndexError):
        return ""


def test_a_full_disk_while_writing_a_video_is_one_line_naming_the_file(
    tmp_path: Path, disk: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The videos folder of a resumed run is on a full filesystem (the rest of the run is
    not): each video is one warning naming its file, no temporary file is left, and the run
    completes."""
    first = config(tmp_path, {}, max_steps=512)
    del first["behaviors"]["CartPole"]["evaluation"]
    assert run(first)[0] is RunStatus.COMPLETED
    filler = fill(disk)
    videos = tmp_path / "results" / "run" / "CartPole" / "videos"
    videos.mkdir()
    # A mount, not a link: --resume refuses a run folder holding a symbolic link.
    subprocess.run(["mount", "--bind", str(disk), str(videos)], check=True)
    try:
        options = config(tmp_path, {"video": {"max_frames": 20}}, max_steps=1536)
        options["checkpoint_settings"]["resume"] = True
        status, recorder = run(options)
    finally:
        subprocess.run(["umount", "-l", str(videos)], check=False)
    assert status is RunStatus.COMPLETED
    assert [e.step for e in recorder.of(EvaluationEvent)] == [1024, 1536]
    assert recorder.of(ArtifactEvent) == []
    said = [r for r in caplog.records if "was not written" in r.getMessage()]
    assert [r.getMessage() for r in said] == [
        f"CartPole: a video of the evaluation at step {step} was not written: "
        f"{videos / f'CartPole-{step}-episode-0.gif'}: [Errno 28] No space left on device; "
        "the evaluation counts, and the run goes on"
        for step in (1024, 1536)
    ]
    assert all(r.exc_info is None for r in said)  # one line each, no traceback
    assert sorted(p.name for p in disk.iterdir()) == [filler.name, "probe"]  # fill's own
    assert (tmp_path / "results" / "run" / "CartPole.onnx").exists()
