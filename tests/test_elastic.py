"""Elastic ``torchrun``: a rank dies, torchrun starts the group again (``--max-restarts 1``),
and the run resumes from its checkpoint by itself — every writer holding every summary step
exactly once, one MLflow run, FINISHED (docs/distributed.md, "Elastic restarts").

Each run is 2 ranks x 4 CartPoles, a summary every 128 global steps (each update) and a
checkpoint every 512; in the first attempt only, the dying rank kills itself with SIGKILL at
its 100th vector step (global step 800), once the checkpoint of 512 is on disk (a save waits
for the writers to take its summaries, and for its export): rank 0 has written the summaries
of 640 and 768 past it, which the restarted group writes again and no writer may hold twice.
"""

from __future__ import annotations

import json
import os
import re
import select
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import attrs
import pytest
import yaml

from evtrain.run.checkpoints.checkpoint import load_checkpoint
from evtrain.run.checkpoints.elastic import RECORD
from tests.helpers import clean_env, csv_steps, evtrain_main, free_port, tensorboard_steps
from tests.shared_torchrun_runs import PENDULUM, SAC, sac_on_two_ranks
from tests.torchrun_runs import PROBE, TORCHRUN, ppo
from tests.writers.mlflow_server import MlflowServer
from tests.writers.wandb_files import records as wandb_records

MAX_STEPS = 1024
SUMMARY_FREQ = 128
CHECKPOINT = 512
DIE_AT = 100
"""The dying rank's vector step: global step 800 (2 ranks x 4 environments x 100)."""
DIES_AT_STEP = 2 * 4 * DIE_AT
EVERY_SUMMARY = list(range(SUMMARY_FREQ, MAX_STEPS + 1, SUMMARY_FREQ))
JOIN_MAX_STEPS = 2048
"""The join test's run: 2048 steps, a summary every 256 (its one rank trains alone, then two)."""
REWARD = "Environment/Cumulative Reward"
RDZV_CONF = "last_call_timeout=1,keep_alive_interval=1,keep_alive_max_attempt=5"
"""An elastic rendezvous that gives up on a lost node after 5 s instead of 15 (and waits 1 s,
not 30, for more nodes once it has the fewest it needs); shorter, and a node that is only slow
(two busy cores) is given up on too."""


@attrs.frozen
class Restarted:
    """A finished elastic run, and where it wrote."""

    folder: Path
    result: subprocess.CompletedProcess[str]
    experiment: str

    @property
    def run(self) -> Path:
        return self.folder / "results" / "run"

    def probe(self, rank: int) -> dict[str, Any]:
        record: dict[str, Any] = json.loads(
            (self.folder / "probe" / f"trainer-rank{rank}.json").read_text()
        )
        return record


def config(
    folder: Path,
    dying: dict[str, Any],
    writers: dict[str, Any],
    max_steps: int = MAX_STEPS,
    summary_freq: int = SUMMARY_FREQ,
) -> Path:
    """A 2-rank PPO run with ``writers`` (TensorBoard is a default one); ``dying``: the dying
    environment's settings, but for the step, the attempt and the checkpoint to wait for."""
    options = {
        "behaviors": {
            "Agent": {
                **ppo(max_steps),
                "summary_freq": summary_freq,
                "checkpoint_interval": CHECKPOINT,
                "keep_checkpoints": 2,
            }
        },
        "env_settings": {
            "env_id": "dist_probe:dying_cartpole",
            "env_kwargs": {
                "die_at": DIE_AT,
                "attempt": 0,
                "wait_for": str(folder / "results" / "run" / "Agent" / "checkpoint.pt"),
                **dying,
            },
            "num_envs": 4,
            "seed": 5,
        },
        "checkpoint_settings": {"run_id": "run", "results_dir": str(folder / "results")},
        "plugins": {"paths": [str(PROBE)]},
        "torch_settings": {"distributed_timeout": 60},
        "writers": writers,
    }
    path = folder / "config.yaml"
    path.write_text(yaml.safe_dump(options))
    return path


