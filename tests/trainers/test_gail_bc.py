"""GAIL's discriminator and reward, behavioral cloning, and SAC's use of reward providers."""

from __future__ import annotations

import math

import gymnasium as gym
import numpy as np
import pytest
import torch

from evtrain.trainers import NetworkSettings, SACTrainer, make_vector_env
from evtrain.trainers.networks.mlp import flatten_parameters
from evtrain.trainers.networks.policies import ActorCritic
from evtrain.trainers.rewards.behavioral_cloning import BehavioralCloning, actor_critic_output
from evtrain.trainers.rewards.gail import EPSILON, GAILRewardProvider
from evtrain.trainers.settings import (
    BehavioralCloningSettings,
    GAILSettings,
    RewardProviders,
    RNDSettings,
)
from evtrain.world import World
from tests.trainers.helpers import Recording, cartpole_demo, cartpole_transitions, small_sac

CPU = torch.device("cpu")


def expert_tensors(episodes: int = 4) -> tuple[torch.Tensor, torch.Tensor]:
    demo = cartpole_demo(episodes=episodes, max_steps=100)
    return (
        torch.as_tensor(demo.observations, dtype=torch.float32),
        torch.as_tensor(demo.actions, dtype=torch.int64),
    )


def gail(settings: GAILSettings, seed: int = 0) -> GAILRewardProvider:
    expert_obs, expert_actions = expert_tensors()
    return GAILRewardProvider(
        settings,
        4,
        gym.spaces.Discrete(2),
        torch.Generator().manual_seed(seed),
        CPU,
        expert_obs=expert_obs,
        expert_actions=expert_actions,
        normalize=lambda x: x,
        sampler=torch.Generator().manual_seed(seed),
    )


@pytest.mark.parametrize("use_vail", [False, True])
def test_the_discriminator_tells_the_demonstrations_from_other_behavior(use_vail: bool) -> None:
    settings = GAILSettings(
        demo_path="-",
        use_actions=True,
        use_vail=use_vail,
        strength=0.5,
        learning_rate=3e-3,
        network_settings=NetworkSettings(hidden_units=32),
    )
    signal = gail(settings)
    policy = cartpole_transitions(action=0)  # always pushing left: nothing like the expert
    stats = [signal.update(*policy, World.current()) for _ in range(150)]
    keys = {
        "Policy/GAIL Policy Estimate",
        "Policy/GAIL Expert Estimate",
        "Losses/GAIL Loss",
        "Policy/GAIL Grad Mag Loss",
    }
    if use_vail:
        keys |= {"Policy/GAIL Beta", "Losses/GAIL KL Loss"}
    assert set(stats[-1]) == keys
    assert float(stats[-1]["Losses/GAIL Loss"]) < float(stats[0]["Losses/GAIL Loss"])
    expert_estimate = float(stats[-1]["Policy/GAIL Expert Estimate"])
    policy_estimate = float(stats[-1]["Policy/GAIL Policy Estimate"])
    assert expert_estimate > 0.55 and policy_estimate < 0.45
    expert_obs, expert_actions = expert_tensors()
    expert_reward = signal.evaluate(expert_obs, expert_actions, expert_obs)
    policy_reward = signal.evaluate(*policy)
    assert expert_reward.mean() > 1.2 * policy_reward.mean()
    # ML-Agents' reward: strength * -log(1 - D (1 - eps)), D of the code's mean under VAIL
    with torch.no_grad():
        d, _ = signal.discriminator(signal._inputs(policy[0], policy[1]))
    expected = 0.5 * -np.log(1.0 - d.numpy().astype(np.float64) * (1.0 - EPSILON))
    np.testing.assert_allclose(policy_reward, expected, rtol=1e-5)
    if use_vail:  # beta follows the KL divergence, from 0, and is saved with the model
        assert float(stats[-1]["Policy/GAIL Beta"]) >= 0.0
        assert "beta" in signal.provider_state_dict()["model"]


def test_without_actions_the_discriminator_sees_observations_only() -> None:
    signal = gail(GAILSettings(demo_path="-", network_settings=NetworkSettings(num_layers=3)))
    # network_settings shapes it: 3 layers of 128 on the 4 observation values
    assert [layer.in_features for layer in signal.discriminator.body.layers] == [4, 128, 128]
    obs, _, next_obs = cartpole_transitions(action=1, steps=64)
    left = signal.evaluate(obs, torch.zeros(64, dtype=torch.int64), next_obs)
    right = signal.evaluate(obs, torch.ones(64, dtype=torch.int64), next_obs)
    assert np.array_equal(left, right)


