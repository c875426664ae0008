"""An environment for tests that start ``evtrain learn``: it records, at the first step of the
process, which heavy modules are loaded by then (``env_id: tests.probe_envs:first_step_probe``)."""

from __future__ import annotations

import json
import os
import sys
from typing import Any

import gymnasium as gym

PROBE_FILE = "EVTRAIN_TEST_FIRST_STEP"
"""Environment variable: where the record is written."""


class _Probe(gym.Wrapper[Any, Any, Any, Any]):
    written = False

    def step(self, action: Any) -> Any:
        if not _Probe.written:
            _Probe.written = True
            with open(os.environ[PROBE_FILE], "w") as f:
                json.dump(sorted(sys.modules), f)
        return self.env.step(action)


def first_step_probe(**kwargs: Any) -> gym.Env[Any, Any]:
    """CartPole-v1 that writes ``sorted(sys.modules)`` at the process's first step."""
    return _Probe(gym.make("CartPole-v1", **kwargs))