def run_env(folder: Path) -> dict[str, str]:
    """The probe plugins first, then the evtrain under test; one OpenMP thread per rank; and
    torchrun's rendezvous store kept from the workers, as docs/distributed.md says to."""
    paths = [str(PROBE), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
    return clean_env(
        EVTRAIN_PROBE_OUT=str(folder / "probe"),
        PYTHONPATH=os.pathsep.join(paths),
        OMP_NUM_THREADS="1",
        TORCH_DISABLE_SHARE_RDZV_TCP_STORE="1",
    )


def run_in(folder: Path, *command: str) -> subprocess.CompletedProcess[str]:
    """``command`` run in ``folder`` with :func:`run_env`'s environment; it must succeed."""
    result = subprocess.run(
        command,
        cwd=folder,
        capture_output=True,
        text=True,
        env=run_env(folder),
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-4000:]
    return result


@pytest.fixture(scope="module")
def restarted(
    tmp_path_factory: pytest.TempPathFactory, shared_mlflow_server: MlflowServer
) -> Iterator[Callable[[int], Restarted]]:
    """The run whose rank ``dying_rank`` died, made once per module for each rank."""
    made: dict[int, Restarted] = {}

    def make(dying_rank: int) -> Restarted:
        if dying_rank not in made:
            shared_mlflow_server.ensure_up()
            folder = tmp_path_factory.mktemp(f"rank{dying_rank}-dies")
            experiment = f"elastic-{folder.name}"
            mlflow = {"tracking_uri": shared_mlflow_server.uri, "experiment": experiment}
            wandb = {"mode": "offline", "project": "tests"}
            writers = {"csv": {}, "mlflow": mlflow, "wandb": wandb}
            path = config(folder, {"dying_rank": dying_rank}, writers)
            command = [str(TORCHRUN), "--standalone", "--nproc-per-node", "2"]
            result = subprocess.run(
                [*command, "--max-restarts", "1", "-m", "evtrain", "learn", str(path)],
                capture_output=True,
                text=True,
                env=run_env(folder),
                timeout=400,
                check=False,
            )
            (folder / "torchrun.log").write_text(result.stderr)  # to read when a test fails
            made[dying_rank] = Restarted(folder, result, experiment)
        return made[dying_rank]

    yield make


def wandb_steps(folder: Path) -> list[int]:
    """The steps of the rows in one offline wandb run folder, in order."""
    from wandb.proto import wandb_internal_pb2

    (log,) = folder.glob("run-*.wandb")
    steps = []
    for data in wandb_records(log):
        record = wandb_internal_pb2.Record()  # type: ignore[attr-defined]
        record.ParseFromString(data)
        if record.WhichOneof("record_type") == "history":
            row = {
                item.key or "/".join(item.nested_key): item.value_json
                for item in record.history.item
            }
            steps.append(int(row["_step"]))
    return steps


def mlflow_steps(uri: str, experiment: str, key: str) -> tuple[list[str], Counter[int]]:
    """The statuses of the experiment's runs, and how often each step of ``key`` was logged
    in its first run."""
    from mlflow import MlflowClient

    client = MlflowClient(uri)
    found = client.get_experiment_by_name(experiment)
    assert found is not None
    runs = client.search_runs([found.experiment_id])
    history = client.get_metric_history(runs[0].info.run_id, key)
    return [run.info.status for run in runs], Counter(metric.step for metric in history)


@pytest.mark.parametrize("dying_rank", [1, 0])
def test_a_killed_rank_is_restarted_and_the_run_resumes_by_itself(
    restarted: Callable[[int], Restarted], shared_mlflow_server: MlflowServer, dying_rank: int
) -> None:
    run = restarted(dying_rank)
    stderr = run.result.stderr
    assert run.result.returncode == 0, stderr[-4000:]
    # The ranks left stopped saying what comes next; torchrun started the group again, and
    # rank 0 said what it does.
    assert "torchrun starts the workers again, restart 1 of 1, to resume it" in stderr
    record = json.loads((run.run / "run_logs" / RECORD).read_text())
    elastic_id = record["torchelastic_run_id"]
    assert record == {"torchelastic_run_id": elastic_id, "restart_count": 1, "world_size": 2}
    line = re.compile(
        rf"^\[INFO\] torchrun restarted the workers \(restart 1 of run {elastic_id}; 2 ranks\): "
        rf"resuming from step (\d+) of {re.escape(str(run.run))}$",
        re.MULTILINE,
    )
    (resumed_at,) = [int(step) for step in line.findall(stderr)]
    assert resumed_at == CHECKPOINT
    # The restarted group finished the run from there, its ranks in step.
    rank0, rank1 = run.probe(0), run.probe(1)
    assert rank0["step"] == rank1["step"] == MAX_STEPS
    assert rank0["local_step"] == rank1["local_step"] == (MAX_STEPS - resumed_at) // 2
    assert rank0["checksum"] == rank1["checksum"]
    assert load_checkpoint(run.run / "Agent" / "checkpoint.pt")["step"] == MAX_STEPS
    # Rank 0's bus carried the summaries past the checkpoint twice, once from each group ...
    events = (run.folder / "probe" / "events-rank0.jsonl").read_text().splitlines()
    emitted = [e["step"] for e in map(json.loads, events) if e["signal"] == "stats"]
    again = list(range(CHECKPOINT + SUMMARY_FREQ, MAX_STEPS + 1, SUMMARY_FREQ))
    assert emitted[-len(again) :] == again
    if dying_rank == 1:  # a rank 0 that lived on delivered every summary of the first group
        assert emitted[: -len(again)] == list(range(SUMMARY_FREQ, DIES_AT_STEP, SUMMARY_FREQ))
    # ... and every writer holds every summary step once.
    folder = run.run / "Agent"
    assert tensorboard_steps(folder, REWARD) == EVERY_SUMMARY
    assert csv_steps(folder / "progress.csv") == EVERY_SUMMARY
    statuses, logged = mlflow_steps(shared_mlflow_server.uri, run.experiment, f"Agent/{REWARD}")
    assert statuses == ["FINISHED"]
    # (steps past MAX_STEPS: the test below continues this run on one rank)
    this_run = Counter({step: n for step, n in logged.items() if step <= MAX_STEPS})
    assert sorted(this_run) == EVERY_SUMMARY and set(this_run.values()) == {1}
    # wandb (offline): the restarted group continued the first group's run — one run id, an
    # offline folder per group — and logged no step twice, in order, to the end.
    wandb_id = json.loads((run.run / "run_logs" / "wandb.json").read_text())["run_id"]
    folders = sorted(run.run.glob("wandb/offline-run-*"))
    assert len(folders) == 2 and all(f.name.endswith(f"-{wandb_id}") for f in folders)
    first, second = (wandb_steps(folder) for folder in folders)
    assert first + second == sorted(set(first + second))
    assert set(first + second) <= set(EVERY_SUMMARY) and second[-1] == MAX_STEPS
    if dying_rank == 1:  # rank 0 lived on and finished the first group's wandb run
        assert first + second == EVERY_SUMMARY
    # A killed rank 0's rows that wandb had not written to its offline file yet are lost
    # (the steps up to what the wandb writer had handed it; docs/distributed.md): which ones
    # depends on the moment of the kill, so only what must hold is checked.


def test_a_two_rank_checkpoint_resumes_on_one_rank(
    restarted: Callable[[int], Restarted], shared_mlflow_server: MlflowServer, tmp_path: Path
) -> None:
    """What an elastic group that lost a node does: the global step, the schedules and the
    writers go on (the MLflow run of the 2-rank run too); the one rank steps its 4
    environments for the rest of ``max_steps``."""
    first = restarted(1)
    assert first.result.returncode == 0, first.result.stderr[-4000:]
    shutil.copytree(first.run.parent, tmp_path / "results")
    options = yaml.safe_load((first.folder / "config.yaml").read_text())
    options["behaviors"]["Agent"]["max_steps"] = MAX_STEPS + 256
    options["checkpoint_settings"]["results_dir"] = str(tmp_path / "results")
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(options))
    shared_mlflow_server.ensure_up()
    run_in(tmp_path, sys.executable, "-m", "evtrain", "learn", "config.yaml", "--resume")
    probe = json.loads((tmp_path / "probe" / "trainer-rank0.json").read_text())
    assert probe["world_size"] == 1
    assert probe["step"] == MAX_STEPS + 256 and probe["local_step"] == 256
    folder = tmp_path / "results" / "run" / "Agent"
    expected = list(range(SUMMARY_FREQ, MAX_STEPS + 257, SUMMARY_FREQ))
    assert tensorboard_steps(folder, REWARD) == expected
    assert csv_steps(folder / "progress.csv") == expected
    statuses, logged = mlflow_steps(shared_mlflow_server.uri, first.experiment, f"Agent/{REWARD}")
    assert statuses == ["FINISHED"]
    assert sorted(logged) == expected and set(logged.values()) == {1}