def cloning(
    settings: BehavioralCloningSettings, agent: ActorCritic, params: torch.nn.Parameter
) -> BehavioralCloning:
    expert_obs, expert_actions = expert_tensors()
    return BehavioralCloning(
        settings,
        expert_obs=expert_obs,
        expert_actions=expert_actions,
        params=params,
        policy=actor_critic_output(agent, torch.Generator().manual_seed(0)),
        normalize=agent.normalizer,
        learning_rate=1e-3,
        batch_size=64,
        discrete=True,
        generator=torch.Generator().manual_seed(0),
        world=World.current(),
    )


def cartpole_agent() -> tuple[ActorCritic, torch.nn.Parameter]:
    env = gym.make("CartPole-v1")
    agent = ActorCritic(
        env.observation_space,
        env.action_space,
        NetworkSettings(hidden_units=32, num_layers=2),
        torch.Generator().manual_seed(0),
    )
    return agent, flatten_parameters(agent)


def test_cloning_teaches_the_policy_the_demonstrated_actions() -> None:
    agent, params = cartpole_agent()
    critic_before = [p.detach().clone() for p in agent.critic.parameters()]
    settings = BehavioralCloningSettings(demo_path="-", samples_per_update=128, strength=10.0)
    bc = cloning(settings, agent, params)
    assert bc.initial_lr == pytest.approx(1e-2)  # the trainer's 1e-3 times strength
    # 400 demonstration steps; 128 samples per epoch: 2 minibatches of 64, 3 epochs (ML-Agents)
    assert (bc.batch_size, bc.num_batches, bc.num_epoch) == (64, 2, 3)
    expert_obs, expert_actions = expert_tensors()
    losses = [bc.update(step=0)["Losses/Pretraining Loss"] for _ in range(60)]
    assert losses[-1] < 0.2 * losses[0]
    with torch.no_grad():
        agreement = (agent.deterministic(expert_obs) == expert_actions).float().mean()
    assert agreement > 0.95, agreement
    assert int(bc.optimizer.step_count) == 60 * 6
    # only the policy learns; the value network's gradient is 0 and Adam leaves it alone
    for before, after in zip(critic_before, agent.critic.parameters(), strict=True):
        assert torch.equal(before, after)


def test_the_cloning_rate_decays_to_nothing_over_steps_then_cloning_stops() -> None:
    agent, params = cartpole_agent()
    settings = BehavioralCloningSettings(demo_path="-", strength=0.5, steps=1000)
    bc = cloning(settings, agent, params)
    assert bc.learning_rate(0) == pytest.approx(5e-4)
    assert bc.learning_rate(500) == pytest.approx(2.5e-4, rel=1e-6)
    assert bc.learning_rate(1000) == pytest.approx(1e-10)
    before = params.detach().clone()
    assert bc.update(step=1000) == {"Losses/Pretraining Loss": 0.0}
    assert torch.equal(params, before) and int(bc.optimizer.step_count) == 0
    constant = cloning(BehavioralCloningSettings(demo_path="-", strength=0.5), agent, params)
    assert constant.learning_rate(10**9) == pytest.approx(5e-4)


def test_sac_learns_from_the_minibatch_rewards_plus_the_reward_providers(
    recording: Recording,
) -> None:
    settings = small_sac(
        reward_signals=RewardProviders(rnd=RNDSettings(strength=0.5)),
        network_settings=NetworkSettings(hidden_units=32, normalize=True),
    )
    trainer = SACTrainer(
        "Test", settings, make_vector_env("Pendulum-v1", 2), recording.reporter, seed=0
    )
    for _ in range(60):
        trainer.advance()
    obs, actions, rewards, next_obs, _ = (t.clone() for t in trainer.replay.sample(16, trainer.rng))
    normalizer = trainer.algorithm.networks.normalizer
    x, x_next = normalizer(obs), normalizer(next_obs)
    total = trainer.algorithm.reward_providers.rewards(x, actions, x_next, rewards)
    rnd = trainer.algorithm.reward_providers.providers["rnd"]
    with torch.no_grad():
        error = (rnd.rnd.predictor(x) - rnd.rnd.target(x)).square().sum(1)
    torch.testing.assert_close(total, rewards + 0.5 * error)
    # one model update per reward_signal_steps_per_update (= steps_per_update, 1) env step
    # after buffer_init_steps (100): 120 steps taken
    assert trainer.algorithm.reward_providers.provider_updates == 20
    assert int(rnd.optimizer.step_count) == 20
    assert not math.isnan(float(total.sum()))
