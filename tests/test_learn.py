"""`evtrain learn`: real CartPole runs, in process and through the CLI."""

from __future__ import annotations

import json
import os
import re
import signal
import stat
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
import torch
import yaml
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from evtrain import (
    Bus,
    ExportEvent,
    PropertyEvent,
    RunFinished,
    RunStarted,
    RunStatus,
    SaveEvent,
    StatsEvent,
    signals,
)
from evtrain.errors import ConfigError, RunFolderError, SpaceMismatchError
from evtrain.run.checkpoints.checkpoint import load_checkpoint
from evtrain.run.learn import learn
from evtrain.testing import Recorder
from tests.helpers import (
    config,
    hparams_dashboard,
    isolated_python,
    run_cli,
    run_config,
)
from tests.helpers import (
    tensorboard_steps as scalar_steps,
)


def test_run_emits_lifecycle_and_writes_the_run_folder(tmp_path: Path) -> None:
    recorder = Recorder()
    with Bus() as bus:
        recorder.connect(bus)
        result = learn(config(tmp_path), bus)
    run = tmp_path / "results" / "run"
    assert result.status is RunStatus.COMPLETED
    assert result.steps == {"CartPole": 1024}
    assert result.models == {"CartPole": run / "CartPole.onnx"}
    kinds = [type(e).__name__ for e in recorder.events if not isinstance(e, StatsEvent)]
    assert kinds[:2] == ["RunStarted", "PropertyEvent"] and kinds[-1] == "RunFinished"
    assert [type(e) for e in recorder.events].count(RunStarted) == 1
    assert [e.step for e in recorder.of(StatsEvent)] == [256, 512, 768, 1024]
    stats = recorder.of(StatsEvent)[-1].values
    for key in (
        "Environment/Cumulative Reward",
        "Losses/Policy Loss",
        "Losses/Value Loss",
        "Policy/Entropy",
        "Policy/Learning Rate",
        "Is Training",
        "Step",
    ):
        assert key in stats
    saves = [(e.step, e.path.name) for e in recorder.of(SaveEvent)]
    exports = [(e.step, e.path.name) for e in recorder.of(ExportEvent)]
    assert saves == [(512, "CartPole-512.pt"), (1024, "CartPole-1024.pt")]
    assert exports == [
        (512, "CartPole-512.onnx"),
        (1024, "CartPole-1024.onnx"),
        (1024, "CartPole.onnx"),
    ]
    assert recorder.of(RunFinished)[0].status is RunStatus.COMPLETED
    assert recorder.of(PropertyEvent)[0].value["hyperparameters"]["batch_size"] == 64
    # keep_checkpoints: 1 -> only the last pair stays, plus checkpoint.pt and the final model
    files = sorted(str(p.relative_to(run)) for p in run.rglob("*") if p.is_file())
    assert [f for f in files if "tfevents" not in f] == [
        ".evtrain-lock",  # the run's lock (docs/run-folder.md)
        ".evtrain-run",  # the marker: what --force may remove
        "CartPole.onnx",
        "CartPole/CartPole-1024.onnx",
        "CartPole/CartPole-1024.pt",
        "CartPole/checkpoint.pt",
        "configuration.yaml",
        "run_logs/timers.json",
        "run_logs/training_status.json",
    ]
    assert scalar_steps(run / "CartPole", "Environment/Cumulative Reward") == [256, 512, 768, 1024]
    configuration = yaml.safe_load((run / "configuration.yaml").read_text())
    assert configuration["behaviors"]["CartPole"]["hyperparameters"]["batch_size"] == 64
    timers = json.loads((run / "run_logs" / "timers.json").read_text())
    assert "CartPole.Environment.CumulativeReward.mean" in timers["gauges"]
    assert "evtrain_writers.tensorboard.TensorboardWriter" in timers["bus"]
    # The timer tree, ML-Agents' format: 1024 steps = 8 advances of 4 envs x 32 steps; the
    # checkpoint at 512 is a snapshot while training, the final one after; both are written
    # on the saver's thread (its timers start at the root).
    assert timers["name"] == "root" and timers["count"] == 1
    assert set(timers["children"]) == {"build", "train", "snapshot", "save_model"}
    assert timers["children"]["snapshot"]["count"] == 1
    train = timers["children"]["train"]["children"]
    assert train["snapshot"]["count"] == 1 and "save_model" not in train
    assert train["advance"]["count"] == 8
    assert {n: c["count"] for n, c in train["advance"]["children"].items()} == {
        "rollout": 8,
        "update": 8,
    }
    save = timers["children"]["save_model"]
    assert save["count"] == 2
    assert {n: c["count"] for n, c in save["children"].items()} == {"checkpoint": 2, "export": 2}
    node = timers["children"]["train"]
    assert node["total"] >= sum(c["total"] for c in node["children"].values()) > 0
    assert node["self"] == pytest.approx(
        node["total"] - sum(c["total"] for c in node["children"].values())
    )