JOIN_ONCE_LISTENING = """
import socket, sys, time
from torch.distributed.run import main
print("imported", flush=True)
deadline = time.monotonic() + 120
while True:
    try:
        socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=1).close()
        break
    except OSError:
        assert time.monotonic() < deadline, "nothing listens on the rendezvous port"
        time.sleep(0.01)
main(sys.argv[2:])
"""
"""``python -c`` this, the rendezvous port and torchrun's arguments: a torchrun agent that
imports torchrun, prints ``imported``, then runs once something listens on that port."""


def agent(command: list[str], env: dict[str, str]) -> subprocess.Popen[str]:
    """One torchrun agent (a node), in a session of its own."""
    return subprocess.Popen(
        command,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )


def test_an_elastic_group_that_loses_a_node_goes_on_with_the_other(tmp_path: Path) -> None:
    """``torchrun --nnodes 1:2`` on two agents over c10d: once the checkpoint of 512 is in
    place, the agent that does not host the rendezvous is killed with its worker at global
    step 800 (a node lost); the other agent starts its worker again, alone, which resumes on
    1 rank and finishes the run."""
    path = config(tmp_path, {"dying_node": "lost"}, {"csv": {}})
    port = free_port()
    elastic = [
        *("--nnodes", "1:2", "--nproc-per-node", "1", "--max-restarts", "1"),
        *("--rdzv-backend", "c10d", "--rdzv-endpoint", f"127.0.0.1:{port}"),
        *("--rdzv-id", "lost-node", "--rdzv-conf", RDZV_CONF),
    ]
    arguments = [*elastic, "-m", "evtrain", "learn", str(path)]
    # Both nodes must be in the first rendezvous, which the host closes 1 s after it joined
    # (RDZV_CONF): the second agent has imported torchrun first, and joins as soon as the host
    # listens, instead of starting then (seconds of imports on two busy cores).
    lost = agent(
        [sys.executable, "-c", JOIN_ONCE_LISTENING, str(port), *arguments],
        {**run_env(tmp_path), "EVTRAIN_PROBE_NODE": "lost"},
    )
    try:
        assert lost.stdout is not None
        assert select.select([lost.stdout], [], [], 120)[0], "the second agent said nothing"
        assert lost.stdout.readline() == "imported\n", lost.poll()
        # The first agent to listen hosts the rendezvous store: the one that stays.
        host = agent([str(TORCHRUN), *arguments], run_env(tmp_path))
        try:
            _, stderr = host.communicate(timeout=300)
            lost.communicate(timeout=60)
        finally:
            host.kill()
    finally:
        lost.kill()
    assert host.returncode == 0, stderr[-4000:]
    assert lost.returncode == -signal.SIGKILL
    run = tmp_path / "results" / "run"
    assert (
        "torchrun restarted the workers (restart 1 of run lost-node; 1 rank, 2 before): "
        f"resuming from step {CHECKPOINT} of {run}"
    ) in stderr
    probe = json.loads((tmp_path / "probe" / "trainer-rank0.json").read_text())
    assert probe["world_size"] == 1
    assert probe["step"] == MAX_STEPS and probe["local_step"] == MAX_STEPS - CHECKPOINT
    assert tensorboard_steps(run / "Agent", REWARD) == EVERY_SUMMARY
    assert csv_steps(run / "Agent" / "progress.csv") == EVERY_SUMMARY


