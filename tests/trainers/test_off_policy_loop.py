"""The off-policy loop drives any :class:`~evtrain.trainers.algorithm.OffPolicyAlgorithm`: SAC is
one (its class tower is the loop and ``Trainer``), and so is the small ε-greedy Q-learner
here, which knows nothing of SAC."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs
import numpy as np
import pytest
import torch
from gymnasium import spaces
from torch import nn

from evtrain.trainers import TrainerSettings
from evtrain.trainers.algorithm import (
    AlgorithmSpec,
    OffPolicyActions,
    OffPolicyAlgorithm,
    ReplayBatch,
)
from evtrain.trainers.base import Trainer
from evtrain.trainers.loops.off_policy import OffPolicyLoop
from evtrain.trainers.sac import SAC, SACTrainer
from evtrain.trainers.settings import SACSettings
from tests.trainers.helpers import Recording, make_envs, small_sac


def evtrain_classes(cls: type) -> list[type]:
    return [c for c in cls.__mro__ if c.__module__.startswith("evtrain.")]


def test_sac_is_the_off_policy_loop_and_the_trainer_with_an_algorithm() -> None:
    """``SACTrainer`` adds two classes to ``Trainer``'s: its own and the loop's (5 evtrain
    classes while ``Trainer`` derives from ``Bookkeeping`` and ``ThreadedUpdates``, 3 once they
    are its members); SAC itself is an algorithm object, no base of the trainer."""
    assert evtrain_classes(SACTrainer) == [SACTrainer, OffPolicyLoop, *evtrain_classes(Trainer)]
    assert len(evtrain_classes(SACTrainer)) <= 5
    assert evtrain_classes(SAC) == [SAC]


def test_the_sac_trainer_has_a_sac_algorithm(recording: Recording) -> None:
    settings = small_sac(max_steps=4)
    trainer = SACTrainer("Test", settings, make_envs("Pendulum-v1", 2), recording.reporter, seed=0)
    algorithm: OffPolicyAlgorithm = trainer.algorithm  # (mypy: SAC keeps to the protocol)
    assert isinstance(algorithm, SAC)
    assert trainer.policy_module().actor is trainer.algorithm.networks.actor
    trainer.envs.close()


# -- a small algorithm of another kind ------------------------------------------------------------


@attrs.define(kw_only=True)
class TinyQSettings:
    """What the loop reads (OffPolicyHyperparameters), and ε."""

    batch_size: int = 16
    buffer_size: int = 1000
    buffer_init_steps: int = 20
    steps_per_update: float = 2.0
    learning_rate: float = 0.01
    learning_rate_schedule: str = "linear"
    save_replay_buffer: bool = True
    epsilon: float = 0.1


class TinyQ:
    """A linear Q-function, ε-greedy, one semi-gradient TD(0) step per batch; it records what
    the loop hands it."""

    def __init__(self, spec: AlgorithmSpec) -> None:
        assert isinstance(spec.action_space, spaces.Discrete)
        self.spec = spec
        self.hp: TinyQSettings = spec.settings.hyperparameters  # type: ignore[assignment]
        obs_dim = int(np.prod(spec.observation_space.shape or ()))
        self.q = nn.Linear(obs_dim, int(spec.action_space.n)).to(spec.device)
        self.learning_rate = self.hp.learning_rate
        self.acts: list[tuple[int, bool]] = []
        self.batches: list[ReplayBatch] = []
        self.observed = 0

    def observe(self, obs: torch.Tensor, acting: nn.Module | None) -> None:
        self.observed += len(obs)

    @torch.no_grad()
    def act(
        self,
        obs: torch.Tensor,
        *,
        step: int,
        warmup: bool,
        generator: torch.Generator,
        acting: nn.Module | None,
        memories: Mapping[str, torch.Tensor],
    ) -> OffPolicyActions:
        self.acts.append((step, warmup))
        n = len(obs)
        greedy = self.q(obs).argmax(-1).cpu().numpy()
        explore = self.spec.rng.random(n) < (1.0 if warmup else self.hp.epsilon)
        random = self.spec.rng.integers(0, self.q.out_features, n)
        action = np.where(explore, random, greedy)
        return OffPolicyActions(actions=action[:, None].astype(np.float32), env_actions=action)

    def acting_module(self) -> nn.Module:
        return self.q

    def set_learning_rate(self, learning_rate: float) -> None:
        self.learning_rate = learning_rate

    def update(self, batch: ReplayBatch) -> dict[str, float | torch.Tensor]:
        self.batches.append(batch)
        with torch.no_grad():
            y = batch.rewards + 0.9 * (1 - batch.terminations) * self.q(batch.next_obs).amax(-1)
        q = self.q(batch.obs).gather(1, batch.actions.long()).squeeze(1)
        loss = (q - y).square().mean()
        self.q.zero_grad()
        loss.backward()
        with torch.no_grad():
            for p in self.q.parameters():
                assert p.grad is not None
                p.sub_(self.learning_rate * p.grad)
        return {"Losses/Value Loss": loss.detach(), "Policy/Epsilon": self.hp.epsilon}

    def policy_module(self) -> nn.Module:
        return self.q

    def state_dict(self) -> dict[str, Any]:
        return {"q": self.q.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.load_weights(state)

    def load_weights(self, state: dict[str, Any]) -> None:
        self.q.load_state_dict(state["q"])


class TinyQTrainer(OffPolicyLoop):
    settings_type = TinyQSettings
    algorithm: TinyQ

    def build_algorithm(self, spec: AlgorithmSpec) -> TinyQ:
        return TinyQ(spec)


def tiny_q(recording: Recording, **overrides: Any) -> TinyQTrainer:
    settings = TrainerSettings(
        trainer_type="tinyq",
        hyperparameters=TinyQSettings(**overrides),
        max_steps=100,
        summary_freq=50,
    )
    return TinyQTrainer("Test", settings, make_envs("CartPole-v1", 2), recording.reporter, seed=0)


def test_the_loop_warms_up_samples_and_reports_for_any_algorithm(recording: Recording) -> None:
    trainer = tiny_q(recording)
    algorithm = trainer.algorithm
    while not trainer.should_stop:
        trainer.advance()
    # every step observed and acted on, at the global step, warming up for buffer_init_steps
    assert algorithm.observed == 100
    assert algorithm.acts == [(step, step < 20) for step in range(0, 100, 2)]
    # one gradient step per steps_per_update environment steps after warm-up: (100 - 20) / 2
    assert trainer.num_updates == len(algorithm.batches) == 40
    batch = algorithm.batches[-1]
    assert batch.obs.shape == batch.next_obs.shape == (16, 4)
    assert batch.actions.shape == (16, 1) and set(batch.actions.flatten().tolist()) <= {0.0, 1.0}
    assert batch.rewards.shape == batch.terminations.shape == (16,)
    assert batch.mask is None and batch.memories == {}
    assert [b.step for b in algorithm.batches[:4]] == [22, 24, 26, 28]
    # the linear learning-rate schedule is the loop's, set before each step's gradient steps
    assert algorithm.learning_rate == pytest.approx(0.01 * (1 - 100 / 100), abs=1e-9)
    recording.flush()
    summaries = {e.step: e.values for e in recording.stats}
    assert sorted(summaries) == [50, 100]
    assert summaries[100]["Losses/Value Loss"].num == 1  # one mean per summary period
    assert summaries[100]["Policy/Epsilon"].mean == pytest.approx(0.1)
    assert "Policy/Learning Rate" in summaries[100]
    trainer.envs.close()


def test_the_loop_checkpoints_an_algorithm_beside_its_own_state(recording: Recording) -> None:
    trainer = tiny_q(recording)
    while trainer.step < 60:
        trainer.advance()
    state = trainer.state_dict()
    assert {"q", "num_updates", "replay_buffer", "step", "rng"} <= set(state)
    assert state["num_updates"] == 20 and state["replay_buffer"]["size"] == 60
    resumed = tiny_q(recording)
    resumed.load_state_dict(state)
    assert resumed.num_updates == 20 and len(resumed.replay) == 60
    assert torch.equal(resumed.algorithm.q.weight, trainer.algorithm.q.weight)
    # the generators the algorithm draws from are the loop's, restored in place
    assert resumed.algorithm.spec.rng is resumed.rng
    assert resumed.algorithm.spec.generator is resumed.generator
    assert resumed.rng.bit_generator.state == trainer.rng.bit_generator.state
    assert torch.equal(resumed.generator.get_state(), trainer.generator.get_state())
    for t in (trainer, resumed):
        t.envs.close()


def test_threaded_the_loop_acts_with_a_copy_of_the_acting_module(recording: Recording) -> None:
    settings = TrainerSettings(
        trainer_type="tinyq", hyperparameters=TinyQSettings(), max_steps=60, threaded=True
    )
    envs = make_envs("CartPole-v1", 2)
    trainer = TinyQTrainer("Test", settings, envs, recording.reporter, seed=0)
    assert trainer._acting is not None and trainer._acting.module is not trainer.algorithm.q
    while not trainer.should_stop:
        trainer.advance()
    trainer.wait_for_update()
    acting = trainer._acting.module
    assert isinstance(acting, nn.Linear) and torch.equal(acting.weight, trainer.algorithm.q.weight)
    assert trainer.num_updates == 20 and len(trainer.replay) == 60
    trainer.close()
    envs.close()


def test_sac_settings_are_what_the_loop_reads() -> None:
    from evtrain.trainers.algorithm import OffPolicyHyperparameters

    hp: OffPolicyHyperparameters = SACSettings()  # (mypy: the fields the loop reads)
    assert (hp.batch_size, hp.buffer_init_steps, hp.save_replay_buffer) == (128, 0, False)