def test_two_runs_on_one_bus_keep_their_files_apart(tmp_path: Path) -> None:
    recorder = Recorder()
    with Bus() as bus:
        recorder.connect(bus)
        learn(config(tmp_path, run_id="a", max_steps=256, checkpoint_interval=256), bus)
        learn(config(tmp_path, run_id="b", max_steps=512, checkpoint_interval=512), bus)
        assert bus.metrics()["evtrain_writers.tensorboard.TensorboardWriter"].delivered > 0
    results = tmp_path / "results"
    assert scalar_steps(results / "a" / "CartPole", "Environment/Cumulative Reward") == [256]
    assert scalar_steps(results / "b" / "CartPole", "Environment/Cumulative Reward") == [256, 512]
    assert [e.run_id for e in recorder.of(RunFinished)] == ["a", "b"]
    # Each run's timers.json times that run only: b saved once (at its end), a twice.
    for run_id, advances in (("a", 2), ("b", 4)):
        timers = json.loads((results / run_id / "run_logs" / "timers.json").read_text())
        assert timers["children"]["train"]["children"]["advance"]["count"] == advances
        assert timers["children"]["save_model"]["count"] == 1


def test_trainer_refusing_the_environment_is_a_config_error(tmp_path: Path) -> None:
    options = config(tmp_path, trainer_type="sac", hyperparameters={})
    options["env_settings"]["env_id"] = "tests.action_envs:unbounded_pendulum"
    with pytest.raises(SpaceMismatchError, match="SAC needs a bounded Box, a Discrete or a Mul"):
        learn(options)
    assert not (tmp_path / "results" / "run").exists()  # the fixed rerun needs no --force


def test_existing_run_needs_resume_or_force(tmp_path: Path) -> None:
    learn(config(tmp_path, max_steps=256, checkpoint_interval=256))
    with pytest.raises(RunFolderError) as info:
        learn(config(tmp_path, max_steps=256))
    assert str(info.value) == (
        f"run 'run' already exists in {tmp_path / 'results' / 'run'}. Use --resume "
        "(checkpoint_settings.resume) to continue it, --force (checkpoint_settings.force) to "
        "overwrite it, or choose another --run-id (checkpoint_settings.run_id)."
    )
    missing = config(tmp_path, run_id="nope")
    missing["checkpoint_settings"]["resume"] = True
    with pytest.raises(RunFolderError, match="cannot resume run 'nope'"):
        learn(missing)


def test_resume_continues_step_count_and_curves(tmp_path: Path) -> None:
    learn(config(tmp_path, max_steps=512))
    first = load_checkpoint(tmp_path / "results/run/CartPole/checkpoint.pt")
    resumed = config(tmp_path, max_steps=1024)
    resumed["checkpoint_settings"]["resume"] = True
    recorder = Recorder()
    with Bus() as bus:
        recorder.connect(bus)
        result = learn(resumed, bus)
    assert first["step"] == 512 and result.steps == {"CartPole": 1024}
    assert [e.step for e in recorder.of(StatsEvent)] == [768, 1024]
    folder = tmp_path / "results/run/CartPole"
    assert len(list(folder.glob("events.out.tfevents.*"))) == 2  # resume keeps the first file
    assert scalar_steps(folder, "Environment/Cumulative Reward") == [256, 512, 768, 1024]


