"""Data-parallel runs under a real ``torchrun``: 2 processes, gloo, CPU.

The trainers are the built-in PPO and SAC, run as the plugin types ``probe_ppo`` and
``probe_sac`` of ``tests/dist_plugins/dist_probe.py`` (loaded with ``--plugins``), which add
only a record of each rank's final state; a subscriber there logs what each rank's bus
delivered.  Each ``torchrun`` takes 10-20 s, so the runs are module fixtures shared by tests.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest
import torch

from evtrain.run.checkpoints.checkpoint import load_checkpoint
from tests.dist_plugins.dist_probe import env_steps
from tests.helpers import free_port
from tests.shared_torchrun_runs import sac_on_two_ranks
from tests.torchrun_runs import (
    CARTPOLE,
    PROBE,
    STANDALONE,
    TORCHRUN,
    Run,
    launch,
    ppo,
    tensorboard_points,
    torchrun,
)


@pytest.fixture(scope="module")
def ppo_run(tmp_path_factory: pytest.TempPathFactory) -> Run:
    run = torchrun(tmp_path_factory.mktemp("ppo"), ppo(1024), CARTPOLE)
    assert run.result.returncode == 0, run.result.stderr[-3000:]
    return run


def test_ranks_end_with_identical_parameters_and_a_global_step(ppo_run: Run) -> None:
    rank0, rank1 = ppo_run.trainer(0), ppo_run.trainer(1)
    assert rank0["world_size"] == rank1["world_size"] == 2
    # networks, normaliser statistics and Adam moments, all bit-identical
    assert rank0["checksum"] == rank1["checksum"]
    assert rank0["local_step"] == rank1["local_step"] == 512
    assert rank0["step"] == rank1["step"] == rank0["local_step"] + rank1["local_step"] == 1024


def test_only_rank_zero_saves_and_exports_once_per_checkpoint(ppo_run: Run) -> None:
    rank0 = [e for e in ppo_run.events(0) if e["signal"] in ("save", "export")]
    run = ppo_run.run
    assert [(e["signal"], e["step"], e["path"]) for e in rank0] == [
        ("save", 512, str(run / "Agent" / "Agent-512.pt")),
        ("export", 512, str(run / "Agent" / "Agent-512.onnx")),
        ("save", 1024, str(run / "Agent" / "Agent-1024.pt")),
        ("export", 1024, str(run / "Agent" / "Agent-1024.onnx")),
        ("export", 1024, str(run / "Agent.onnx")),
    ]
    assert [e["signal"] for e in ppo_run.events(1)] == ["stats"] * 4 + ["run_finished"]
    assert load_checkpoint(run / "Agent" / "checkpoint.pt")["step"] == 1024


def test_rank_zero_writes_the_only_tensorboard_file_without_duplicates(ppo_run: Run) -> None:
    folder = ppo_run.run / "Agent"
    assert len(list(folder.glob("events.out.tfevents.*"))) == 1
    points = tensorboard_points(folder)
    assert max(points.values()) == 1
    steps = sorted(step for tag, step in points if tag == "Environment/Cumulative Reward")
    assert steps == [256, 512, 768, 1024]
    assert sorted(p.name for p in (ppo_run.run / "run_logs").iterdir()) == [
        "elastic.json",  # which torchrun run started it (docs/distributed.md, Elastic restarts)
        "timers.json",
        "training_status.json",
    ]


def test_rank_zero_reports_the_episodes_of_every_rank(ppo_run: Run) -> None:
    reported = [e for e in ppo_run.events(0) if e["signal"] == "stats"]
    assert [e["step"] for e in reported] == [256, 512, 768, 1024]
    assert {e["rank"] for e in reported} == {0}
    episodes = ppo_run.trainer(0)["episodes"] + ppo_run.trainer(1)["episodes"]
    assert sum(e["episodes"] for e in reported) == episodes
    # rank 1 reports its own episodes (to its console); they are part of rank 0's figures
    own = [e for e in ppo_run.events(1) if e["signal"] == "stats"]
    assert sum(e["episodes"] for e in own) == ppo_run.trainer(1)["episodes"] > 0


def test_console_lines_say_which_rank_speaks(ppo_run: Run) -> None:
    lines = [line for line in ppo_run.result.stderr.splitlines() if "Agent. Step: 1024." in line]
    assert sorted(line.split("Rank: ")[1][0] for line in lines) == ["0", "1"]
    assert ppo_run.result.stderr.count("Hyperparameters for behavior name Agent") == 1


def test_resume_on_two_ranks_continues_every_curve_once(
    ppo_run: Run, tmp_path_factory: pytest.TempPathFactory
) -> None:
    folder = tmp_path_factory.mktemp("resume")
    shutil.copytree(ppo_run.folder / "results", folder / "results")
    run = torchrun(folder, ppo(1536), CARTPOLE, "--resume")
    assert run.result.returncode == 0, run.result.stderr[-3000:]
    rank0, rank1 = run.trainer(0), run.trainer(1)
    assert rank0["checksum"] == rank1["checksum"]
    assert rank0["step"] == 1536 and rank0["local_step"] == rank1["local_step"] == 256
    folder_tb = run.run / "Agent"
    points = tensorboard_points(folder_tb)
    assert max(points.values()) == 1
    steps = sorted(step for tag, step in points if tag == "Environment/Cumulative Reward")
    assert steps == [256, 512, 768, 1024, 1280, 1536]


def test_inference_on_two_ranks_counts_global_steps_and_saves_nothing(
    ppo_run: Run, tmp_path_factory: pytest.TempPathFactory
) -> None:
    folder = tmp_path_factory.mktemp("inference")
    shutil.copytree(ppo_run.folder / "results", folder / "results")
    before = sorted(p.name for p in (folder / "results" / "run" / "Agent").iterdir())
    counting = {**CARTPOLE, "env_id": "dist_probe:counting_cartpole"}
    run = torchrun(folder, ppo(1024), counting, "--resume", "--inference")
    assert run.result.returncode == 0, run.result.stderr[-3000:]
    # max_steps is global, as in training: each rank's 4 environments took 512 steps together
    assert [env_steps(run.probe, rank) for rank in (0, 1)] == [512, 512]
    reported = [e for e in run.events(0) if e["signal"] == "stats"]
    assert [e["step"] for e in reported] == [256, 512, 768, 1024]
    own = [e for e in run.events(1) if e["signal"] == "stats"]
    assert [e["step"] for e in own] == [256, 512, 768, 1024]
    assert sum(e["episodes"] for e in reported) > sum(e["episodes"] for e in own) > 0
    assert "Not Training." in run.result.stderr
    for rank in (0, 1):
        assert not [e for e in run.events(rank) if e["signal"] in ("save", "export")]
    after = sorted(p.name for p in (run.run / "Agent").iterdir())
    # inference summaries are a category of their own, Agent/inference (docs/configuration.md)
    kept = sorted([*(n for n in before if "tfevents" not in n), "inference"])
    assert [n for n in after if "tfevents" not in n] == kept
    assert len([n for n in after if "tfevents" in n]) == 1  # training's
    assert len(list((run.run / "Agent" / "inference").glob("*tfevents*"))) == 1  # rank 0's


def test_the_multi_node_form_with_two_agents(tmp_path: Path) -> None:
    """What two machines run (``--nnodes 2`` and a c10d rendezvous), as two torchrun agents
    of one process each on this machine."""
    rendezvous = (
        "--nnodes=2",
        "--nproc-per-node=1",
        "--rdzv-backend=c10d",
        f"--rdzv-endpoint=127.0.0.1:{free_port()}",
        "--rdzv-id=evtrain-test",
    )
    processes = [
        launch(tmp_path, ppo(512), CARTPOLE, launcher=(*rendezvous, f"--node-rank={node}"))
        for node in (0, 1)
    ]
    outputs = []
    for process in processes:
        try:
            outputs.append(process.communicate(timeout=180))
        finally:
            process.kill()
    assert [p.returncode for p in processes] == [0, 0], [err[-2000:] for _, err in outputs]
    run = Run(tmp_path, subprocess.CompletedProcess([], 0), 0.0)
    rank0, rank1 = run.trainer(0), run.trainer(1)
    assert rank0["world_size"] == rank1["world_size"] == 2
    assert rank0["checksum"] == rank1["checksum"]
    assert rank0["step"] == 512 and rank0["local_step"] == rank1["local_step"] == 256
    assert sorted(out for out, _ in outputs) == [
        "",
        f"Agent: 512 steps, policy exported to {run.run / 'Agent.onnx'}\n"
        f"TensorBoard: tensorboard --logdir {run.run.parent}\n",
    ]
    assert len(list((run.run / "Agent").glob("events.out.tfevents.*"))) == 1


def test_sac_on_two_ranks(tmp_path_factory: pytest.TempPathFactory) -> None:
    """SAC's ranks step their own environments and end with identical networks and one global
    step (the session's 2-rank SAC run, which tests/test_elastic.py resumes on one rank)."""
    run = sac_on_two_ranks(tmp_path_factory)
    assert run.result.returncode == 0, run.result.stderr[-3000:]
    rank0, rank1 = run.trainer(0), run.trainer(1)
    assert rank0["checksum"] == rank1["checksum"]
    assert rank0["local_step"] == rank1["local_step"] == 128
    assert rank0["step"] == 256
    assert [e["step"] for e in run.events(0) if e["signal"] == "stats"] == [128, 256]


def test_a_dying_rank_stops_the_others_with_a_clear_error(tmp_path: Path) -> None:
    # The moment that once left a `.checkpoint.pt.*.tmp` behind, made certain: rank 0's save
    # of step 256 is held in flight (its export waits at the probe's gate) while rank 1 dies
    # (its 50th step: global step 400) and torchrun then sends rank 0 SIGTERM.  The save
    # completes, every file whole, and rank 0 still exits with the error.
    behavior = {**ppo(10**6), "trainer_type": "probe_ppo", "checkpoint_interval": 256}
    envs = {
        "env_id": "dist_probe:dying_cartpole",
        "env_kwargs": {"die_at": 50, "dying_rank": 1},
        "num_envs": 4,
        "seed": 5,
    }
    gate = tmp_path / "gate"
    gate.mkdir()
    # torchrun looks for dead workers every 3 s: rank 0 has usually seen the failed
    # collective and is closing (waiting for its save) when torchrun's SIGTERM comes.
    process = launch(
        tmp_path,
        behavior,
        envs,
        launcher=(*STANDALONE, "--monitor-interval", "3"),
        extra_env={"EVTRAIN_PROBE_EXPORT_GATE": str(gate)},
    )
    assert process.stderr is not None
    lines = []
    try:
        for line in process.stderr:  # ends at torchrun's exit at the latest
            lines.append(line)
            if "SIGTERM received" in line:
                break
        # The save may still be on its way to the gate (the exporter's first imports).
        deadline = time.monotonic() + 60
        while not (gate / "exporting").exists():
            assert time.monotonic() < deadline, "".join(lines)[-3000:]
            time.sleep(0.01)
        (gate / "release").touch()
        _, rest = process.communicate(timeout=120)
    finally:
        process.kill()
    stderr = "".join(lines) + rest
    assert process.returncode != 0
    # Under load torchrun's SIGTERM may come before rank 0 has seen the failed collective
    # (then it is a stop request during training) or after (a signal while the run closes);
    # either way the save in flight completes.
    assert "[WARNING] SIGTERM received" in stderr, stderr[-3000:]
    assert "[ERROR] rank 0: " in stderr, stderr[-3000:]
    assert "most likely because another rank stopped" in stderr
    run = tmp_path / "results" / "run"
    checkpoint = load_checkpoint(run / "Agent" / "checkpoint.pt")
    assert checkpoint["step"] == 256
    assert (run / "Agent" / "Agent-256.onnx").exists()
    assert not list((run / "Agent").glob(".*.tmp"))
    assert all(torch.isfinite(t).all() for t in checkpoint["agent"].values())


def test_ctrl_c_stops_both_ranks_at_one_step_and_rank_zero_saves(tmp_path: Path) -> None:
    process = launch(tmp_path, {**ppo(10**6), "checkpoint_interval": 10**6}, CARTPOLE)
    first_stats = tmp_path / "probe" / "events-rank1.jsonl"
    deadline = time.monotonic() + 120
    while not first_stats.exists() and time.monotonic() < deadline:
        time.sleep(0.2)
    os.killpg(process.pid, signal.SIGINT)  # what Ctrl-C in a terminal does
    try:
        process.communicate(timeout=120)
    finally:
        process.kill()
    run = Run(tmp_path, subprocess.CompletedProcess(process.args, 0), 0.0)
    finished = [[e for e in run.events(r) if e["signal"] == "run_finished"] for r in (0, 1)]
    assert finished == [[{"signal": "run_finished", "status": "interrupted"}]] * 2
    saves = [e for e in run.events(0) if e["signal"] == "save"]
    step = load_checkpoint(run.run / "Agent" / "checkpoint.pt")["step"]
    assert [e["step"] for e in saves] == [step] and step % 128 == 0
    assert (run.run / "Agent.onnx").exists()
    assert not [e for e in run.events(1) if e["signal"] in ("save", "export")]


@pytest.mark.parametrize("ranks", [2, 3])
def test_world_collectives(ranks: int, tmp_path: Path) -> None:
    """2 ranks exchange tensors pairwise, 3 use gloo's all-reduce: same results."""
    script = str(PROBE / "world_check.py")
    result = subprocess.run(
        [str(TORCHRUN), "--standalone", "--nproc-per-node", str(ranks), script, str(tmp_path)],
        capture_output=True,
        text=True,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    lines = [json.loads(path.read_text()) for path in sorted(tmp_path.glob("rank*.json"))]
    by_rank = {line.pop("rank"): line for line in lines}
    assert sorted(by_rank) == list(range(ranks))
    mean = sum(range(1, ranks + 1)) / ranks
    everyone = [float(r) for r in range(ranks) for _ in range(r + 1)]
    for rank, got in by_rank.items():
        assert got["average"] == [mean] * 5
        assert got["broadcast"] == [0.0] * 3
        assert got["sum"] == [float(ranks), float(sum(range(ranks)))]
        assert got["any"] == [True, False]
        assert got["object"] == "from 0"
        assert got["gathered"] == [[float(r)] for r in range(ranks)]
        if rank == 0:
            assert got["merged"] == {"Environment/Cumulative Reward": everyone, "Step": [100.0]}
        else:  # other ranks keep their own period
            own = [float(rank)] * (rank + 1)
            assert got["merged"] == {"Environment/Cumulative Reward": own, "Step": [100.0 + rank]}
