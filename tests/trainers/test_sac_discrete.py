"""Discrete SAC's arithmetic against hand-computed values, and its networks' shapes."""

from __future__ import annotations

import copy
import math
from collections.abc import Callable
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch
from gymnasium import spaces

from evtrain.errors import SpaceMismatchError
from evtrain.trainers import NetworkSettings, RewardProviders, SACSettings, SACTrainer
from evtrain.trainers.sac.discrete import (
    Branches,
    CategoricalActor,
    entropies,
    expected_q,
    policy_objective,
    soft_value,
    taken_q,
)
from evtrain.trainers.sac.twin_q import TwinQ
from evtrain.trainers.settings import CuriositySettings
from tests.action_envs import branched_cartpole
from tests.trainers.helpers import Recording, small_sac

ONE = Branches(spaces.Discrete(2))
TWO = Branches(spaces.MultiDiscrete([2, 3]))


def logs(*probs: float) -> torch.Tensor:
    return torch.tensor([probs], dtype=torch.float64).log()


# One branch, one state: pi = (0.25, 0.75), critics (1, 2) and (1.5, 0.5), alpha 0.5.
# min Q = (1, 0.5); V = 0.25 (1 - 0.5 log 0.25) + 0.75 (0.5 - 0.5 log 0.75) = 0.906167572...
ONE_LOG_PI = logs(0.25, 0.75)
ONE_Q = torch.tensor([[[1.0, 2.0]], [[1.5, 0.5]]], dtype=torch.float64)
ONE_ALPHA = torch.tensor([0.5], dtype=torch.float64)

# Two branches of 2 and 3: pi_1 = (0.5, 0.5), pi_2 = (0.2, 0.3, 0.5), critics (1, 2 | 3, 4, 5)
# and (2, 1 | 3, 3, 6), alphas (0.1, 0.2).  min Q = (1, 1 | 3, 3, 5);
# branch 1: 0.5 (1 - 0.1 log 0.5) * 2 = 1.069314718..., branch 2: 0.2 (3 - 0.2 log 0.2)
# + 0.3 (3 - 0.2 log 0.3) + 0.5 (5 - 0.2 log 0.5) = 4.205930602...; V = their mean.
TWO_LOG_PI = torch.cat([logs(0.5, 0.5), logs(0.2, 0.3, 0.5)], dim=1)
TWO_Q = torch.tensor([[[1.0, 2.0, 3.0, 4.0, 5.0]], [[2.0, 1.0, 3.0, 3.0, 6.0]]]).double()
TWO_ALPHA = torch.tensor([0.1, 0.2], dtype=torch.float64)


def test_soft_value_is_the_policy_weighted_minimum_minus_alpha_log_pi() -> None:
    value = soft_value(ONE_Q, ONE_LOG_PI, ONE_ALPHA, ONE)
    assert value.shape == (1,)
    assert value.item() == pytest.approx(0.9061675723094041, abs=1e-12)
    value = soft_value(TWO_Q, TWO_LOG_PI, TWO_ALPHA, TWO)
    assert value.item() == pytest.approx((1.0693147180559945 + 4.205930602812915) / 2, abs=1e-12)


def test_taken_q_is_each_critic_s_mean_over_branches_of_the_taken_actions() -> None:
    q = taken_q(ONE_Q, torch.tensor([[1]]), ONE)
    assert q.tolist() == [[2.0], [0.5]]
    # action (1, 0): critic 1 (2 + 3) / 2, critic 2 (1 + 3) / 2
    q = taken_q(TWO_Q, torch.tensor([[1, 0]]), TWO)
    assert q.tolist() == [[2.5], [2.0]]


def test_policy_objective_sums_alpha_log_pi_minus_min_q_over_actions_and_branches() -> None:
    # sum_a pi (alpha log pi - min Q): the negative of V when alpha is the same
    min_q = ONE_Q.amin(0)
    loss = policy_objective(ONE_LOG_PI, min_q, ONE_ALPHA, ONE)
    assert loss.item() == pytest.approx(-0.9061675723094041, abs=1e-12)
    # two branches: summed (ML-Agents' policy loss), -(1.069314718... + 4.205930602...)
    loss = policy_objective(TWO_LOG_PI, TWO_Q.amin(0), TWO_ALPHA, TWO)
    assert loss.item() == pytest.approx(-5.275245320868909, abs=1e-12)


def test_policy_objective_gradient_moves_probability_towards_the_better_action() -> None:
    logits = torch.zeros(1, 2, requires_grad=True)
    min_q = torch.tensor([[0.0, 1.0]])
    loss = policy_objective(torch.log_softmax(logits, -1), min_q, torch.tensor([0.1]), ONE)
    torch.autograd.backward(loss)
    assert logits.grad is not None
    # d/dlogit_1 of sum pi (0.1 log pi - Q) at the uniform policy: pi_1 (1 - pi_1) (-1) = -0.25
    # (the entropy term's gradient is 0 there)
    torch.testing.assert_close(logits.grad, torch.tensor([[0.25, -0.25]]))


