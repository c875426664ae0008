"""Plugins that hold a run at a chosen moment, for ``tests/test_interrupts.py`` (loaded with
``--plugins``), so that a signal lands exactly there:

* trainer ``gated_ppo``: PPO whose policy, traced for the final export on the saver's thread,
  creates ``exporting`` in ``$EVTRAIN_TEST_EXPORT_GATE`` and waits until ``release`` exists
  there (the final save has written its ``.pt`` and ``checkpoint.pt`` by then);
* subscriber ``flush_gate``: on the ``stats`` of step ``$EVTRAIN_TEST_FLUSH_STEP`` (the final
  summary, which the runner waits for before the final save), creates ``flushing`` in
  ``$EVTRAIN_TEST_FLUSH_GATE`` and waits until ``flushed`` exists there;
* subscriber ``drain_gate``: on ``run_finished`` (delivered in the drain, after the final save),
  creates ``draining`` in ``$EVTRAIN_TEST_DRAIN_GATE`` and waits until ``drained`` exists there.

Each gate waits only when its variable is set, 120 s at most.
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path
from typing import Any

import torch
from torch import nn

from evtrain import Bus, RunFinished, RunOptions, StatsEvent, signals
from evtrain.trainers.base import Trainer
from evtrain.trainers.ppo import PPOTrainer

EXPORT_GATE = "EVTRAIN_TEST_EXPORT_GATE"
DRAIN_GATE = "EVTRAIN_TEST_DRAIN_GATE"
FLUSH_GATE = "EVTRAIN_TEST_FLUSH_GATE"


def _wait_at(variable: str, arrived: str, release: str) -> None:
    folder = os.environ.get(variable)
    if folder is None or (Path(folder) / release).exists():
        return
    (Path(folder) / arrived).touch()
    deadline = time.monotonic() + 120
    while not (Path(folder) / release).exists() and time.monotonic() < deadline:
        time.sleep(0.01)


class _Gated(nn.Module):
    def __init__(self, policy: nn.Module) -> None:
        super().__init__()
        self.policy = policy

    def forward(self, *inputs: torch.Tensor) -> Any:
        if threading.current_thread().name == "evtrain-saver":
            _wait_at(EXPORT_GATE, "exporting", "release")
        return self.policy(*inputs)


class GatedPPO(PPOTrainer):
    def policy_module(self) -> nn.Module:
        return _Gated(super().policy_module())


def trainer_types() -> dict[str, type[Trainer]]:
    return {"gated_ppo": GatedPPO}


def connect_drain_gate(options: RunOptions, bus: Bus) -> None:
    def hold(event: RunFinished) -> None:
        _wait_at(DRAIN_GATE, "draining", "drained")

    bus.connect(signals.run_finished, hold, name="drain_gate")


def connect_flush_gate(options: RunOptions, bus: Bus) -> None:
    step = int(os.environ.get("EVTRAIN_TEST_FLUSH_STEP", "-1"))

    def hold(event: StatsEvent) -> None:
        if event.step == step:
            _wait_at(FLUSH_GATE, "flushing", "flushed")

    bus.connect(signals.stats, hold, name="flush_gate")


EVTRAIN_PLUGINS = {
    "evtrain.trainer": {"gated": trainer_types},
    "evtrain.subscriber": {"drain_gate": connect_drain_gate, "flush_gate": connect_flush_gate},
}
