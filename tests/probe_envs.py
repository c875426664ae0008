"""Environments for tests that start ``evtrain learn``: one records, at the first step of the
process, which heavy modules are loaded by then (``env_id: tests.probe_envs:first_step_probe``);
one returns a NaN at a chosen step (``env_id: tests.probe_envs:poisoned``)."""

from __future__ import annotations

import gc
import json
import math
import os
import sys
from typing import Any

import gymnasium as gym
import numpy as np

PROBE_FILE = "EVTRAIN_TEST_FIRST_STEP"
"""Environment variable: where the record is written."""


class _Probe(gym.Wrapper[Any, Any, Any, Any]):
    written = False

    def step(self, action: Any) -> Any:
        if not _Probe.written:
            _Probe.written = True
            record = {
                "modules": sorted(sys.modules),
                "collector_enabled": gc.isenabled(),
                "frozen": gc.get_freeze_count(),
            }
            with open(os.environ[PROBE_FILE], "w") as f:
                json.dump(record, f)
        return self.env.step(action)


def first_step_probe(**kwargs: Any) -> gym.Env[Any, Any]:
    """CartPole-v1 that writes, at the process's first step, ``sorted(sys.modules)`` and the
    cyclic garbage collector's state (on or off, objects frozen) as JSON."""
    return _Probe(gym.make("CartPole-v1", **kwargs))


class _Poisoned(gym.Wrapper[Any, Any, Any, Any]):
    """Counts the steps of every environment of the process; the ``at``-th returns ``value``
    as its reward, or as every number of its observation."""

    steps = 0

    def __init__(self, env: gym.Env[Any, Any], at: int, what: str, value: float) -> None:
        super().__init__(env)
        self.at, self.what, self.value = at, what, value

    def step(self, action: Any) -> Any:
        obs, reward, terminated, truncated, info = self.env.step(action)
        _Poisoned.steps += 1
        if _Poisoned.steps == self.at:
            if self.what == "reward":
                reward = self.value
            else:
                obs = np.full_like(obs, self.value)
        return obs, reward, terminated, truncated, info


def count_steps_anew() -> None:
    """Start :func:`poisoned`'s count of the process's steps again, as a new process would: for
    a run in the tests' own process."""
    _Poisoned.steps = 0


def poisoned(
    env_id: str = "CartPole-v1", at: int = 100, what: str = "reward", value: float = math.nan
) -> gym.Env[Any, Any]:
    """``env_id`` whose ``at``-th step of the process (counted over all its environments)
    returns ``value`` (NaN by default; ``3e38`` is finite, but overflows a squared loss) as
    its reward (``what: reward``) or as its whole observation (``what: observation``):
    ``env_id: tests.probe_envs:poisoned``."""
    return _Poisoned(gym.make(env_id), at, what, value)
