"""Behaviour stays the same across restructurings of :mod:`evtrain.trainers`: a few updates
from a fixed seed give the weights, optimizer states, normalisers and random-generator states
recorded on the code of before, on any CPU, and checkpoints written by that code still load.

The references are the states themselves: :meth:`Trainer.state_dict` after training, written
with ``torch.save`` and read back with ``torch.load(weights_only=True)``, under
``tests/fixtures/trainers/after_updates/`` and ``resumed/``.  Step counters, names, flags and
random-generator states (bytes, alike on every CPU) must be equal; floating-point tensors and
numbers must be close (:func:`mismatches`), because the order in which the CPU's BLAS sums a
matrix product changes the last bits of every update (MKL picks a code path per CPU; see
``MKL_CBWR``, ``ATEN_CPU_CAPABILITY``).  The SHA-256 digests this module held before failed 10
of its tests on any CPU but the one that recorded them.

The references were recorded on a CPU other than a08e786's, from code whose states there are
bit for bit those of a08e786's code; they lie within the tolerance of the checkpoint files
a08e786 wrote (``tests/fixtures/trainers/<case>.pt``, which matched its digests).  When a change
of behaviour is intended, record new references (``python -m tests.trainers.test_bit_identical``
in the repository's root) and say so in the commit message.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import attrs
import pytest
import torch

from evtrain import Bus
from evtrain.run.checkpoints.checkpoint_file import load_checkpoint, save_checkpoint
from evtrain.trainers import (
    MemorySettings,
    NetworkSettings,
    PPOSettings,
    RewardProviders,
    RewardProviderSettings,
    SACSettings,
)
from evtrain.trainers.base import Trainer
from evtrain.trainers.ppo import PPOTrainer
from evtrain.trainers.sac import SACTrainer
from evtrain.trainers.settings import (
    CuriositySettings,
    GAILSettings,
    RNDSettings,
    TrainerSettings,
)
from tests.helpers import ROOT
from tests.trainers.helpers import Recording, cartpole_demo, make_envs, small_ppo, small_sac

FIXTURES = ROOT / "tests" / "fixtures" / "trainers"
"""Checkpoints written by a08e786 (``<case>.pt``), and the references (see :func:`record`)."""

AFTER_UPDATES = FIXTURES / "after_updates"
"""``<case>.pt``: each case's :meth:`Trainer.state_dict` after :func:`train`."""

RESUMED = FIXTURES / "resumed"
"""``<case>.pt``: the state after :func:`resume` (the checkpoint of before, one more advance)."""

RTOL = 1e-5
ATOL = 1e-6
"""How close a float tensor must be to its reference: ``norm(actual - expected) <=
RTOL * norm(expected) + ATOL``, Euclidean norms over the whole tensor.  Measured on these cases:
other BLAS code paths of one CPU (``MKL_CBWR=COMPATIBLE``; ``MKL_CBWR=AVX2`` with
``ATEN_CPU_CAPABILITY=default``; ``MKL_ENABLE_INSTRUCTIONS=SSE4_2``) and a08e786's checkpoint
files differ by at most 1.7e-6 of a tensor's norm, while a learning rate 1% larger moves some
tensor by 1e-2 of its norm (:func:`test_a_learning_rate_one_percent_larger_is_caught`).  An
element-wise tolerance separates them far less (an element near zero is noisy beside its size):
rtol 1e-5 with atol 1e-6 per element took 94% of its budget on that noise."""


def tiny(*, normalize: bool = False) -> NetworkSettings:
    """A fresh tiny network's settings for each case (a case that changed a shared one changed
    every later case: the references of ``ppo_signals``, ``sac_box``, ``sac_discrete`` and
    ``sac_threaded`` were recorded with the normaliser ``ppo_discrete`` had turned on)."""
    return NetworkSettings(hidden_units=8, num_layers=1, normalize=normalize)


def memory() -> NetworkSettings:
    return NetworkSettings(
        hidden_units=8, num_layers=1, memory=MemorySettings(memory_size=8, sequence_length=4)
    )


