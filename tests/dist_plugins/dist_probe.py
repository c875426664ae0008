"""Instrumentation for the ``torchrun`` tests, loaded with ``--plugins tests/dist_plugins``.

* trainer types ``probe_ppo`` and ``probe_sac``: the built-in trainers, which also count the
  episodes their own environments finished and, once ``max_steps`` is reached, write
  ``$EVTRAIN_PROBE_OUT/trainer-rank<R>.json``: step, local step, episodes and a checksum of
  every network, normaliser and optimizer tensor (what must be equal on every rank);
* subscriber ``probe_log``: appends what this rank's bus delivers (stats, save, export,
  run_finished) to ``$EVTRAIN_PROBE_OUT/events-rank<R>.jsonl``, with no rank filter;
* with ``$EVTRAIN_PROBE_EXPORT_GATE`` set (a folder), the trainers' first export waits at a
  gate: it creates ``exporting`` there and waits until ``release`` exists (120 s at most), so
  that a test can hold a save in flight;
* environment ``dist_probe:dying_cartpole``: CartPole whose process kills itself with SIGKILL
  on its ``die_at``-th step when it runs as rank ``dying_rank`` (with ``attempt``: only in
  the group torchrun started after that many restarts, ``TORCHELASTIC_RESTART_COUNT``; with
  ``wait_for``, a path, it first waits there until that file exists: a checkpoint in place;
  with ``dying_node``, it is the worker of the torchrun agent whose ``$EVTRAIN_PROBE_NODE``
  is that name, whatever its rank, and kills that agent too: a node lost);
* environment ``dist_probe:holding_cartpole``: CartPole that waits at its ``hold_at``-th step
  (having created ``<release>.held``) until the file ``release`` exists, unless it does already;
* environment ``dist_probe:counting_cartpole``: CartPole that adds the steps it took to
  ``$EVTRAIN_PROBE_OUT/env-steps-rank<R>.txt`` (a line per environment) when closed.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import threading
import time
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import numpy.typing as npt
import torch

from evtrain import Bus, ExportEvent, RunFinished, RunOptions, SaveEvent, StatsEvent, signals
from evtrain.trainers.base import Trainer
from evtrain.trainers.optim import FlatAdam
from evtrain.trainers.ppo import PPOTrainer
from evtrain.trainers.sac import SACTrainer


def _out() -> Path:
    out = Path(os.environ["EVTRAIN_PROBE_OUT"])
    out.mkdir(parents=True, exist_ok=True)
    return out


def checksum(trainer: Trainer) -> str:
    """SHA-256 of every module's state and every optimizer's state tensors, in a fixed order."""
    digest = hashlib.sha256()
    parts = dict(vars(trainer))
    algorithm = getattr(trainer, "algorithm", None)  # an on-policy loop's
    if algorithm is not None:
        parts.update({f"algorithm.{name}": value for name, value in vars(algorithm).items()})
    for name, value in sorted(parts.items()):
        if isinstance(value, torch.nn.Module):
            tensors = [t for _, t in sorted(value.state_dict().items())]
        elif isinstance(value, FlatAdam):
            state = value.state_dict()["state"]
            tensors = [t for _, entry in sorted(state.items()) for _, t in sorted(entry.items())]
        else:
            continue
        digest.update(name.encode())
        for tensor in tensors:
            digest.update(torch.as_tensor(tensor).detach().cpu().contiguous().numpy().tobytes())
    return digest.hexdigest()


def write_probe(trainer: Trainer, episodes: int) -> None:
    record = {
        "rank": trainer.world.rank,
        "world_size": trainer.world.size,
        "step": trainer.step,
        "local_step": trainer.local_step,
        "episodes": episodes,
        "checksum": checksum(trainer),
    }
    (_out() / f"trainer-rank{trainer.world.rank}.json").write_text(json.dumps(record))


class _Probe(Trainer):
    """Mixed in before a built-in trainer: counts episodes, writes the record at the end."""

    episodes = 0

    def _record_step(
        self, rewards: npt.NDArray[Any], dones: npt.NDArray[np.bool_], valid: npt.NDArray[np.bool_]
    ) -> None:
        self.episodes += int((dones & valid).sum())
        super()._record_step(rewards, dones, valid)

    def advance(self) -> None:
        super().advance()  # type: ignore[safe-super]  # the built-in's, next in the MRO
        if self.should_stop:
            write_probe(self, self.episodes)


class _Gated(torch.nn.Module):
    """A policy whose forward on the saver's thread (tracing an export) waits at the gate."""

    def __init__(self, policy: torch.nn.Module) -> None:
        super().__init__()
        self.policy = policy

    def forward(self, *inputs: torch.Tensor) -> Any:
        folder = os.environ["EVTRAIN_PROBE_EXPORT_GATE"]
        if threading.current_thread().name == "evtrain-saver":
            release = Path(folder) / "release"
            if not release.exists():
                (Path(folder) / "exporting").touch()
                deadline = time.monotonic() + 120
                while not release.exists() and time.monotonic() < deadline:
                    time.sleep(0.01)
        return self.policy(*inputs)


