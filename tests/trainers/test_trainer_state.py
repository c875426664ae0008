"""``state_dict`` / ``load_state_dict``: a resumed trainer continues exactly where it stopped."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch
from torch import nn

from evtrain.trainers import (
    NetworkSettings,
    PPOTrainer,
    SACSettings,
    SACTrainer,
    make_vector_env,
)
from evtrain.trainers.networks.policies import DeterministicPolicy
from tests.helpers import saved
from tests.trainers.helpers import Recording, small_ppo, small_sac


def assert_same_parameters(a: nn.Module, b: nn.Module) -> None:
    for (name, x), (_, y) in zip(a.state_dict().items(), b.state_dict().items(), strict=True):
        assert torch.equal(x, y), name


def test_ppo_round_trip(recording: Recording) -> None:
    settings = small_ppo(
        network_settings=NetworkSettings(hidden_units=16, num_layers=1, normalize=True)
    )
    original = PPOTrainer(
        "Test", settings, make_vector_env("CartPole-v1", 2), recording.reporter, seed=0
    )
    for _ in range(3):
        original.advance()
    state = saved(original)

    # Two fresh trainers whose environments start identically, both resumed from the state.
    resumed = [
        PPOTrainer("Test", settings, make_vector_env("CartPole-v1", 2), recording.reporter, seed=7)
        for _ in range(2)
    ]
    for trainer in resumed:
        trainer.load_state_dict(state)
        assert trainer.step == original.step == 192
        assert_same_parameters(trainer.agent, original.agent)  # normaliser buffers included
        assert trainer.algorithm.optimizer.state_dict()["state"][0]["step"] == 3 * 2 * 2
    first, second = resumed
    first.advance()
    second.advance()
    # Restored optimizer, sampling RNG and shuffling: the continuations are identical.
    assert first.step == second.step == 256
    assert_same_parameters(first.agent, second.agent)
    with pytest.raises(AssertionError):
        assert_same_parameters(first.agent, original.agent)  # and it did learn
    # The flattened parameters and the module's views stayed one and the same memory.
    assert first.agent.critic.out.weight.data_ptr() >= first.algorithm.flat_params.data_ptr()


def test_ppo_summaries_continue_from_the_resumed_step(recording: Recording) -> None:
    original = PPOTrainer(
        "Test",
        small_ppo(summary_freq=100),
        make_vector_env("CartPole-v1", 2),
        recording.reporter,
        seed=0,
    )
    original.advance()
    original.advance()  # step 128: summary 100 written
    state = saved(original)
    resumed = PPOTrainer(
        "Test",
        small_ppo(summary_freq=100),
        make_vector_env("CartPole-v1", 2),
        recording.reporter,
        seed=0,
    )
    resumed.load_state_dict(state)
    resumed.advance()  # step 192: nothing new
    resumed.advance()  # step 256: summary 200
    recording.flush()
    assert [e.step for e in recording.stats] == [100, 200]


@pytest.mark.parametrize("save_replay_buffer", [True, False])
def test_sac_round_trip(recording: Recording, save_replay_buffer: bool) -> None:
    settings = small_sac(
        hyperparameters=SACSettings(
            batch_size=16,
            buffer_size=500,
            buffer_init_steps=20,
            save_replay_buffer=save_replay_buffer,
        ),
    )
    original = SACTrainer(
        "Test", settings, make_vector_env("Pendulum-v1", 2), recording.reporter, seed=0
    )
    for _ in range(30):
        original.advance()
    state = saved(original)
    resumed = [
        SACTrainer("Test", settings, make_vector_env("Pendulum-v1", 2), recording.reporter, seed=3)
        for _ in range(2)
    ]
    for trainer in resumed:
        trainer.load_state_dict(state)
        assert (trainer.step, trainer.num_updates) == (60, 40)
        for name in ("actor", "qf", "qf_target", "normalizer"):
            assert_same_parameters(
                getattr(trainer.algorithm.networks, name),
                getattr(original.algorithm.networks, name),
            )
        assert torch.equal(
            trainer.algorithm.networks.log_alpha, original.algorithm.networks.log_alpha
        )
        assert len(trainer.replay) == (60 if save_replay_buffer else 0)
    if save_replay_buffer:
        first, second = resumed
        first.advance()
        second.advance()
        assert first.num_updates == 42
        assert_same_parameters(first.algorithm.networks.actor, second.algorithm.networks.actor)
        assert_same_parameters(first.algorithm.networks.qf, second.algorithm.networks.qf)


def test_state_of_another_trainer_type_is_refused(recording: Recording) -> None:
    ppo = PPOTrainer(
        "Test", small_ppo(), make_vector_env("CartPole-v1", 2), recording.reporter, seed=0
    )
    sac = SACTrainer(
        "Test", small_sac(), make_vector_env("Pendulum-v1", 1), recording.reporter, seed=0
    )
    with pytest.raises(
        ValueError,
        match="state of a 'ppo' trainer cannot be loaded into a 'sac' trainer for behavior 'Test'",
    ):
        sac.load_state_dict(ppo.state_dict())


def test_max_steps_stops_training(recording: Recording) -> None:
    trainer = PPOTrainer(
        "Test",
        small_ppo(max_steps=128),
        make_vector_env("CartPole-v1", 2),
        recording.reporter,
        seed=0,
    )
    advances = 0
    while not trainer.should_stop:
        trainer.advance()
        advances += 1
    assert (advances, trainer.step) == (2, 128)


def test_policy_module_is_a_live_view_unless_copied(recording: Recording) -> None:
    trainer = PPOTrainer(
        "Test", small_ppo(), make_vector_env("CartPole-v1", 2), recording.reporter, seed=0
    )
    live = trainer.policy_module()
    frozen = copy.deepcopy(live)
    trainer.advance()
    obs = torch.randn(256, 4)
    logits_live = trainer.agent.actor(obs)
    assert torch.equal(live(obs), logits_live.argmax(-1))
    assert isinstance(frozen, DeterministicPolicy)
    assert not torch.equal(frozen.agent.actor(obs), logits_live)


def test_load_weights_takes_the_networks_only(recording: Recording) -> None:
    original = PPOTrainer(
        "Test", small_ppo(), make_vector_env("CartPole-v1", 2), recording.reporter, seed=0
    )
    for _ in range(3):
        original.advance()
    fresh = PPOTrainer(
        "Test", small_ppo(), make_vector_env("CartPole-v1", 2), recording.reporter, seed=1
    )
    fresh.load_weights(saved(original))
    assert_same_parameters(fresh.agent, original.agent)
    assert fresh.step == 0
    assert fresh.algorithm.optimizer.state_dict()["state"] == {}
    assert fresh.last_mean_reward is None


def test_last_mean_reward_averages_the_last_hundred_episodes(recording: Recording) -> None:
    trainer = PPOTrainer(
        "Test", small_ppo(), make_vector_env("CartPole-v1", 2), recording.reporter, seed=0
    )
    assert trainer.last_mean_reward is None
    key = "Environment/Cumulative Reward"

    def recorded_returns() -> list[float]:
        trainer.reporter.write_stats(trainer.step)  # the unfinished period too
        recording.flush()
        return [r for e in recording.stats if key in e.values for r in e.values[key].full_dist]

    # Early episodes are short: about 2500 steps (40 updates) finish 100 of them.  Run until
    # over 100 have, rather than a fixed number of updates that depends on how fast it learns.
    for _ in range(80):
        trainer.advance()
        if len(returns := recorded_returns()) > 110:
            break
    assert len(returns) > 110
    assert trainer.last_mean_reward == pytest.approx(np.mean(returns[-100:]))

    resumed = PPOTrainer(
        "Test", small_ppo(), make_vector_env("CartPole-v1", 2), recording.reporter, seed=0
    )
    resumed.load_state_dict(saved(trainer))
    assert resumed.last_mean_reward == trainer.last_mean_reward


def test_a_state_from_another_kind_of_device_keeps_the_generator_seeded(
    recording: Recording,
) -> None:
    """A CUDA generator's state cannot be set on a CPU generator (nor the reverse): a state
    saved on the other kind of device leaves the sampling generator as the seed made it, and
    restores everything else (here the numpy generator)."""
    settings = small_ppo(network_settings=NetworkSettings(hidden_units=16, num_layers=1))
    original = PPOTrainer(
        "Test", settings, make_vector_env("CartPole-v1", 2), recording.reporter, seed=0
    )
    original.advance()
    state = {**saved(original), "generator_device": "cuda"}  # as a run on CUDA saves it
    resumed = PPOTrainer(
        "Test", settings, make_vector_env("CartPole-v1", 2), recording.reporter, seed=7
    )
    resumed.load_state_dict(state)
    assert resumed.step == original.step == 64
    assert torch.equal(resumed.generator.get_state(), torch.Generator().manual_seed(7).get_state())
    assert not torch.equal(resumed.generator.get_state(), original.generator.get_state())
    assert resumed.rng.bit_generator.state == original.rng.bit_generator.state
    for trainer in (original, resumed):
        trainer.envs.close()
