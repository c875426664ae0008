"""SAC with ``network_settings.memory``: sequences of one episode's consecutive steps stored with
the memories they started from, recurrent critics, the recurrent update, the replay saved."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch
from gymnasium.vector import AutoresetMode

from evtrain.trainers import MemorySettings, NetworkSettings, RewardProviders, SACSettings
from evtrain.trainers.networks.memory import RecurrentMLP
from evtrain.trainers.sac import UPDATE_STATS, SACTrainer
from evtrain.trainers.sac.memory import RecurrentSACPolicy, RecurrentTwinQ, SequenceReplayBuffer
from evtrain.trainers.settings import CuriositySettings
from tests.trainers.helpers import Recording, small_sac

MEMORY = MemorySettings(memory_size=8, sequence_length=3)


class CountingBox(gym.Env[np.ndarray, np.ndarray]):
    """Observation = steps since reset + 1; one continuous action; reward 1; never ends by
    itself (wrap in a TimeLimit)."""

    observation_space = gym.spaces.Box(0.0, 100.0, (1,), np.float32)
    action_space = gym.spaces.Box(-1.0, 1.0, (1,), np.float32)

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        super().reset(seed=seed)
        self.t = 0
        return np.array([1.0], dtype=np.float32), {}

    def step(self, action: np.ndarray) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        self.t += 1
        return np.array([self.t + 1.0], dtype=np.float32), 1.0, False, False, {}


def counting_box_envs(mode: AutoresetMode, num_envs: int = 2) -> Any:
    """Episodes of 5 steps observing 1..5 (6 final), truncated."""

    def make() -> gym.Env[Any, Any]:
        return gym.wrappers.TimeLimit(CountingBox(), max_episode_steps=5)

    return gym.vector.SyncVectorEnv([make] * num_envs, autoreset_mode=mode)


def recurrent_sac(**overrides: Any) -> Any:
    options: dict[str, Any] = dict(
        network_settings=NetworkSettings(hidden_units=16, num_layers=1, memory=MEMORY)
    )
    options.update(overrides)
    return small_sac(**options)


@pytest.mark.parametrize("mode", [AutoresetMode.SAME_STEP, AutoresetMode.NEXT_STEP])
def test_sequences_hold_one_episodes_consecutive_steps_and_their_starting_memories(
    recording: Recording, mode: AutoresetMode
) -> None:
    # No gradient step (warm-up longer than the run): the memories can be recomputed.
    settings = recurrent_sac(hyperparameters=SACSettings(batch_size=6, buffer_init_steps=1000))
    trainer = SACTrainer("Test", settings, counting_box_envs(mode), recording.reporter, seed=0)
    while trainer.step < 20:  # two episodes of 5 steps in each of the 2 environments
        trainer.advance()
    replay = trainer.replay
    assert isinstance(replay, SequenceReplayBuffer)
    actor, qf = trainer.actor, trainer.qf
    assert isinstance(actor, RecurrentMLP) and isinstance(qf, RecurrentTwinQ)
    # each episode of 5 steps: a sequence of 3, then one of 2 padded
    assert replay.size == 8 and len(replay) == 20
    expected = {(1.0, 2.0, 3.0): 3, (4.0, 5.0, 0.0): 2}
    for i in range(replay.size):
        obs = tuple(replay.obs[i, :, 0].tolist())
        k = expected[obs]
        assert replay.mask[i].tolist() == [True] * k + [False] * (3 - k)
        np.testing.assert_array_equal(replay.next_obs[i, :k, 0], np.array(obs[:k]) + 1)
        assert not replay.terminated[i].any()  # truncated: bootstrapped, not terminal
        # the memories it starts from: zero, then those after observing 1, 2, 3
        actor_memory = torch.zeros(1, 8)
        critic_memory = torch.zeros(1, 16)
        with torch.no_grad():
            for step in range(1, int(obs[0])):
                x = torch.tensor([[float(step)]])
                _, actor_memory = actor.step(x, actor_memory)
                critic_memory = qf.step(x, critic_memory)
        np.testing.assert_allclose(replay.actor_memory[i], actor_memory[0], atol=1e-6)
        np.testing.assert_allclose(replay.critic_memory[i], critic_memory[0], atol=1e-6)
        assert replay.actor_memory[i].any() == (obs[0] > 1)


def test_recurrent_sac_learns_reports_and_exports(recording: Recording) -> None:
    settings = recurrent_sac(
        hyperparameters=SACSettings(batch_size=12, buffer_init_steps=60, save_replay_buffer=True),
        summary_freq=120,
    )
    envs = gym.make_vec("Pendulum-v1", num_envs=2, vectorization_mode="sync")
    trainer = SACTrainer("Test", settings, envs, recording.reporter, seed=0)
    before = trainer.actor_params.detach().clone(), trainer.qf_params.detach().clone()
    while trainer.step < 120:
        trainer.advance()
    recording.flush()
    [event] = recording.stats
    assert set(UPDATE_STATS) <= set(event.values)
    assert trainer.num_updates == 60
    assert not torch.equal(before[0], trainer.actor_params)
    assert not torch.equal(before[1], trainer.qf_params)
    # the target critics followed by Polyak averaging: close to the critics, not equal
    assert not torch.equal(trainer.qf_target_params, trainer.qf_params)

    policy = trainer.policy_module()
    assert isinstance(policy, RecurrentSACPolicy) and policy.memory_size == 8
    with torch.no_grad():
        action, memory = policy(torch.full((4, 3), 50.0), torch.zeros(4, 8))
    assert action.shape == (4, 1) and memory.shape == (4, 8)
    assert action.abs().max() <= 2.0

    # save_replay_buffer: the stored sequences come back as they were
    envs = gym.make_vec("Pendulum-v1", num_envs=2, vectorization_mode="sync")
    resumed = SACTrainer("Test", settings, envs, recording.reporter, seed=1)
    resumed.load_state_dict(trainer.state_dict())
    assert isinstance(resumed.replay, SequenceReplayBuffer)
    assert isinstance(trainer.replay, SequenceReplayBuffer)
    assert resumed.replay.size == trainer.replay.size > 0
    assert len(resumed.replay) == len(trainer.replay)
    for name in ("obs", "next_obs", "mask", "actor_memory", "critic_memory"):
        np.testing.assert_array_equal(getattr(resumed.replay, name), getattr(trainer.replay, name))
    assert torch.equal(resumed.actor_params, trainer.actor_params)


def test_a_replay_of_another_shape_is_refused() -> None:
    small = SequenceReplayBuffer(30, 2, 1, 3, (4, 8), num_envs=1)
    other = SequenceReplayBuffer(30, 2, 1, 5, (4, 8), num_envs=1)
    with pytest.raises(ValueError, match=r"holds 0 sequences of shape \(3, 4\), this one"):
        other.load_state_dict(small.state_dict())


def test_single_transitions_come_from_the_stored_sequences_never_from_padding() -> None:
    replay = SequenceReplayBuffer(30, 1, 1, 3, (2, 4), num_envs=1)
    memories = np.zeros((1, 2), np.float32), np.zeros((1, 4), np.float32)
    for t in range(1, 5):  # an episode of 4 steps: a sequence of 3, one of 1 padded
        step = np.array([[float(t)]], np.float32)
        replay.add(
            step, step, np.ones(1), step + 1, np.zeros(1, bool), np.array([t == 4]),
            np.ones(1, bool), *memories,
        )  # fmt: skip
    assert replay.size == 2 and len(replay) == 4
    obs, actions, rewards, next_obs, terminated = replay.sample(400, np.random.default_rng(0))
    assert sorted(set(obs[:, 0].tolist())) == [1.0, 2.0, 3.0, 4.0]  # never a padded 0
    assert torch.equal(next_obs, obs + 1) and torch.equal(actions, obs)
    assert rewards.shape == terminated.shape == (400,)


def test_recurrent_sac_with_a_reward_provider(recording: Recording) -> None:
    # The signal's model stays feed-forward: it learns from single transitions of the
    # sequences, and pays its reward to the sequences' steps at update time.
    settings = recurrent_sac(
        hyperparameters=SACSettings(batch_size=12, buffer_init_steps=40),
        reward_signals=RewardProviders(curiosity=CuriositySettings(strength=0.1)),
        summary_freq=100,
    )
    envs = gym.make_vec("Pendulum-v1", num_envs=2, vectorization_mode="sync")
    trainer = SACTrainer("Test", settings, envs, recording.reporter, seed=0)
    while trainer.step < 100:
        trainer.advance()
    recording.flush()
    [event] = recording.stats
    assert {"Losses/Curiosity Forward Loss", "Losses/Q1 Loss"} <= set(event.values)
    assert trainer.num_updates == 60