def test_a_node_that_joins_restarts_the_group_which_resumes_on_two_ranks(
    tmp_path: Path,
) -> None:
    """``torchrun --nnodes 1:2``: one agent trains alone (its worker held at a step); a second
    agent joins, and the first stops its worker (SIGTERM: the run saves where it is) and starts
    the group again on both nodes, the restart count unchanged.  The two ranks resume from the
    save by themselves."""
    release = tmp_path / "release"
    path = config(tmp_path, {}, {"csv": {}}, JOIN_MAX_STEPS, summary_freq=256)
    options = yaml.safe_load(path.read_text())
    options["env_settings"].update(
        env_id="dist_probe:holding_cartpole",
        env_kwargs={"hold_at": 100, "release": str(release)},
    )
    path.write_text(yaml.safe_dump(options))
    port = free_port()
    command = [
        str(TORCHRUN),
        *("--nnodes", "1:2", "--nproc-per-node", "1"),
        *("--rdzv-backend", "c10d", "--rdzv-endpoint", f"127.0.0.1:{port}"),
        *("--rdzv-id", "join", "--rdzv-conf", RDZV_CONF),
        *("-m", "evtrain", "learn", str(path)),
    ]
    first = agent(command, run_env(tmp_path))
    try:
        deadline = time.monotonic() + 120
        while not release.with_name("release.held").exists():  # trains alone, then holds
            assert first.poll() is None, first.communicate()[1][-3000:]
            assert time.monotonic() < deadline
            time.sleep(0.05)
        with (tmp_path / "joined.log").open("w") as log:
            joined = subprocess.Popen(
                command, env=run_env(tmp_path), stdout=log, stderr=log, start_new_session=True
            )
        try:
            assert first.stderr is not None
            seen = []
            for said in first.stderr:  # the joining node made the first agent stop its worker
                seen.append(said)
                if "SIGTERM received" in said:
                    break
            release.touch()
            stderr = "".join(seen) + first.communicate(timeout=300)[1]
            joined.wait(timeout=60)
        finally:
            joined.kill()
    finally:
        first.kill()
    assert [first.returncode, joined.returncode] == [0, 0], stderr[-4000:]
    run = tmp_path / "results" / "run"
    line = re.compile(
        r"^\[INFO\] torchrun restarted the workers \(a membership change of run join; 2 ranks, "
        rf"1 before\): resuming from step (\d+) of {re.escape(str(run))}$",
        re.MULTILINE,
    )
    (resumed_at,) = [int(step) for step in line.findall(stderr)]
    rank0, rank1 = (
        json.loads((tmp_path / "probe" / "trainer-rank0.json").read_text()),
        json.loads((tmp_path / "probe" / "trainer-rank1.json").read_text()),
    )
    assert rank0["world_size"] == rank1["world_size"] == 2
    assert rank0["checksum"] == rank1["checksum"]
    # Updates of 128 global steps from the save: the run ends at the first one past max_steps.
    assert rank0["step"] - resumed_at == 2 * rank0["local_step"] == 2 * rank1["local_step"]
    assert JOIN_MAX_STEPS <= rank0["step"] < JOIN_MAX_STEPS + 128
    steps = tensorboard_steps(run / "Agent", REWARD)
    assert steps == sorted(set(steps))  # none twice
    every_summary = list(range(256, JOIN_MAX_STEPS + 1, 256))
    assert set(every_summary) <= set(steps) <= {*every_summary, resumed_at}