def test_entropies_and_expected_q_per_branch() -> None:
    h = entropies(TWO_LOG_PI, TWO)
    torch.testing.assert_close(
        h, torch.tensor([[math.log(2), 1.0296530140645737]], dtype=torch.float64)
    )
    # mean over branches of sum pi min Q: (1 + (0.6 + 0.9 + 2.5)) / 2
    assert expected_q(TWO_LOG_PI, TWO_Q.amin(0), TWO).item() == pytest.approx(2.5)


def test_target_entropy_is_ml_agents_scale_of_log_n_or_the_setting() -> None:
    torch.testing.assert_close(
        TWO.target_entropy(None), torch.tensor([0.2 * math.log(2), 0.2 * math.log(3)])
    )
    assert TWO.target_entropy(0.3).tolist() == pytest.approx([0.3, 0.3])


def test_branches_refuse_what_they_cannot_index() -> None:
    with pytest.raises(TypeError, match="start at 0"):
        Branches(spaces.Discrete(3, start=1))
    with pytest.raises(TypeError, match="one dimension"):
        Branches(spaces.MultiDiscrete(np.array([[2, 2], [2, 2]])))
    with pytest.raises(TypeError, match="not a discrete action space"):
        Branches(spaces.Box(-1, 1, (2,)))


def test_sampling_follows_each_branch_s_distribution() -> None:
    log_probs = torch.cat([logs(0.1, 0.9), logs(0.6, 0.3, 0.1)], dim=1).float()
    draws = TWO.sample(log_probs.expand(20_000, -1), torch.Generator().manual_seed(0))
    assert draws.shape == (20_000, 2) and draws.dtype == torch.int64
    first = np.bincount(draws[:, 0].numpy(), minlength=2) / 20_000
    second = np.bincount(draws[:, 1].numpy(), minlength=3) / 20_000
    np.testing.assert_allclose(first, [0.1, 0.9], atol=0.01)
    np.testing.assert_allclose(second, [0.6, 0.3, 0.1], atol=0.01)
    assert TWO.to_env(draws[:3].numpy().astype(np.float32)).shape == (3, 2)
    assert ONE.to_env(np.array([[1.0], [0.0]])).tolist() == [1, 0]


def test_actor_and_critics_shapes() -> None:
    network = NetworkSettings(hidden_units=8, num_layers=2)
    generator = torch.Generator().manual_seed(0)
    actor = CategoricalActor(4, TWO, network, generator)
    x = torch.randn(5, 4)
    actions, log_probs = actor(x, torch.Generator().manual_seed(1))
    assert actions.shape == (5, 2) and log_probs.shape == (5, 5)
    torch.testing.assert_close(TWO.sum(log_probs.exp()), torch.ones(5, 2))
    assert actor.deterministic(x).shape == (5, 2)
    qf = TwinQ(4, 0, network, generator, num_actions=5)
    q = qf.action_values(x)
    assert q.shape == (2, 5, 5)
    # each critic is an MLP: the fused product equals the layers applied one by one
    for k in range(2):
        h = x
        for w, b in zip(qf.weights[:-1], qf.biases[:-1], strict=True):
            h = torch.tanh(h @ w[k] + b[k])
        torch.testing.assert_close(q[k], h @ qf.weights[-1][k] + qf.biases[-1][k])


# -- the trainer -------------------------------------------------------------------------------


def cartpole() -> gym.Env[Any, Any]:
    return gym.make("CartPole-v1")


def discrete_sac(
    recording: Recording, make_env: Callable[[], gym.Env[Any, Any]] = cartpole
) -> SACTrainer:
    settings = small_sac(
        hyperparameters=SACSettings(batch_size=8, buffer_size=1000, buffer_init_steps=40),
        network_settings=NetworkSettings(hidden_units=8, num_layers=1),
    )
    envs = gym.vector.SyncVectorEnv([make_env] * 2)
    return SACTrainer("Test", settings, envs, recording.reporter, seed=0)


def test_warm_up_stores_uniform_action_indices_then_the_policy_acts(recording: Recording) -> None:
    trainer = discrete_sac(recording)
    while trainer.step < 40:
        trainer.advance()
    assert trainer.num_updates == 0
    stored = trainer.replay.actions[: len(trainer.replay)]
    assert stored.shape == (40, 1) and set(np.unique(stored)) == {0.0, 1.0}
    trainer.advance()
    assert trainer.num_updates == 2  # one per environment step after buffer_init_steps
    assert trainer.log_alpha.shape == (1,)
    torch.testing.assert_close(trainer.target_entropy, torch.tensor([0.2 * math.log(2)]))
    trainer.envs.close()