def test_force_starts_over(tmp_path: Path) -> None:
    learn(config(tmp_path, max_steps=512))
    forced = config(tmp_path, max_steps=256, checkpoint_interval=256)
    forced["checkpoint_settings"]["force"] = True
    assert learn(forced).steps == {"CartPole": 256}
    folder = tmp_path / "results/run/CartPole"
    assert not (folder / "CartPole-512.pt").exists()
    assert scalar_steps(folder, "Environment/Cumulative Reward") == [256]


def test_initialize_from_loads_weights_at_step_zero(tmp_path: Path) -> None:
    learn(config(tmp_path, run_id="teacher", max_steps=512))
    teacher = load_checkpoint(tmp_path / "results/teacher/CartPole/checkpoint.pt")["agent"]
    # A learning rate of 1e-10 keeps the one update from moving the weights measurably.
    frozen = {"batch_size": 64, "buffer_size": 128, "num_epoch": 2, "learning_rate": 1e-10}
    student = config(tmp_path, run_id="student", max_steps=128, hyperparameters=frozen)
    student["checkpoint_settings"]["initialize_from"] = "teacher"
    recorder = Recorder()
    with Bus() as bus:
        recorder.connect(bus)
        learn(student, bus)
    # 128 < summary_freq: the final summary only, counted from step 0
    assert [e.step for e in recorder.of(StatsEvent)] == [128]
    assert [e.step for e in recorder.of(SaveEvent)] == [128]
    state = load_checkpoint(tmp_path / "results/student/CartPole/checkpoint.pt")
    assert state["step"] == 128
    for key, value in teacher.items():
        assert torch.allclose(state["agent"][key], value, atol=1e-6), key
    fresh = config(tmp_path, run_id="fresh", max_steps=128, hyperparameters=frozen)
    learn(fresh)
    fresh_agent = load_checkpoint(tmp_path / "results/fresh/CartPole/checkpoint.pt")["agent"]
    assert any(not torch.allclose(fresh_agent[k], teacher[k], atol=1e-3) for k in teacher)


def test_inference_runs_the_policy_without_training(tmp_path: Path) -> None:
    learn(config(tmp_path, max_steps=256, checkpoint_interval=256))
    before = load_checkpoint(tmp_path / "results/run/CartPole/checkpoint.pt")
    options = config(tmp_path, max_steps=512)
    options["checkpoint_settings"]["inference"] = True
    recorder = Recorder()
    with Bus() as bus:
        recorder.connect(bus)
        learn(options, bus)
    after = load_checkpoint(tmp_path / "results/run/CartPole/checkpoint.pt")
    assert all(torch.equal(before["agent"][k], after["agent"][k]) for k in before["agent"])
    events = recorder.of(StatsEvent)
    assert [e.step for e in events] == [256, 512]
    assert all(e.values["Is Training"].aggregated_value == 0.0 for e in events)
    assert recorder.of(SaveEvent) == []


def test_cli_config_errors_are_one_line_without_traceback(tmp_path: Path) -> None:
    bad = config(tmp_path)
    bad["behaviors"]["CartPole"]["hyperparameters"]["learning_rat"] = 1e-3
    bad["env_settings"]["env_id"] = "CartPol-v1"
    result = run_config(tmp_path, bad, name="bad.yaml")
    assert result.returncode == 2
    assert result.stderr == (
        "evtrain: error: behaviors.CartPole.hyperparameters.learning_rat: unknown key "
        "(did you mean learning_rate?)\n"
    )
    del bad["behaviors"]["CartPole"]["hyperparameters"]["learning_rat"]
    result = run_config(tmp_path, bad, name="bad.yaml")
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert "env_settings.env_id: 'CartPol-v1' is not a Gymnasium environment" in result.stderr
    assert "did you mean CartPole-v1" in result.stderr


