"""Behaviour stays identical across restructurings of :mod:`evtrain.trainers`: a few updates from a
fixed seed give, bit for bit, the weights, optimizer states, normalisers and random-generator
states recorded on the code of before (the digests below), and checkpoints written by that code
still load.

The digests were recorded on commit a08e786 (before trainers/ was split into folders).  A digest
changes when a single bit of any tensor of :meth:`Trainer.state_dict` changes; when a change of
behaviour is intended, record the new digests (``python tests/trainers/test_bit_identical.py``)
and say so in the commit message.
"""

from __future__ import annotations

import hashlib
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from evtrain import Bus
from evtrain.run.checkpoint_file import load_checkpoint, save_checkpoint
from evtrain.trainers import (
    MemorySettings,
    NetworkSettings,
    RewardSignals,
    RewardSignalSettings,
    SACSettings,
)
from evtrain.trainers.base import Trainer
from evtrain.trainers.ppo import PPOTrainer
from evtrain.trainers.sac import SACTrainer
from evtrain.trainers.settings import CuriositySettings, GAILSettings, RNDSettings
from tests.helpers import ROOT
from tests.trainers.helpers import Recording, make_envs, small_ppo, small_sac
from tests.trainers.test_demonstrations import cartpole_demo

FIXTURES = ROOT / "tests" / "fixtures" / "trainers"
"""Checkpoints written by the code of before (see :func:`write_fixtures`)."""

TINY = NetworkSettings(hidden_units=8, num_layers=1)
MEMORY = NetworkSettings(
    hidden_units=8, num_layers=1, memory=MemorySettings(memory_size=8, sequence_length=4)
)


def digest(value: Any) -> str:
    """SHA-256 of ``value`` (a trainer state): every tensor's dtype, shape and bytes, every
    other value's ``repr``, dictionaries in key order."""
    sha = hashlib.sha256()

    def feed(item: Any) -> None:
        if isinstance(item, dict):
            sha.update(b"{")
            for key in sorted(item, key=repr):
                sha.update(repr(key).encode())
                feed(item[key])
            sha.update(b"}")
        elif isinstance(item, list | tuple):
            sha.update(b"[")
            for element in item:
                feed(element)
            sha.update(b"]")
        elif isinstance(item, torch.Tensor):
            data = item.detach().cpu().contiguous()
            sha.update(f"{data.dtype}{tuple(data.shape)}".encode())
            sha.update(data.numpy().tobytes())
        elif isinstance(item, np.ndarray):
            sha.update(f"{item.dtype}{item.shape}".encode())
            sha.update(np.ascontiguousarray(item).tobytes())
        else:
            sha.update(repr(item).encode())

    feed(value)
    return sha.hexdigest()


def train(trainer: Trainer) -> Trainer:
    while not trainer.should_stop:
        trainer.advance()
    trainer.wait_for_update()
    return trainer


def ppo_box(recording: Recording, tmp: Path) -> Trainer:
    settings = small_ppo(network_settings=TINY, max_steps=256)
    return PPOTrainer("B", settings, make_envs("Pendulum-v1", 2), recording.reporter, seed=3)


def ppo_discrete(recording: Recording, tmp: Path) -> Trainer:
    settings = small_ppo(network_settings=TINY, max_steps=256)
    settings.network_settings.normalize = True
    return PPOTrainer("B", settings, make_envs("CartPole-v1", 2), recording.reporter, seed=3)


def sac_box(recording: Recording, tmp: Path) -> Trainer:
    settings = small_sac(network_settings=TINY, max_steps=200)
    return SACTrainer("B", settings, make_envs("Pendulum-v1", 1), recording.reporter, seed=3)


def sac_discrete(recording: Recording, tmp: Path) -> Trainer:
    settings = small_sac(network_settings=TINY, max_steps=200)
    return SACTrainer("B", settings, make_envs("CartPole-v1", 2), recording.reporter, seed=3)


def ppo_memory(recording: Recording, tmp: Path) -> Trainer:
    settings = small_ppo(network_settings=MEMORY, max_steps=256, time_horizon=8)
    return PPOTrainer("B", settings, make_envs("CartPole-v1", 2), recording.reporter, seed=3)


def sac_memory(recording: Recording, tmp: Path) -> Trainer:
    hyper = SACSettings(batch_size=8, buffer_size=400, buffer_init_steps=100)
    settings = small_sac(network_settings=MEMORY, hyperparameters=hyper, max_steps=200)
    return SACTrainer("B", settings, make_envs("Pendulum-v1", 1), recording.reporter, seed=3)