def mismatches(actual: Any, expected: Any, where: str = "state") -> list[str]:
    """Where ``actual`` (a trainer state) differs from ``expected``: a float tensor or number
    further than :data:`RTOL`/:data:`ATOL`, anything else (counters, names, random-generator
    states, dtypes, shapes, keys) not equal.  Empty when they match."""
    if isinstance(expected, dict) and isinstance(actual, dict):
        if actual.keys() != expected.keys():
            return [f"{where}: keys {sorted(actual, key=repr)} != {sorted(expected, key=repr)}"]
        return [
            m
            for key in expected
            for m in mismatches(actual[key], expected[key], f"{where}[{key!r}]")
        ]
    if isinstance(expected, list | tuple) and type(actual) is type(expected):
        if len(actual) != len(expected):
            return [f"{where}: {len(actual)} items != {len(expected)}"]
        return [
            m
            for i, item in enumerate(expected)
            for m in mismatches(actual[i], item, f"{where}[{i}]")
        ]
    if isinstance(expected, torch.Tensor) and isinstance(actual, torch.Tensor):
        actual = actual.detach().cpu()
        if (actual.dtype, actual.shape) != (expected.dtype, expected.shape):
            shapes = f"{tuple(actual.shape)} != {expected.dtype}{tuple(expected.shape)}"
            return [f"{where}: {actual.dtype}{shapes}"]
        if not expected.is_floating_point():
            return [] if torch.equal(actual, expected) else [f"{where}: not equal"]
        off = torch.linalg.vector_norm(actual.double() - expected.double()).item()
        size = torch.linalg.vector_norm(expected.double()).item()
        return [] if off <= RTOL * size + ATOL else [f"{where}: off by {off:.3g} (norm {size:.3g})"]
    if isinstance(expected, float) and isinstance(actual, float):
        off = abs(actual - expected)
        if off <= RTOL * abs(expected) + ATOL:
            return []
        return [f"{where}: off by {off:.3g} ({actual!r} against {expected!r})"]
    if type(actual) is not type(expected) or actual != expected:
        return [f"{where}: {actual!r} != {expected!r}"]
    return []


def scale_learning_rate(settings: TrainerSettings, scale: float) -> None:
    hyper = settings.hyperparameters
    assert isinstance(hyper, PPOSettings | SACSettings)
    settings.hyperparameters = attrs.evolve(hyper, learning_rate=hyper.learning_rate * scale)


def train(trainer: Trainer) -> Trainer:
    while not trainer.should_stop:
        trainer.advance()
    trainer.wait_for_update()
    return trainer


def ppo_box(recording: Recording, tmp: Path, learning_rate_scale: float = 1.0) -> Trainer:
    settings = small_ppo(network_settings=tiny(), max_steps=256)
    scale_learning_rate(settings, learning_rate_scale)
    return PPOTrainer("B", settings, make_envs("Pendulum-v1", 2), recording.reporter, seed=3)


def ppo_discrete(recording: Recording, tmp: Path) -> Trainer:
    settings = small_ppo(network_settings=tiny(normalize=True), max_steps=256)
    return PPOTrainer("B", settings, make_envs("CartPole-v1", 2), recording.reporter, seed=3)


def sac_box(recording: Recording, tmp: Path, learning_rate_scale: float = 1.0) -> Trainer:
    settings = small_sac(network_settings=tiny(normalize=True), max_steps=200)
    scale_learning_rate(settings, learning_rate_scale)
    return SACTrainer("B", settings, make_envs("Pendulum-v1", 1), recording.reporter, seed=3)


def sac_discrete(recording: Recording, tmp: Path) -> Trainer:
    settings = small_sac(network_settings=tiny(normalize=True), max_steps=200)
    return SACTrainer("B", settings, make_envs("CartPole-v1", 2), recording.reporter, seed=3)


def ppo_memory(recording: Recording, tmp: Path) -> Trainer:
    settings = small_ppo(network_settings=memory(), max_steps=256, time_horizon=8)
    return PPOTrainer("B", settings, make_envs("CartPole-v1", 2), recording.reporter, seed=3)


def sac_memory(recording: Recording, tmp: Path) -> Trainer:
    hyper = SACSettings(batch_size=8, buffer_size=400, buffer_init_steps=100)
    settings = small_sac(network_settings=memory(), hyperparameters=hyper, max_steps=200)
    return SACTrainer("B", settings, make_envs("Pendulum-v1", 1), recording.reporter, seed=3)


def ppo_signals(recording: Recording, tmp: Path) -> Trainer:
    demo = cartpole_demo(episodes=2, max_steps=50).write(tmp / "expert.npz")
    signals = RewardProviders(
        extrinsic=RewardProviderSettings(gamma=0.99),
        curiosity=CuriositySettings(
            strength=0.02,
            encoding_size=8,
            learning_rate=1e-3,
            network_settings=tiny(normalize=True),
        ),
        rnd=RNDSettings(
            strength=0.01,
            encoding_size=8,
            learning_rate=1e-3,
            network_settings=tiny(normalize=True),
        ),
        gail=GAILSettings(
            demo_path=str(demo),
            strength=0.1,
            use_actions=True,
            network_settings=tiny(normalize=True),
        ),
    )
    settings = small_ppo(
        network_settings=tiny(normalize=True), reward_signals=signals, max_steps=256
    )
    return PPOTrainer("B", settings, make_envs("CartPole-v1", 2), recording.reporter, seed=3)


