"""A trainer is a loop that has an algorithm: no trainer class is a tower of evtrain classes, an
on-policy algorithm is built from a spec and learns from a frozen batch without any loop, and a
rollout can be driven step by step exactly as ``advance`` drives it."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch

from evtrain.trainers import PPOSettings, PPOTrainer
from evtrain.trainers.algorithm import AlgorithmSpec, OnPolicyAlgorithm, OnPolicyBatch
from evtrain.trainers.finite import FiniteGuard
from evtrain.trainers.networks.policies import ActorCritic
from evtrain.trainers.registry import TRAINER_TYPES
from evtrain.world import World
from tests.trainers.helpers import Recording, make_envs, small_ppo

MAX_EVTRAIN_CLASSES = 3
"""The trainer class, its loop, :class:`~evtrain.trainers.base.Trainer` (issue 32)."""

LOOPS = {
    "mappo": "OnPolicyTrainer",
    "poca": "OnPolicyTrainer",
    "ppo": "OnPolicyTrainer",
    "sac": "OffPolicyLoop",
}
"""Each built-in trainer type's loop."""


def evtrain_classes(cls: type) -> list[str]:
    return [c.__qualname__ for c in cls.__mro__ if c.__module__.split(".")[0] == "evtrain"]


def test_every_builtin_is_parametrized_here() -> None:
    assert set(LOOPS) == set(TRAINER_TYPES)


@pytest.mark.parametrize("name", sorted(LOOPS))
def test_a_builtin_trainer_has_at_most_three_evtrain_classes_in_its_mro(name: str) -> None:
    classes = evtrain_classes(TRAINER_TYPES[name].load())
    assert len(classes) <= MAX_EVTRAIN_CLASSES, classes
    assert classes[-2:] == [LOOPS[name], "Trainer"]


def test_ppo_learns_from_a_batch_built_by_hand_without_a_loop(recording: Recording) -> None:
    """The protocol is all PPO needs: a spec, then ``update(batch) -> stats``."""
    settings = small_ppo(hyperparameters=PPOSettings(batch_size=16, buffer_size=32, num_epoch=2))
    obs_space = gym.spaces.Box(-1.0, 1.0, (3,), np.float32)
    spec = AlgorithmSpec(
        behavior_name="Hand",
        settings=settings,
        observation_space=obs_space,
        action_space=gym.spaces.Discrete(2),
        num_envs=4,
        device=torch.device("cpu"),
        world=World.current(),
        init_generator=torch.Generator().manual_seed(0),
        generator=torch.Generator().manual_seed(1),
        rng=np.random.default_rng(2),
        finite=FiniteGuard("Hand", "stop", recording.reporter),
    )
    algorithm: OnPolicyAlgorithm = PPOTrainer.algorithm_type(spec)
    g = torch.Generator().manual_seed(3)
    b_obs = torch.randn(32, 3, generator=g)
    agent = algorithm.agent
    assert isinstance(agent, ActorCritic)
    with torch.no_grad():
        b_actions, b_logprobs = agent.act(b_obs, g)
    batch = OnPolicyBatch(
        obs=b_obs,
        actions=b_actions,
        logprobs=b_logprobs,
        advantages=torch.randn(32, generator=g),
        returns=torch.randn(32, generator=g),
        step=0,
    )
    before = [p.detach().clone() for p in algorithm.agent.parameters()]
    stats = algorithm.update(batch)
    assert {"Losses/Policy Loss", "Losses/Value Loss", "Policy/Entropy"} <= set(stats)
    assert isinstance(settings.hyperparameters, PPOSettings)
    assert stats["Policy/Learning Rate"] == settings.hyperparameters.learning_rate
    after = algorithm.agent.parameters()
    changed = [not torch.equal(a, p) for a, p in zip(before, after, strict=True)]
    assert any(changed)
    assert set(algorithm.state_dict()) == {"agent", "optimizer"}


def test_a_rollout_driven_step_by_step_is_advance(recording: Recording) -> None:
    """What a loop stepping one environment for several behaviors does, behavior by behavior:
    act, step, record, then end the rollout and learn; the same numbers as ``advance``."""
    settings = small_ppo(hyperparameters=PPOSettings(batch_size=32, buffer_size=64, num_epoch=2))
    whole = PPOTrainer("Test", settings, make_envs("CartPole-v1", 2), recording.reporter, seed=5)
    steps = PPOTrainer("Test", settings, make_envs("CartPole-v1", 2), recording.reporter, seed=5)
    for _ in range(2):
        whole.advance()
        for t in range(steps.num_steps):
            actions = steps.act(t)
            results = steps.envs.step(steps.env_actions(actions))
            steps.record(t, *results)
        batch = steps.end_rollout()
        assert batch is not None and batch.obs.shape == (64, 4)
        steps.learn(batch)
    assert whole.step == steps.step == 128
    for a, b in zip(whole.agent.parameters(), steps.agent.parameters(), strict=True):
        assert torch.equal(a, b)
