"""A trainer's state: what its checkpoint holds (:meth:`Trainer.state_dict
<evtrain.trainers.base.Trainer.state_dict>` and the loading of it), and the ranks of a
distributed run agreeing on it (:meth:`~evtrain.trainers.base.Trainer.synchronize`).

The checkpoint's keys: ``trainer_type``, ``step``, ``last_summary``, ``recent_rewards``,
``generator_device``, ``generator``, ``rng`` (``act_generator`` with ``threaded``), the loop's
own part (its algorithm's: ``agent``, ``optimizer``, ...) and ``attachments`` when any.
"""

from __future__ import annotations

from typing import Any, Protocol

import numpy as np
import torch
from torch import nn

from evtrain.bus.reporter import StatsReporter
from evtrain.trainers.bookkeeping import Bookkeeping
from evtrain.trainers.networks.normalizer import ObservationNormalizer
from evtrain.trainers.settings import TrainerSettings
from evtrain.world import World


class Stateful(Protocol):
    """What of a :class:`~evtrain.trainers.base.Trainer` its state is made of (the trainer is
    one; named here so that this module needs no import of it)."""

    behavior_name: str
    settings: TrainerSettings
    reporter: StatsReporter
    bookkeeping: Bookkeeping
    world: World
    device: torch.device
    seed: int
    generator: torch.Generator
    rng: np.random.Generator
    attachments: dict[str, Any]

    @property
    def step(self) -> int: ...
    @property
    def act_generator(self) -> torch.Generator: ...
    def wait_for_update(self) -> None: ...
    def _shared_modules(self) -> list[nn.Module]: ...
    def _state_dict(self) -> dict[str, Any]: ...
    def _load_state_dict(self, state: dict[str, Any]) -> None: ...
    def _loaded(self) -> None: ...


def synchronize(trainer: Stateful) -> None:
    """Start every rank from rank 0's networks and normaliser statistics (see
    :meth:`Trainer.synchronize <evtrain.trainers.base.Trainer.synchronize>`)."""
    books = trainer.bookkeeping
    books.synced = (books.step, books.local_step)
    if trainer.world.size == 1:
        return
    modules = trainer._shared_modules()
    for module in modules:
        for part in module.modules():
            if isinstance(part, ObservationNormalizer):
                part.deferred = True
    trainer.world.broadcast_(_shared_tensors(trainer, modules))
    trainer._loaded()


def _shared_tensors(trainer: Stateful, modules: list[nn.Module]) -> list[torch.Tensor]:
    """Every tensor that must be equal on all ranks: the parameters and buffers of the
    trainer's modules, and parameters held directly (an entropy coefficient)."""
    tensors: dict[tuple[int, int], torch.Tensor] = {}
    for module in modules:
        for tensor in (*module.parameters(), *module.buffers()):
            tensors.setdefault((tensor.data_ptr(), tensor.numel()), tensor.data)
    for value in vars(trainer).values():
        if isinstance(value, nn.Parameter):
            tensors.setdefault((value.data_ptr(), value.numel()), value.data)
    return list(tensors.values())


def state_dict(trainer: Stateful) -> dict[str, Any]:
    """The trainer's checkpoint (see the module's docstring); waits for the update in
    flight."""
    trainer.wait_for_update()
    acting = {}
    if trainer.act_generator is not trainer.generator:
        acting["act_generator"] = trainer.act_generator.get_state()
    attachments = {}
    if trainer.attachments:  # none without attachments: a state as before there were any
        attachments["attachments"] = {
            name: attachment.state_dict() for name, attachment in trainer.attachments.items()
        }
    return {
        "trainer_type": trainer.settings.trainer_type,
        "step": trainer.step,
        "last_summary": trainer.bookkeeping.last_summary,
        "recent_rewards": list(trainer.bookkeeping.recent_rewards),
        "generator_device": trainer.device.type,
        "generator": trainer.generator.get_state(),
        "rng": trainer.rng.bit_generator.state,
        **acting,
        **trainer._state_dict(),
        **attachments,
    }


def load_state_dict(trainer: Stateful, state: dict[str, Any]) -> None:
    """Restore :func:`state_dict`'s output (see :meth:`Trainer.load_state_dict
    <evtrain.trainers.base.Trainer.load_state_dict>`)."""
    check_type(trainer, state)
    trainer.bookkeeping.restore(
        int(state["step"]),
        int(state["last_summary"]),
        [float(r) for r in state["recent_rewards"]],
    )
    generator, rng = trainer.generator, trainer.rng
    if trainer.world.size > 1:
        # in place: the generators are shared objects (an algorithm's spec holds them)
        generator.manual_seed(trainer.seed * 1_000_003 + trainer.step)
        fresh = np.random.default_rng([trainer.seed, trainer.step])
        rng.bit_generator.state = fresh.bit_generator.state
    else:
        if state["generator_device"] == trainer.device.type:
            generator.set_state(state["generator"])
            if "act_generator" in state and trainer.act_generator is not generator:
                trainer.act_generator.set_state(state["act_generator"])
        rng.bit_generator.state = state["rng"]
    trainer._load_state_dict(state)
    saved = state.get("attachments", {})
    for name, attachment in trainer.attachments.items():
        if name in saved:  # an attachment the checkpoint lacks starts afresh
            attachment.load_state_dict(saved[name])
    trainer._loaded()
    trainer.reporter.set_stat("Step", float(trainer.step))


def check_type(trainer: Stateful, state: dict[str, Any]) -> None:
    """:raises ValueError: ``state`` comes from another trainer type."""
    if state["trainer_type"] != trainer.settings.trainer_type:
        raise ValueError(
            f"state of a {state['trainer_type']!r} trainer cannot be loaded into a "
            f"{trainer.settings.trainer_type!r} trainer for behavior {trainer.behavior_name!r}"
        )