class ProbePPO(_Probe, PPOTrainer):
    def policy_module(self) -> torch.nn.Module:
        policy = super().policy_module()
        return _Gated(policy) if os.environ.get("EVTRAIN_PROBE_EXPORT_GATE") else policy


class ProbeSAC(_Probe, SACTrainer):
    pass


def trainer_types() -> dict[str, type[Trainer]]:
    return {"probe_ppo": ProbePPO, "probe_sac": ProbeSAC}


def connect_probe_log(options: RunOptions, bus: Bus) -> None:
    path = _out() / f"events-rank{bus.rank}.jsonl"

    def log(payload: Any) -> None:
        if isinstance(payload, StatsEvent):
            reward = payload.values.get("Environment/Cumulative Reward")
            record: dict[str, Any] = {
                "signal": "stats",
                "rank": payload.rank,
                "step": payload.step,
                "episodes": 0 if reward is None else reward.num,
            }
        elif isinstance(payload, (SaveEvent, ExportEvent)):
            kind = "save" if isinstance(payload, SaveEvent) else "export"
            record = {"signal": kind, "step": payload.step, "path": str(payload.path)}
        elif isinstance(payload, RunFinished):
            record = {"signal": "run_finished", "status": payload.status.value}
        else:
            return
        with path.open("a") as file:
            file.write(json.dumps(record) + "\n")

    bus.connect(
        [signals.stats, signals.save, signals.export, signals.run_finished], log, name="probe_log"
    )


EVTRAIN_PLUGINS = {
    "evtrain.trainer": {"probe": trainer_types},
    "evtrain.subscriber": {"probe_log": connect_probe_log},
}


class _DieAt(gym.Wrapper[Any, Any, Any, Any]):
    def __init__(
        self, env: gym.Env[Any, Any], die_at: int, wait_for: str | None, node: bool
    ) -> None:
        super().__init__(env)
        self.die_at = die_at
        self.wait_for = None if wait_for is None else Path(wait_for)
        self.node = node
        self.steps = 0

    def step(self, action: Any) -> Any:
        self.steps += 1
        if self.steps == self.die_at:
            deadline = time.monotonic() + 120
            while self.wait_for is not None and not self.wait_for.exists():
                assert time.monotonic() < deadline, f"{self.wait_for} never appeared"
                time.sleep(0.01)
            if self.node:  # the torchrun agent that started this worker goes first
                os.kill(os.getppid(), signal.SIGKILL)
            os.kill(os.getpid(), signal.SIGKILL)
        return super().step(action)


def dying_cartpole(
    die_at: int,
    dying_rank: int | None = None,
    attempt: int | None = None,
    wait_for: str | None = None,
    dying_node: str | None = None,
) -> gym.Env[Any, Any]:
    env = gym.make("CartPole-v1")
    started = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
    rank = int(os.environ.get("RANK", "0"))
    node = os.environ.get("EVTRAIN_PROBE_NODE")
    if attempt not in (None, started):
        return env
    if rank == dying_rank or (dying_node is not None and node == dying_node):
        return _DieAt(env, die_at, wait_for, node=dying_node is not None)
    return env


class _HoldAt(gym.Wrapper[Any, Any, Any, Any]):
    def __init__(self, env: gym.Env[Any, Any], hold_at: int, release: Path) -> None:
        super().__init__(env)
        self.hold_at = hold_at
        self.release = release
        self.steps = 0

    def step(self, action: Any) -> Any:
        self.steps += 1
        if self.steps == self.hold_at:
            self.release.with_name(self.release.name + ".held").touch()
            deadline = time.monotonic() + 120
            while not self.release.exists():
                assert time.monotonic() < deadline, f"{self.release} never appeared"
                time.sleep(0.01)
        return super().step(action)


def holding_cartpole(hold_at: int, release: str) -> gym.Env[Any, Any]:
    env = gym.make("CartPole-v1")
    return env if Path(release).exists() else _HoldAt(env, hold_at, Path(release))


class _CountSteps(gym.Wrapper[Any, Any, Any, Any]):
    def __init__(self, env: gym.Env[Any, Any]) -> None:
        super().__init__(env)
        self.steps = 0

    def step(self, action: Any) -> Any:
        self.steps += 1
        return super().step(action)

    def close(self) -> None:
        rank = os.environ.get("RANK", "0")
        with (_out() / f"env-steps-rank{rank}.txt").open("a") as out:
            out.write(f"{self.steps}\n")
        super().close()


def counting_cartpole() -> gym.Env[Any, Any]:
    return _CountSteps(gym.make("CartPole-v1"))


def env_steps(out: Path, rank: int) -> int:
    """The steps every ``counting_cartpole`` of ``rank`` took, together."""
    return sum(int(line) for line in (out / f"env-steps-rank{rank}.txt").read_text().split())