def test_cli_flags_override_yaml_and_sigint_saves_then_exits_zero(tmp_path: Path) -> None:
    long = config(tmp_path, max_steps=10_000_000, summary_freq=512, checkpoint_interval=10**7)
    (tmp_path / "long.yaml").write_text(yaml.safe_dump(long))
    proc = subprocess.Popen(
        [
            isolated_python(),
            "-m",
            "evtrain",
            "learn",
            "long.yaml",
            "--run-id",
            "flagged",
            "--num-envs",
            "2",
            "--seed",
            "5",
        ],
        cwd=tmp_path,
        stderr=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stderr is not None
    lines = []
    for line in proc.stderr:  # wait for the first summary: training is under way
        lines.append(line)
        if "CartPole. Step:" in line:
            break
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    stderr = "".join(lines) + err
    assert proc.returncode == 0, stderr
    assert "SIGINT received: finishing the current update, then saving and exporting." in stderr
    run = tmp_path / "results" / "flagged"
    status = json.loads((run / "run_logs" / "training_status.json").read_text())
    final = status["CartPole"]["final_checkpoint"]
    assert final["file_path"].endswith("CartPole.onnx") and final["steps"] > 0
    state = load_checkpoint(run / "CartPole" / "checkpoint.pt")
    assert state["step"] == final["steps"]
    options = yaml.safe_load((run / "configuration.yaml").read_text())
    assert options["env_settings"]["num_envs"] == 2 and options["env_settings"]["seed"] == 5
    assert f"policy exported to {run / 'CartPole.onnx'}" in out
    # The last lines say where the curves are and how to go on from where the run stopped.
    assert out.splitlines()[-2:] == [
        f"TensorBoard: tensorboard --logdir {tmp_path / 'results'}",
        f"Interrupted at step {final['steps']:,}. Continue with: evtrain learn long.yaml "
        "--seed 5 --num-envs 2 --run-id flagged --resume",
    ]
    # No HParams session end: the one a --resume writes will be the first, so it counts.
    assert hparams_dashboard(run.parent).sessions["flagged/CartPole"].status == "STATUS_UNKNOWN"


def test_second_sigint_aborts_without_torn_files_and_says_what_it_left(tmp_path: Path) -> None:
    # No checkpoint is due before the end, so every .pt or .onnx is the final save's; the
    # second interrupt is sent once its .pt exists, while it traces the policy for ONNX.
    long = config(tmp_path, max_steps=10_000_000, summary_freq=512, checkpoint_interval=10**7)
    (tmp_path / "long.yaml").write_text(yaml.safe_dump(long))
    proc = subprocess.Popen(
        [isolated_python(), "-m", "evtrain", "learn", "long.yaml"],
        cwd=tmp_path,
        stderr=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stderr is not None
    for line in proc.stderr:
        if "CartPole. Step: 1536" in line:
            break
    proc.send_signal(signal.SIGINT)
    for line in proc.stderr:  # the first one was seen: the run is stopping cleanly
        if "SIGINT received" in line:
            break
    run = tmp_path / "results" / "run"
    deadline = time.monotonic() + 60
    while not list((run / "CartPole").glob("CartPole-*.pt")):  # the final save has begun
        assert proc.poll() is None and time.monotonic() < deadline
        time.sleep(0.005)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert "evtrain: aborted" in err
    assert not [p for p in run.rglob("*.tmp")]  # no half-written file left behind
    # The message names exactly the files the interrupted final save wrote.
    written = {
        str(p.relative_to(run)) for p in run.rglob("*") if p.is_file() and "tfevents" not in p.name
    } - {"configuration.yaml", "run_logs/timers.json", ".evtrain-lock", ".evtrain-run"}
    [message] = [line for line in err.splitlines() if line.startswith("[WARNING] Aborted")]
    match = re.fullmatch(
        r"\[WARNING\] Aborted: the final save of CartPole at step (\d+) wrote (.+) before it "
        r"was interrupted\. Every file on disk is complete\.",
        message,
    )
    assert match is not None, message
    named = match[2].split(", ") if match[2] != "no file" else []
    assert set(named) == written
    step = int(match[1])
    order = [
        f"CartPole/CartPole-{step}.pt",
        "CartPole/checkpoint.pt",
        f"CartPole/CartPole-{step}.onnx",
        "run_logs/training_status.json",
        "CartPole.onnx",
    ]
    assert named == order[: len(named)]  # in the order the save writes them
    if "CartPole/checkpoint.pt" in named:  # the last complete checkpoint loads
        assert load_checkpoint(run / "CartPole" / "checkpoint.pt")["step"] == step


def test_every_file_of_a_run_follows_the_umask(tmp_path: Path) -> None:
    previous = os.umask(0o027)
    try:
        learn(config(tmp_path, max_steps=256, checkpoint_interval=256))
    finally:
        os.umask(previous)
    run = tmp_path / "results" / "run"
    expected = 0o666 & ~0o027
    timers = stat.S_IMODE((run / "run_logs" / "timers.json").stat().st_mode)
    assert timers == stat.S_IMODE((run / "configuration.yaml").stat().st_mode) == expected
    modes = {
        str(p.relative_to(run)): oct(stat.S_IMODE(p.stat().st_mode))
        for p in run.rglob("*")
        if p.is_file()
    }
    assert modes == {name: oct(expected) for name in modes}


def test_run_shorter_than_a_rollout_and_summary_freq_warns_and_writes_a_final_summary(
    tmp_path: Path,
) -> None:
    short = config(tmp_path, max_steps=100, summary_freq=256)  # rollouts of 128 steps
    result = run_config(tmp_path, short, name="short.yaml")
    assert result.returncode == 0, result.stderr
    # Each on a line of its own (the console writer's thread may log between them).
    lines = result.stderr.splitlines()
    assert (
        "[WARNING] CartPole: max_steps 100 is less than one rollout (buffer_size 128): the run "
        "will take 128 steps"
    ) in lines
    assert (
        "[WARNING] CartPole: summary_freq 256 exceeds max_steps 100: only the final summary "
        "will be written"
    ) in lines
    assert "[INFO] CartPole. Step: 128. Time Elapsed:" in result.stderr
    assert "CartPole: 128 steps, policy exported to" in result.stdout
    assert result.stdout.splitlines()[-1] == (
        f"TensorBoard: tensorboard --logdir {tmp_path / 'results'}"
    )
    run = tmp_path / "results" / "run"
    assert load_checkpoint(run / "CartPole" / "checkpoint.pt")["step"] == 128
    # One rollout, and TensorBoard is not empty: the final summary is at the last step.
    assert scalar_steps(run / "CartPole", "Environment/Cumulative Reward") == [128]
    assert scalar_steps(run / "CartPole", "Losses/Policy Loss") == [128]


def test_cli_run_is_a_session_of_the_hparams_dashboard(tmp_path: Path) -> None:
    result = run_config(tmp_path, config(tmp_path, max_steps=256, summary_freq=128))
    assert result.returncode == 0, result.stderr

    dashboard = hparams_dashboard(tmp_path / "results")
    assert list(dashboard.sessions) == ["run/CartPole"]
    session = dashboard.sessions["run/CartPole"]
    assert session.status == "STATUS_SUCCESS"
    assert {
        name: session.hparams[name]
        for name in ("trainer_type", "hyperparameters/batch_size", "network_settings/hidden_units")
    } == {
        "trainer_type": "ppo",
        "hyperparameters/batch_size": 64.0,
        "network_settings/hidden_units": 32.0,
    }
    assert session.hparams["max_steps"] == 256.0
    assert dashboard.columns["trainer_type"] == "DATA_TYPE_STRING"
    # The metrics are the behavior's stat keys; each value is the last scalar of its curve.
    assert {"Environment/Cumulative Reward", "Losses/Policy Loss"} <= set(dashboard.metrics)
    assert not {"Step", "Is Training"} & set(dashboard.metrics)  # hidden, never written
    folder = tmp_path / "results" / "run" / "CartPole"
    accumulator = EventAccumulator(str(folder), size_guidance={"scalars": 0})
    accumulator.Reload()
    for tag in dashboard.metrics:
        last = accumulator.Scalars(tag)[-1]
        assert session.metrics[tag] == (last.step, last.value)
    assert session.metrics["Losses/Policy Loss"][0] == 256


def test_max_steps_between_rollouts_stops_at_the_next_rollout_end(tmp_path: Path) -> None:
    recorder = Recorder()
    with Bus() as bus:
        recorder.connect(bus)
        result = learn(config(tmp_path, max_steps=200, summary_freq=128), bus)
    assert result.steps == {"CartPole": 256}
    # 256 is a summary boundary: the last advance wrote it, the final summary adds nothing.
    assert [e.step for e in recorder.of(StatsEvent)] == [128, 256]
    assert [e.step for e in recorder.of(SaveEvent)] == [256]


def test_final_summary_holds_the_period_after_the_last_boundary(tmp_path: Path) -> None:
    recorder = Recorder()
    with Bus() as bus:
        recorder.connect(bus)
        learn(config(tmp_path, max_steps=640, summary_freq=256), bus)
    events = recorder.of(StatsEvent)
    assert [e.step for e in events] == [256, 512, 640]
    assert [e.values["Step"].aggregated_value for e in events] == [256, 512, 640]
    assert all(e.values["Losses/Policy Loss"].num == 2 for e in events[:2])
    assert events[2].values["Losses/Policy Loss"].num == 1  # only the update of 512..640
    run = tmp_path / "results" / "run"
    assert scalar_steps(run / "CartPole", "Losses/Policy Loss") == [256, 512, 640]


def test_summary_freq_below_a_rollout_warns_and_writes_one_summary_per_rollout(
    tmp_path: Path,
) -> None:
    # 4 environments x 128 steps: one rollout crosses four multiples of summary_freq 128.
    wide = config(
        tmp_path,
        max_steps=1024,
        summary_freq=128,
        time_horizon=128,
        hyperparameters={"batch_size": 128, "buffer_size": 512, "num_epoch": 1},
    )
    result = run_config(tmp_path, wide, name="wide.yaml")
    assert result.returncode == 0, result.stderr
    assert (
        "[WARNING] CartPole: summary_freq 128 is less than one rollout (buffer_size 512): "
        "summaries can only be written once per rollout, each labelled with the last multiple "
        "of 128 it reaches\n"
    ) in result.stderr
    assert [line.split(".")[1] for line in result.stderr.splitlines() if ". Step: " in line] == [
        " Step: 512",
        " Step: 1024",
    ]
    folder = tmp_path / "results" / "run" / "CartPole"
    # One point per rollout, at the last boundary it crossed: no point is made up for the
    # boundaries in between (the rollout's episodes and losses cannot be split among them).
    assert scalar_steps(folder, "Environment/Cumulative Reward") == [512, 1024]
    assert scalar_steps(folder, "Losses/Policy Loss") == [512, 1024]


def test_cli_unwritable_results_dir_names_the_path_and_the_fix(tmp_path: Path) -> None:
    # Tests run as root, where a mode bit blocks nothing: a file in the way fails for anyone.
    (tmp_path / "somefile").write_text("")
    result = run_config(tmp_path, config(tmp_path), "--results-dir", "somefile/sub")
    assert result.returncode == 2
    assert result.stderr == (
        "evtrain: error: cannot write the run folder somefile/sub/run (Not a directory: "
        "somefile/sub/run). Choose another --results-dir, or make somefile/sub a folder you "
        "can write to.\n"
    )


@pytest.mark.parametrize(
    ("device", "message"),
    [
        (
            "cuda",
            "torch_settings.device: 'cuda': no CUDA device is available to this torch "
            f"({torch.__version__}); use --torch-device cpu (torch_settings.device), or leave "
            "the device unset to use CUDA only when it is available",
        ),
        (
            "gpu0",
            "torch_settings.device: 'gpu0' is not a torch device; use cpu, cuda or cuda:N "
            "(--torch-device)",
        ),
    ],
)
@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a torch without CUDA")
def test_cli_unusable_torch_device_is_refused_before_the_run(
    tmp_path: Path, device: str, message: str
) -> None:
    result = run_config(tmp_path, config(tmp_path), "--torch-device", device)
    assert (result.returncode, result.stderr) == (2, f"evtrain: error: {message}\n")
    assert not (tmp_path / "results").exists()


def test_cuda_index_beyond_the_device_count_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    from evtrain.config.options import TorchSettings

    # This machine has no GPU: pretend to one so the index check itself runs.
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    TorchSettings(device="cuda:1").check_device()
    with pytest.raises(ConfigError) as info:
        TorchSettings(device="cuda:2").check_device()
    assert info.value.problems == (
        "torch_settings.device: 'cuda:2': only 2 CUDA device(s) available (cuda:0 to cuda:1); "
        "use one of those, or leave the device unset",
    )


def test_cli_accepts_what_ml_agents_accepts_with_a_note_each(tmp_path: Path) -> None:
    options = config(tmp_path, max_steps=384)
    options["engine_settings"] = {"no_graphics": True, "time_scale": 20}
    options["env_settings"].update(base_port=5005, env_path=None)  # a Gymnasium run ignores them
    (tmp_path / "run.yaml").write_text(yaml.safe_dump(options))
    # --num-envs 3 does not divide buffer_size 128: rounded up, not refused
    result = run_cli("run.yaml", "--num-envs", "3", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    lines = result.stderr.splitlines()
    notes = [line for line in lines if "ML-Agents" in line or "rounded" in line]
    assert notes == [
        "[INFO] behaviors.CartPole.hyperparameters.buffer_size: 128 rounded up to 192, a "
        "multiple of batch_size (64) and of the number of environments (3)",
    ]
    assert (tmp_path / "results/run/CartPole.onnx").exists()
    assert "time_scale: 20" in (tmp_path / "results/run/configuration.yaml").read_text()


def test_batch_size_above_buffer_size_is_accepted_as_ml_agents_accepts_it() -> None:
    from evtrain import RunOptions

    # ML-Agents validates no relation between the two; the rollout rounds (a real run of it:
    # tests/test_mlagents_keys.py)
    above = {"batch_size": 512, "buffer_size": 256}
    RunOptions.from_dict({"behaviors": {"CartPole": {"hyperparameters": above}}})
    # ML-Agents' 3DBall values: accepted (the rollout rounds 12000 up to 12032)
    ball = {"batch_size": 64, "buffer_size": 12000}
    RunOptions.from_dict({"behaviors": {"3DBall": {"hyperparameters": ball}}})


def test_cli_yaml_syntax_error_names_the_file_line_and_column(tmp_path: Path) -> None:
    (tmp_path / "bad.yaml").write_text("behaviors:\n  CartPole:\n    max_steps: [1, 2\n")
    result = run_cli("bad.yaml", cwd=tmp_path)
    assert result.returncode == 2
    assert result.stderr == (
        "evtrain: error: bad.yaml: not valid YAML: while parsing a flow sequence\n"
        '  in "bad.yaml", line 3, column 16\n'
        "expected ',' or ']', but got '<stream end>'\n"
        '  in "bad.yaml", line 4, column 1\n'
    )


def test_a_hung_subscriber_on_the_callers_bus_does_not_keep_learn_from_returning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """It never returns from its first event; its inbox drops the oldest, so emit never
    waits.  Without bus.drain_timeout, learn would wait for it at the final save and again
    at the end, for as long as it hangs."""
    import threading

    released = threading.Event()
    options = config(tmp_path, max_steps=512)
    options["bus"] = {"drain_timeout": 0.5}
    outcome: list[Any] = []
    with Bus() as bus:
        bus.connect(
            signals.stats,
            lambda event: released.wait(120),
            name="hung",
            capacity=2,
            overflow="drop_oldest",
        )
        runner = threading.Thread(target=lambda: outcome.append(learn(options, bus)))
        runner.start()
        runner.join(timeout=100)
        returned = not runner.is_alive()
        released.set()
        runner.join()
    assert returned, "learn() waited for the hung subscriber"
    assert outcome[0].status is RunStatus.COMPLETED and outcome[0].steps == {"CartPole": 512}
    behind = [r.getMessage() for r in caplog.records if "still behind" in r.getMessage()]
    assert behind and all("hung" in message for message in behind)