def ppo_signals(recording: Recording, tmp: Path) -> Trainer:
    demo = cartpole_demo(episodes=2, max_steps=50).write(tmp / "expert.npz")
    signals = RewardSignals(
        extrinsic=RewardSignalSettings(gamma=0.99),
        curiosity=CuriositySettings(
            strength=0.02, encoding_size=8, learning_rate=1e-3, network_settings=TINY
        ),
        rnd=RNDSettings(strength=0.01, encoding_size=8, learning_rate=1e-3, network_settings=TINY),
        gail=GAILSettings(
            demo_path=str(demo), strength=0.1, use_actions=True, network_settings=TINY
        ),
    )
    settings = small_ppo(network_settings=TINY, reward_signals=signals, max_steps=256)
    return PPOTrainer("B", settings, make_envs("CartPole-v1", 2), recording.reporter, seed=3)


def sac_threaded(recording: Recording, tmp: Path) -> Trainer:
    settings = small_sac(network_settings=TINY, max_steps=200, threaded=True, summary_freq=10**6)
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

REFERENCE: dict[str, str] = {
    "ppo_box": "5a58dda6534cfce515223c183e8b5e99e572e626569bfa59124ec3910279b14f",
    "ppo_discrete": "3f1d9b968154b552bb3f3dc13fab164d8dd5dd9edb5c35f6f99adb5ed1afa44b",
    "ppo_memory": "c7784c80aec2f1b57c68a53bbf2616a39fa787cdb6cc0f9d33e0b6ce8bf944ae",
    "ppo_signals": "5a1d71c8788b3ff58f42998e5489abc7a955cd3b95191110df30d2a7c005212d",
    "sac_box": "b4755b3d15dfe4a32c4d315cda1841cf0247a9bdac232d396e0df96e4ff97df3",
    "sac_discrete": "c1c29697af883b41de91c23cc3b51d48109c32d187556c39e3618d838766696d",
    "sac_memory": "5cb72c4292785665b891fb4967a7d876cfd770fb0210ee5d16faea4a8b9bd9a7",
    "sac_threaded": "48157c28e1d5f27ac849a1f465eadc9db24025da5724db88c106b0c58b677105",
}
"""SHA-256 of each case's :meth:`Trainer.state_dict` after training, recorded on a08e786."""

RESUMED: dict[str, str] = {
    "ppo_signals": "9ebfd5dc06a4bc28bf522163b1fbbff79d7f8a37c466d5536ec6b39d6ad56c75",
    "sac_discrete": "94d71a0a3e453184969b9ad9f40500daa820a325f3394845e7c394846d681e81",
    "ppo_memory": "d0873edd1fbb530c941dd8a0dc14c5cafe0960dd70e4ee3e02e7cec6808bbff5",
}
"""SHA-256 of the state after loading ``tests/fixtures/trainers/<case>.pt`` (written on
a08e786) into a fresh trainer and training it one more :meth:`Trainer.advance`."""

CHECKPOINTED = ("ppo_signals", "sac_discrete", "ppo_memory")
"""The cases whose trained state is kept as a checkpoint file under ``FIXTURES``."""


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_few_updates_give_the_recorded_bits(case: str, bus: Bus, tmp_path: Path) -> None:
    trainer = train(CASES[case](Recording(bus, "B"), tmp_path))
    try:
        assert digest(trainer.state_dict()) == REFERENCE[case]
    finally:
        trainer.close()


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
    state = load_checkpoint(FIXTURES / f"{case}.pt")
    assert digest(state) == REFERENCE[case]  # the file holds the trained state of the case
    trainer = resume(case, bus, tmp_path)
    try:
        assert digest(trainer.state_dict()) == RESUMED[case]
    finally:
        trainer.close()


def write_fixtures() -> None:  # pragma: no cover - run by hand to record a new reference
    """Print the digests and write the checkpoint files (on the reference code only)."""
    import tempfile

    FIXTURES.mkdir(parents=True, exist_ok=True)
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as folder:
        for case in sorted(CASES):
            with Bus() as bus:
                trainer = train(CASES[case](Recording(bus, "B"), Path(folder)))
                state = trainer.state_dict()
                print(f'    "{case}": "{digest(state)}",')
                if case in CHECKPOINTED:
                    save_checkpoint(FIXTURES / f"{case}.pt", state)
                trainer.close()
        print()
        for case in CHECKPOINTED:
            with Bus() as bus:
                trainer = resume(case, bus, Path(folder))
                print(f'    "{case}": "{digest(trainer.state_dict())}",')
                trainer.close()


if __name__ == "__main__":  # pragma: no cover
    write_fixtures()
    sys.exit(0)
