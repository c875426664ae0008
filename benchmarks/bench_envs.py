"""Environments for the benchmarks, named in configs as ``bench_envs:<function>``.

The benchmark scripts put this folder on ``PYTHONPATH`` of the runs they start (and
Gymnasium's ``AsyncVectorEnv`` workers inherit it).
"""

from __future__ import annotations

import atexit
import json
import os
import sys
import time
from typing import Any, ClassVar

import gymnasium as gym

FIRST_STEP_FILE = "EVTRAIN_BENCH_FIRST_STEP"
"""Environment variable: where :func:`timed_cartpole` writes the time of the first step."""

_WATCHED = ("torch", "torch._dynamo", "onnx", "onnxscript", "onnxruntime", "tensorboard")


class _FirstStep(gym.Wrapper[Any, Any, Any, Any]):
    """Writes ``time.time()`` and which heavy modules are loaded, at the process's first step."""

    written = False

    def step(self, action: Any) -> Any:
        if not _FirstStep.written:
            _FirstStep.written = True
            path = os.environ.get(FIRST_STEP_FILE)
            if path:
                record = {
                    "time": time.time(),
                    "loaded": [m for m in _WATCHED if m in sys.modules],
                }
                with open(path, "w") as f:
                    json.dump(record, f)
        return self.env.step(action)


def timed_cartpole(**kwargs: Any) -> gym.Env[Any, Any]:
    """CartPole-v1 whose first ``step`` in the process is recorded (see :data:`FIRST_STEP_FILE`)."""
    return _FirstStep(gym.make("CartPole-v1", **kwargs))


class _Slow(gym.Wrapper[Any, Any, Any, Any]):
    """Spends ``delay_s`` of CPU on every step, as a heavier simulator would."""

    def __init__(self, env: gym.Env[Any, Any], delay_s: float) -> None:
        super().__init__(env)
        self.delay_s = delay_s

    def step(self, action: Any) -> Any:
        end = time.perf_counter() + self.delay_s
        while time.perf_counter() < end:  # busy: a simulator computes, it does not sleep
            pass
        return self.env.step(action)


def slow_cartpole(delay_s: float = 0.001, **kwargs: Any) -> gym.Env[Any, Any]:
    """CartPole-v1 that costs ``delay_s`` more CPU per step."""
    return _Slow(gym.make("CartPole-v1", **kwargs), delay_s)


def slow_pendulum(delay_s: float = 0.001, **kwargs: Any) -> gym.Env[Any, Any]:
    """Pendulum-v1 that costs ``delay_s`` more CPU per step."""
    return _Slow(gym.make("Pendulum-v1", **kwargs), delay_s)


RETURNS_FILE = "EVTRAIN_BENCH_RETURNS"
"""Environment variable: where :func:`returns_cartpole` writes the episode returns at exit."""


class _Returns(gym.Wrapper[Any, Any, Any, Any]):
    """Logs each episode's return with the run's env step when it ended.

    Vector environments step their copies in lockstep, so the run's step count when this copy
    has taken ``k`` steps is ``k * num_envs`` — the same count evtrain and SB3 report.
    """

    logs: ClassVar[list[list[tuple[int, int, float]]]] = []

    def __init__(self, env: gym.Env[Any, Any], num_envs: int) -> None:
        super().__init__(env)
        self.num_envs = num_envs
        self.index = len(_Returns.logs)
        self.log: list[tuple[int, int, float]] = []
        _Returns.logs.append(self.log)
        if self.index == 0:
            atexit.register(_write_returns)
        self.steps = 0
        self.total = 0.0

    def step(self, action: Any) -> Any:
        obs, reward, terminated, truncated, info = self.env.step(action)
        self.steps += 1
        self.total += float(reward)
        if terminated or truncated:
            self.log.append((self.steps * self.num_envs, self.index, self.total))
            self.total = 0.0
        return obs, reward, terminated, truncated, info


def _write_returns() -> None:
    path = os.environ.get(RETURNS_FILE)
    if path:
        episodes = sorted(e for log in _Returns.logs for e in log)
        with open(path, "w") as f:
            json.dump(episodes, f)


def returns_cartpole(num_envs: int = 8, **kwargs: Any) -> gym.Env[Any, Any]:
    """CartPole-v1 whose episode returns are written at exit (see :data:`RETURNS_FILE`)."""
    return _Returns(gym.make("CartPole-v1", **kwargs), num_envs)


class _Sleeping(gym.Wrapper[Any, Any, Any, Any]):
    """Waits ``delay_s`` (sleeping, not computing) on every step: a simulator that runs
    elsewhere (a game engine, a remote service) and answers after a while."""

    def __init__(self, env: gym.Env[Any, Any], delay_s: float) -> None:
        super().__init__(env)
        self.delay_s = delay_s

    def step(self, action: Any) -> Any:
        time.sleep(self.delay_s)
        return self.env.step(action)


def sleeping_cartpole(delay_s: float = 0.001, **kwargs: Any) -> gym.Env[Any, Any]:
    """CartPole-v1 whose every step waits ``delay_s`` more (sleeping)."""
    return _Sleeping(gym.make("CartPole-v1", **kwargs), delay_s)