def test_a_two_rank_sac_checkpoint_and_its_replay_buffer_resume_on_one_rank(
    tmp_path_factory: pytest.TempPathFactory, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Rank 0's replay buffer (``save_replay_buffer``) and generator states are the
    checkpoint's; one rank takes them and goes on collecting into that buffer.  The 2-rank
    run is the session's (tests/shared_torchrun_runs.py); the one rank, ``evtrain learn
    --resume`` in this process, resumes a copy of it."""
    first = sac_on_two_ranks(tmp_path_factory)
    assert first.result.returncode == 0, first.result.stderr[-3000:]
    assert load_checkpoint(first.run / "Agent" / "checkpoint.pt")["replay_buffer"]["size"] == 128
    shutil.copytree(first.run.parent, tmp_path / "results")
    options = {
        "behaviors": {"Agent": {**SAC, "max_steps": 384}},
        "env_settings": PENDULUM,
        "checkpoint_settings": {"run_id": "run", "results_dir": str(tmp_path / "results")},
        "plugins": {"paths": [str(PROBE)]},
    }
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(options))
    monkeypatch.setenv("EVTRAIN_PROBE_OUT", str(tmp_path / "probe"))
    resumed = evtrain_main("learn", "config.yaml", "--resume", cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stderr[-4000:]
    probe = json.loads((tmp_path / "probe" / "trainer-rank0.json").read_text())
    assert probe["world_size"] == 1 and probe["step"] == 384 and probe["local_step"] == 128
    checkpoint = tmp_path / "results" / "run" / "Agent" / "checkpoint.pt"
    assert load_checkpoint(checkpoint)["replay_buffer"]["size"] == 128 + 128