def sac_threaded(recording: Recording, tmp: Path) -> Trainer:
    settings = small_sac(
        network_settings=tiny(normalize=True), max_steps=200, threaded=True, summary_freq=10**6
    )
    return SACTrainer("B", settings, make_envs("Pendulum-v1", 1), recording.reporter, seed=3)


CASES: dict[str, Callable[[Recording, Path], Trainer]] = {
    "ppo_box": ppo_box,
    "ppo_discrete": ppo_discrete,
    "sac_box": sac_box,
    "sac_discrete": sac_discrete,
    "ppo_memory": ppo_memory,
    "sac_memory": sac_memory,
    "ppo_signals": ppo_signals,
    "sac_threaded": sac_threaded,
}

CHECKPOINTED = ("ppo_signals", "sac_discrete", "ppo_memory")
"""The cases whose trained state a08e786 wrote as a checkpoint file under ``FIXTURES``."""


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_few_updates_give_the_recorded_state(case: str, bus: Bus, tmp_path: Path) -> None:
    trainer = train(CASES[case](Recording(bus, "B"), tmp_path))
    try:
        assert mismatches(trainer.state_dict(), load_checkpoint(AFTER_UPDATES / f"{case}.pt")) == []
    finally:
        trainer.close()


@pytest.mark.parametrize("build", [ppo_box, sac_box], ids=["ppo_box", "sac_box"])
def test_a_learning_rate_one_percent_larger_is_caught(
    build: Callable[..., Trainer], bus: Bus, tmp_path: Path
) -> None:
    """The tolerance is tight: the same run with a learning rate 1% larger differs from the
    reference in floating-point values only (counters and random-generator states are alike),
    and the comparison says so."""
    trainer = train(build(Recording(bus, "B"), tmp_path, learning_rate_scale=1.01))
    try:
        found = mismatches(
            trainer.state_dict(), load_checkpoint(AFTER_UPDATES / f"{build.__name__}.pt")
        )
    finally:
        trainer.close()
    assert found
    assert all(": off by " in line for line in found), found


@pytest.mark.parametrize("case", CHECKPOINTED)
def test_the_references_match_what_a08e786_wrote_on_another_cpu(case: str) -> None:
    """The comparison lets through what another CPU changes: a08e786 wrote the checkpoint files
    of its trained states on the CPU that recorded its digests (which the references, recorded
    on another CPU, do not give bit for bit)."""
    written = load_checkpoint(FIXTURES / f"{case}.pt")
    assert mismatches(written, load_checkpoint(AFTER_UPDATES / f"{case}.pt")) == []


def resume(case: str, bus: Bus, tmp: Path) -> Trainer:
    """A fresh trainer of ``case`` that loaded the checkpoint file of before, trained one more
    :meth:`Trainer.advance` (what ``--resume`` does with ``<Behavior>/checkpoint.pt``)."""
    trainer = CASES[case](Recording(bus, "B"), tmp)
    trainer.load_state_dict(load_checkpoint(FIXTURES / f"{case}.pt"))
    trainer.settings.max_steps = trainer.step + 1
    trainer.advance()
    trainer.wait_for_update()
    return trainer


@pytest.mark.parametrize("case", CHECKPOINTED)
def test_checkpoints_written_before_still_load_and_resume_alike(
    case: str, bus: Bus, tmp_path: Path
) -> None:
    trainer = resume(case, bus, tmp_path)
    try:
        assert mismatches(trainer.state_dict(), load_checkpoint(RESUMED / f"{case}.pt")) == []
    finally:
        trainer.close()


def record() -> None:  # pragma: no cover - run by hand to record new references
    """Write each case's state after training to ``AFTER_UPDATES`` and each checkpoint's state
    after resuming to ``RESUMED``.  The checkpoint files of a08e786 are left as they are: they
    stand for checkpoints users already have."""
    import tempfile

    AFTER_UPDATES.mkdir(parents=True, exist_ok=True)
    RESUMED.mkdir(parents=True, exist_ok=True)
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as folder:
        for case in sorted(CASES):
            with Bus() as bus:
                trainer = train(CASES[case](Recording(bus, "B"), Path(folder)))
                print(save_checkpoint(AFTER_UPDATES / f"{case}.pt", trainer.state_dict()))
                trainer.close()
        for case in CHECKPOINTED:
            with Bus() as bus:
                trainer = resume(case, bus, Path(folder))
                print(save_checkpoint(RESUMED / f"{case}.pt", trainer.state_dict()))
                trainer.close()


if __name__ == "__main__":  # pragma: no cover
    record()
    sys.exit(0)
