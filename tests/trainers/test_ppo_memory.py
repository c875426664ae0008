"""PPO with ``network_settings.memory``: memories carried and forgotten as ML-Agents does, values
and log-probabilities that the update's sequences reproduce, minibatches of whole sequences."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import pytest
import torch
from gymnasium.vector import AutoresetMode

from evtrain.trainers import NetworkSettings, PPOSettings, RewardProviders
from evtrain.trainers.loops.recurrent_rollout import RecurrentRollout
from evtrain.trainers.networks.memory import StatefulPolicy, sequence_layout
from evtrain.trainers.networks.recurrent import RecurrentActorCritic, RecurrentPolicy
from evtrain.trainers.ppo import PPOTrainer
from evtrain.trainers.settings import CuriositySettings, MemorySettings, RNDSettings
from tests.trainers.helpers import PPO_KEYS, CountingEnv, Recording, masked_envs, small_ppo

MEMORY = MemorySettings(memory_size=8, sequence_length=4)


def recurrent_ppo(**overrides: Any) -> Any:
    options: dict[str, Any] = dict(
        network_settings=NetworkSettings(hidden_units=16, num_layers=1, memory=MEMORY),
    )
    options.update(overrides)
    return small_ppo(**options)


def shifted_counting_envs(mode: AutoresetMode, num_envs: int) -> Any:
    """Episodes of 3 steps observing 1, 2, 3 (4 final): an observation of 0 would leave a new
    network's memory at zero, which would hide whether it was carried."""

    def make() -> gym.Env[Any, Any]:
        env = gym.wrappers.TimeLimit(CountingEnv(), max_episode_steps=3)
        return gym.wrappers.TransformObservation(env, lambda o: o + 1.0, env.observation_space)

    return gym.vector.SyncVectorEnv([make] * num_envs, autoreset_mode=mode)


def memory_of(trainer: PPOTrainer) -> RecurrentRollout:
    assert trainer.memory is not None
    return trainer.memory


def test_memory_builds_the_recurrent_agent_and_reports_ppos_stats(recording: Recording) -> None:
    envs = masked_envs(AutoresetMode.SAME_STEP)
    trainer = PPOTrainer("Test", recurrent_ppo(summary_freq=128), envs, recording.reporter, seed=0)
    assert isinstance(trainer.agent, RecurrentActorCritic)
    assert trainer.agent.memory_size == 8
    assert trainer.agent.actor.memory.hidden_size == trainer.agent.critic.memory.hidden_size == 4
    while trainer.step < 128:
        trainer.advance()
    recording.flush()
    [event] = recording.stats
    assert set(event.values) == PPO_KEYS
    assert isinstance(trainer.policy_module(), RecurrentPolicy)


@pytest.mark.parametrize("mode", [AutoresetMode.SAME_STEP, AutoresetMode.NEXT_STEP])
def test_sequences_reproduce_the_rollouts_log_probs_and_values(
    recording: Recording, mode: AutoresetMode
) -> None:
    # time_horizon 20 cuts trajectories mid-episode; normalisation changes the statistics
    # as the rollout goes: the stored observations must be the ones the networks saw.
    settings = recurrent_ppo(
        hyperparameters=PPOSettings(batch_size=64, buffer_size=256, num_epoch=1),
        network_settings=NetworkSettings(
            hidden_units=16, num_layers=1, normalize=True, memory=MEMORY
        ),
        time_horizon=20,
    )
    trainer = PPOTrainer("Test", settings, masked_envs(mode), recording.reporter, seed=0)
    for _ in range(2):
        trainer.advance()  # memories carried over from earlier rollouts, weights trained
    next_value = trainer._collect_rollout()
    advantages, returns = trainer._advantages(next_value)
    batch = trainer._batch(advantages, returns)
    b = (batch.obs, batch.actions, batch.logprobs)
    sequences = batch.sequences
    assert sequences is not None
    agent = trainer.agent
    assert isinstance(agent, RecurrentActorCritic)
    with torch.no_grad():
        logprob, _, value = agent.evaluate(
            sequences.obs,
            sequences.actor_memory,
            sequences.critic_memory,
            sequences.mask,
            b[1],
        )
    torch.testing.assert_close(logprob, b[2], rtol=0, atol=1e-5)
    breaks = trainer.rollout.terminated | trainer.rollout.truncated
    breaks[19::20] = True
    layout = sequence_layout(breaks, trainer.rollout.valid, 4)
    in_order = trainer.rollout.b_values.flatten(0, 1)[torch.from_numpy(layout.steps)]
    torch.testing.assert_close(value, in_order, rtol=0, atol=1e-5)
    # every transition is in the batch, each once; padding is not
    assert len(b[0]) == int(trainer.rollout.valid.sum()) == int(sequences.mask.sum())
    assert (
        trainer.rollout.truncated & ~trainer.rollout.terminated
    ).any()  # time limits were bootstrapped


@pytest.mark.parametrize(
    ("mode", "starts"),
    [
        # 10 steps of 3-step episodes: they start at t = 0, 3, 6, 9
        (AutoresetMode.SAME_STEP, [0, 3, 6, 9]),
        # NEXT_STEP: t = 3, 7 only reset (they observe the final observation); starts 0, 4, 8
        (AutoresetMode.NEXT_STEP, [0, 4, 8]),
    ],
)
def test_memory_is_zero_where_an_episode_starts_and_carried_elsewhere(
    recording: Recording, mode: AutoresetMode, starts: list[int]
) -> None:
    settings = recurrent_ppo(
        hyperparameters=PPOSettings(batch_size=10, buffer_size=10, num_epoch=1), time_horizon=4
    )
    trainer = PPOTrainer(
        "Test", settings, shifted_counting_envs(mode, 1), recording.reporter, seed=0
    )
    trainer._collect_rollout()
    memory = memory_of(trainer)
    for name, recorded in (("actor", memory.b_actor_memory), ("critic", memory.b_critic_memory)):
        zero = [t for t in range(10) if not recorded[t].any()]
        assert zero == starts, name  # a time_horizon cut (t = 4, 8) forgets nothing
    # the memory after the rollout is carried into the next one (the last episode goes on)
    assert memory.actor_memory.any() and memory.critic_memory.any()