def test_one_update_is_the_paper_s_step_computed_by_hand(recording: Recording) -> None:
    trainer = discrete_sac(recording)
    while trainer.step < 40:
        trainer.advance()
    actor, qf, qf_target = (
        copy.deepcopy(m) for m in (trainer.actor, trainer.qf, trainer.qf_target)
    )
    rng = copy.deepcopy(trainer.rng)
    alpha = trainer.log_alpha.detach().exp().item()
    trainer._update()
    obs, actions, rewards, next_obs, terminated = (
        t.double() for t in trainer.replay.sample(8, rng)
    )

    def critic(net: TwinQ, k: int, s: torch.Tensor) -> list[float]:
        h = torch.tanh(s.float() @ net.weights[0][k] + net.biases[0][k])
        values: list[float] = (h @ net.weights[1][k] + net.biases[1][k]).flatten().tolist()
        return values

    def policy(net: CategoricalActor, s: torch.Tensor) -> list[float]:
        probs: list[float] = torch.softmax(net.logits(s.float()[None]), -1).flatten().tolist()
        return probs

    q_losses = [0.0, 0.0]
    with torch.no_grad():
        for i in range(8):
            p = policy(actor, next_obs[i])
            q1, q2 = (
                critic(qf_target, 0, next_obs[i][None]),
                critic(qf_target, 1, next_obs[i][None]),
            )
            v = sum(p[a] * (min(q1[a], q2[a]) - alpha * math.log(p[a])) for a in range(2))
            y = rewards[i].item() + 0.99 * (1 - terminated[i].item()) * v
            for k in range(2):
                q_losses[k] += (critic(qf, k, obs[i][None])[int(actions[i, 0])] - y) ** 2 / 8
        # the actor's loss: the critics after their step, the actor before its own
        policy_loss = 0.0
        for i in range(8):
            p = policy(actor, obs[i])
            q1, q2 = critic(trainer.qf, 0, obs[i][None]), critic(trainer.qf, 1, obs[i][None])
            policy_loss += sum(
                p[a] * (alpha * math.log(p[a]) - min(q1[a], q2[a])) for a in range(2)
            )
    reported = trainer._stats_sum.tolist()
    assert reported[:3] == pytest.approx([*q_losses, policy_loss / 8], rel=1e-5)
    # alpha's first Adam step: lr times the sign of (entropy - target), downwards here as the
    # near-uniform policy's entropy (~log 2) is above the target 0.2 log 2
    assert reported[3] == pytest.approx(math.log(2), abs=0.01)
    assert trainer.log_alpha.item() == pytest.approx(math.log(alpha) - 3e-4, rel=1e-3)
    trainer.envs.close()


def test_policy_module_gives_each_branch_s_most_likely_action(recording: Recording) -> None:
    trainer = discrete_sac(recording, branched_cartpole)
    while trainer.step < 60:
        trainer.advance()
    stored = trainer.replay.actions[: len(trainer.replay)]
    assert stored.shape == (trainer.step, 2)
    assert set(np.unique(stored[:, 1])) == {0.0, 1.0, 2.0}
    assert trainer.log_alpha.shape == (2,)
    x = torch.randn(16, 4)
    action = trainer.policy_module()(x)
    logits = trainer.actor.net(x)
    assert action.dtype == torch.int64
    assert (
        action.tolist()
        == torch.stack([logits[:, :2].argmax(1), logits[:, 2:].argmax(1)], 1).tolist()
    )
    trainer.envs.close()


def test_branches_with_curiosity_are_refused_naming_the_spaces_it_takes(
    recording: Recording,
) -> None:
    settings = small_sac(reward_signals=RewardProviders(curiosity=CuriositySettings()))
    envs = gym.vector.SyncVectorEnv([branched_cartpole])
    with pytest.raises(SpaceMismatchError) as info:
        SACTrainer("Test", settings, envs, recording.reporter, seed=0)
    assert str(info.value) == (
        "curiosity supports Discrete and Box action spaces, got MultiDiscrete"
    )
    envs.close()


def test_threaded_discrete_sac_acts_with_a_categorical_copy_and_counts_as_unthreaded(
    recording: Recording,
) -> None:
    def run(threaded: bool) -> SACTrainer:
        settings = small_sac(
            threaded=threaded,
            max_steps=120,
            hyperparameters=SACSettings(batch_size=8, buffer_size=1000, buffer_init_steps=40),
            network_settings=NetworkSettings(hidden_units=8, num_layers=1),
        )
        envs = gym.vector.SyncVectorEnv([cartpole] * 2)
        trainer = SACTrainer("Test", settings, envs, recording.reporter, seed=1)
        if threaded:
            assert trainer._acting is not None
            assert isinstance(trainer._acting.module.actor, CategoricalActor)
        while not trainer.should_stop:
            trainer.advance()
        trainer.write_final_summary()
        trainer.close()
        return trainer

    threaded, again, unthreaded = run(True), run(True), run(False)
    assert torch.equal(threaded.actor_params, again.actor_params)
    assert torch.equal(threaded.qf_params, again.qf_params)
    # (the runs' episodes differ, so do the steps their resets take: NEXT_STEP autoreset)
    for trainer in (threaded, unthreaded):
        assert trainer.num_updates == int(trainer.actor_optimizer.step_count) == trainer.step - 40
        assert len(trainer.replay) == trainer.step
