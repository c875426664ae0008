"""Data-parallel runs of ``evtrain learn`` under a real ``torchrun`` (2 processes, gloo, CPU), for
the tests of distributed runs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import yaml
from tensorboard.backend.event_processing.event_file_loader import EventFileLoader

from tests.helpers import end_with_the_suite

PROBE = Path(__file__).parent / "dist_plugins"


TORCHRUN = Path(sys.executable).parent / "torchrun"


class Run:
    """One finished ``torchrun`` of ``evtrain learn``, and what it left behind."""

    def __init__(self, folder: Path, result: subprocess.CompletedProcess[str], took: float):
        self.folder = folder
        self.result = result
        self.took = took
        self.probe = folder / "probe"

    @property
    def run(self) -> Path:
        return self.folder / "results" / "run"

    def trainer(self, rank: int) -> dict[str, Any]:
        record: dict[str, Any] = json.loads((self.probe / f"trainer-rank{rank}.json").read_text())
        return record

    def events(self, rank: int) -> list[dict[str, Any]]:
        path = self.probe / f"events-rank{rank}.jsonl"
        return [json.loads(line) for line in path.read_text().splitlines()]


STANDALONE = ("--standalone", "--nproc-per-node", "2")


def launch(
    folder: Path,
    behavior: dict[str, Any],
    env_settings: dict[str, Any],
    *args: str,
    launcher: tuple[str, ...] = STANDALONE,
    extra_env: dict[str, str] | None = None,
) -> subprocess.Popen[str]:
    """Start ``torchrun --standalone --nproc-per-node 2 -m evtrain learn`` (or ``launcher``'s
    options) on a config in ``folder``, in a session of its own (as a terminal would run it)."""
    folder.mkdir(parents=True, exist_ok=True)
    config = {
        "behaviors": {"Agent": behavior},
        "env_settings": env_settings,
        "checkpoint_settings": {"run_id": "run", "results_dir": str(folder / "results")},
        "plugins": {"paths": [str(PROBE)]},
        "torch_settings": {"distributed_timeout": 60},
    }
    path = folder / f"config-{len(list(folder.glob('config-*')))}.yaml"
    path.write_text(yaml.safe_dump(config))
    env = {
        **os.environ,
        "EVTRAIN_PROBE_OUT": str(folder / "probe"),
        # The probe first; then what the suite runs with (the evtrain under test, if it is
        # not the installed one).
        "PYTHONPATH": os.pathsep.join(filter(None, [str(PROBE), os.environ.get("PYTHONPATH")])),
        "OMP_NUM_THREADS": "1",
        **(extra_env or {}),
    }
    command = [str(TORCHRUN), *launcher, "-m", "evtrain", "learn"]
    return end_with_the_suite(
        subprocess.Popen(
            [*command, str(path), *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
            start_new_session=True,
        )
    )


def torchrun(
    folder: Path,
    behavior: dict[str, Any],
    env_settings: dict[str, Any],
    *args: str,
    timeout: float = 180,
) -> Run:
    """Run :func:`launch` to the end."""
    started = time.monotonic()
    process = launch(folder, behavior, env_settings, *args)
    try:
        stdout, stderr = process.communicate(timeout=timeout)
    finally:
        process.kill()
    result = subprocess.CompletedProcess(process.args, process.returncode, stdout, stderr)
    return Run(folder, result, time.monotonic() - started)


def ppo(max_steps: int) -> dict[str, Any]:
    """2 ranks x 4 envs x 16 steps: 128 global steps per update."""
    return {
        "trainer_type": "probe_ppo",
        "hyperparameters": {"batch_size": 32, "buffer_size": 64, "num_epoch": 2},
        "network_settings": {"hidden_units": 32, "normalize": True},
        "max_steps": max_steps,
        "time_horizon": 16,
        "summary_freq": 256,
        "checkpoint_interval": 512,
    }


CARTPOLE = {"env_id": "CartPole-v1", "num_envs": 4, "seed": 5}


def tensorboard_points(folder: Path) -> Counter[tuple[str, int]]:
    """How often each (tag, step) was written, over every event file in ``folder`` (but the
    hyperparameters, as text and as HParams session records, which every start of a run writes
    at step 0)."""
    points: Counter[tuple[str, int]] = Counter()
    for path in sorted(folder.glob("events.out.tfevents.*")):
        for event in EventFileLoader(str(path)).Load():
            for value in event.summary.value:
                if value.tag != "Hyperparameters" and not value.tag.startswith("_hparams_/"):
                    points[(value.tag, event.step)] += 1
    return points