def test_minibatches_are_whole_sequences_batch_size_over_sequence_length_each(
    recording: Recording,
) -> None:
    # 4 environments x 16 steps in sequences of 4: at least 16 sequences (episodes end early
    # in masked CartPole under a random policy, which pads); 8 / 4 = 2 sequences per minibatch.
    settings = recurrent_ppo(
        hyperparameters=PPOSettings(batch_size=8, buffer_size=64, num_epoch=1), time_horizon=16
    )
    trainer = PPOTrainer(
        "Test", settings, masked_envs(AutoresetMode.SAME_STEP), recording.reporter, seed=0
    )
    next_value = trainer._collect_rollout()
    batch = trainer._batch(*trainer._advantages(next_value))
    b = (batch.obs, batch.actions, batch.logprobs, batch.advantages, batch.returns)
    assert batch.sequences is not None
    count = batch.sequences.mask.shape[0]
    assert count >= 16
    seen: list[int] = []
    minibatches = 0
    for mb, chosen in trainer.algorithm._minibatches(b, batch, num_minibatches=999):
        minibatches += 1
        assert chosen is not None and chosen.mask.shape == (2, 4)
        # the minibatch's rows are its two sequences' steps, in order
        rows = chosen.rows[chosen.mask]
        assert mb[1].tolist() == b[1][rows].tolist()
        seen += rows.tolist()
        assert abs(float(mb[3].mean())) < 1e-5  # advantages normalised per minibatch
    assert minibatches == count // 2
    assert len(seen) == len(set(seen))  # no step twice in an epoch


def test_memory_longer_than_a_rollout_trains_and_exports_box_actions(
    recording: Recording,
) -> None:
    settings = recurrent_ppo(
        hyperparameters=PPOSettings(batch_size=32, buffer_size=64, num_epoch=2),
        network_settings=NetworkSettings(
            hidden_units=16, num_layers=1, memory=MemorySettings(memory_size=6, sequence_length=32)
        ),
    )
    envs = gym.make_vec("Pendulum-v1", num_envs=2, vectorization_mode="sync")
    trainer = PPOTrainer("Test", settings, envs, recording.reporter, seed=0)
    before = trainer.algorithm.flat_params.detach().clone()
    trainer.advance()
    assert not torch.equal(before, trainer.algorithm.flat_params)
    policy = trainer.policy_module()
    with torch.no_grad():
        action, memory = policy(torch.full((5, 3), 100.0), torch.zeros(5, 6))
    assert action.shape == (5, 1) and memory.shape == (5, 6)
    assert action.abs().max() <= 2.0  # clipped to Pendulum's bounds


def test_inference_carries_the_memory_and_forgets_it_at_episode_ends(
    recording: Recording,
) -> None:
    envs = shifted_counting_envs(AutoresetMode.SAME_STEP, 2)
    trainer = PPOTrainer("Test", recurrent_ppo(), envs, recording.reporter, seed=0)
    trainer.begin_inference()
    policy = trainer._policy
    assert isinstance(policy, StatefulPolicy)
    memories = []
    for _ in range(4):
        trainer.run_policy()
        assert policy.memory is not None
        memories.append(policy.memory.clone())
    # steps 1, 2 carry the memory; step 3 ends both episodes: forgotten; step 4 anew
    assert memories[0].any() and memories[1].any()
    assert not memories[2].any()
    assert memories[3].any()


def test_reward_providers_train_alongside_the_recurrent_agent(
    recording: Recording,
) -> None:
    # As in ML-Agents: the signals' own models stay feed-forward; the recurrent critic has one
    # value head per signal and carries one memory for all of them.
    settings = recurrent_ppo(
        reward_signals=RewardProviders(curiosity=CuriositySettings(), rnd=RNDSettings()),
        summary_freq=128,
    )
    envs = masked_envs(AutoresetMode.SAME_STEP, num_envs=2)
    trainer = PPOTrainer("Test", settings, envs, recording.reporter, seed=0)
    while trainer.step < 128:
        trainer.advance()
    recording.flush()
    [event] = recording.stats
    assert {"Losses/Curiosity Forward Loss", "Losses/RND Loss", "Policy/Rnd Reward"} <= set(
        event.values
    )
    assert trainer.rollout.b_values.shape == (32, 2, 3)
    assert memory_of(trainer).b_critic_memory.shape == (64, 8)


def test_threaded_rollouts_act_and_value_with_the_copy_of_before_the_update(
    recording: Recording,
) -> None:
    # threaded: the recurrent networks the rollout steps (actor and critic) are the acting
    # copy's, while the update thread trains the trainer's own.
    settings = recurrent_ppo(
        hyperparameters=PPOSettings(batch_size=32, buffer_size=64, num_epoch=2), threaded=True
    )
    trainer = PPOTrainer(
        "Test", settings, masked_envs(AutoresetMode.SAME_STEP), recording.reporter, seed=0
    )
    assert trainer._acting is not None
    for _ in range(3):
        trainer.advance()
    trainer.wait_for_update()
    acting = trainer._acting.module
    assert isinstance(acting, RecurrentActorCritic)
    for copied, trained in zip(acting.parameters(), trainer.agent.parameters(), strict=True):
        assert torch.equal(copied, trained)
    assert trainer.step == 192
    trainer.close()
