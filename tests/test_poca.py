"""The group trainers, ``trainer_type: poca`` (MA-POCA) and ``trainer_type: mappo``: their critics,
their returns on real rollouts of agent slots (agents that leave early, join late), their
statistics, what they refuse, checkpoints, and runs through the CLI.

The multi-agent environment here is :class:`tests.group_envs.RelayEnv`, a vector environment of
agent slots as docs/multi-agent.md defines them, which keeps the truth to compare with.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from functools import partial
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import onnx
import pytest
import torch
import yaml
from gymnasium.vector import AutoresetMode
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from torch import nn

from evtrain import Bus, ConfigError, RunOptions
from evtrain.export import PolicyExporter, onnx_policy
from evtrain.multiagent.slots import AgentSlots
from evtrain.run.checkpoints.checkpoint import load_checkpoint
from evtrain.trainers import NetworkSettings, RewardProviders, RewardProviderSettings
from evtrain.trainers.algorithm import OnPolicyBatch
from evtrain.trainers.envs import make_vector_env
from evtrain.trainers.loops.group_rollout import GroupSteps
from evtrain.trainers.loops.group_update import GroupPPO
from evtrain.trainers.loops.on_policy import OnPolicyTrainer
from evtrain.trainers.mappo.critic import MAPPOCritic
from evtrain.trainers.mappo.trainer import MAPPO
from evtrain.trainers.networks.attention import ResidualSelfAttention
from evtrain.trainers.observations import observation_layout, policy_inputs
from evtrain.trainers.poca import POCATrainer
from evtrain.trainers.poca.critic import POCACritic
from evtrain.trainers.poca.trainer import POCA
from evtrain.trainers.settings import POCASettings
from tests.group_envs import TRAINERS, RelayEnv, settings
from tests.helpers import ROOT, clean_env, config, run_config, saved
from tests.helpers import tensorboard_steps as scalar_steps
from tests.masked_envs import masked_choice
from tests.multiagent_envs import walkers
from tests.trainers.helpers import Recording

GROUP = 3
"""Agents per copy of the relay game."""


@pytest.fixture
def recording(bus: Bus) -> Recording:
    """Stats and hyperparameter events of behavior ``"Relay"``, recorded on the test's bus."""
    return Recording(bus, "Relay")


def trainer(
    kind: str, recording: Recording, env: Any = None, *, seed: int = 0, **overrides: Any
) -> OnPolicyTrainer:
    """A group trainer on the relay game: agent 2 leaves after step 2, agent 1 joins at step 1."""
    env = RelayEnv(leave={2: 2}, join={1: 1}) if env is None else env
    return TRAINERS[kind]("Relay", settings(kind, **overrides), env, recording.reporter, seed=seed)


def monte_carlo(rewards: np.ndarray[Any, Any], over: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    """Undiscounted returns to the end of each episode, ``(T, K)`` (the rollout ends one)."""
    returns = np.zeros_like(rewards, dtype=np.float64)
    following = np.zeros(rewards.shape[1])
    for t in range(len(rewards) - 1, -1, -1):
        following = rewards[t] + np.where(over[t], 0.0, following)
        returns[t] = following
    return returns


def to_episodes() -> dict[str, Any]:
    """Monte-Carlo returns: gamma 1, lambda 1, whole episodes terminated inside a rollout."""
    return {
        "hyperparameters": {"lambd": 1.0},
        "reward_signals": RewardProviders(extrinsic=RewardProviderSettings(gamma=1.0)),
    }


# -- the critics -------------------------------------------------------------------------------


def test_attention_leaves_absent_entities_out_and_pools_an_empty_group_to_zero() -> None:
    attention = ResidualSelfAttention(8, generator=torch.Generator().manual_seed(0))
    entities = torch.randn(2, 4, 8)
    present = torch.tensor([[True, True, False, False], [False, False, False, False]])
    changed = entities.clone()
    changed[:, 2:] = torch.randn(2, 2, 8) * 100  # what absent entities hold does not matter
    pooled = attention(entities, present)
    torch.testing.assert_close(attention(changed, present), pooled)
    assert torch.equal(pooled[1], torch.zeros(8))
    # the same as a group that has only the present entities
    torch.testing.assert_close(attention(entities[:1, :2], present[:1, :2]), pooled[:1])


def poca_critic(group: int = GROUP) -> POCACritic:
    env = RelayEnv(group_size=group)
    layout = observation_layout(env.single_observation_space)
    network = NetworkSettings(hidden_units=16, num_layers=1)
    generator = torch.Generator().manual_seed(0)
    return POCACritic(layout, env.single_action_space, network, group, generator)


def test_poca_value_sees_the_agents_present_in_any_order() -> None:
    critic = poca_critic()
    x = torch.randn(5, GROUP, 7)
    present = torch.tensor([[True, True, False]] * 5)
    garbage = x.clone()
    garbage[:, 2] = 1e3
    value = critic.value(x, present)
    torch.testing.assert_close(critic.value(garbage, present), value)
    order = [1, 0, 2]
    torch.testing.assert_close(critic.value(x[:, order], present[:, order]), value)
    # one agent fewer is another group
    fewer = present.clone()
    fewer[:, 1] = False
    assert not torch.allclose(critic.value(x, fewer), value)


def test_poca_baseline_is_counterfactual_in_the_agents_own_action() -> None:
    critic = poca_critic()
    x = torch.randn(4, GROUP, 7)
    actions = torch.randint(3, (4, GROUP))
    present = torch.tensor([[True, True, False]] * 4)
    baseline = critic.baseline(x, actions, present)
    assert baseline.shape == (4, GROUP)
    other = actions.clone()
    other[:, 0] = (actions[:, 0] + 1) % 3  # agent 0's own action
    changed = critic.baseline(x, other, present)
    torch.testing.assert_close(changed[:, 0], baseline[:, 0])  # b_0 does not see a_0
    assert not torch.allclose(changed[:, 1], baseline[:, 1])  # b_1 sees a_0
    absent = actions.clone()
    absent[:, 2] = (actions[:, 2] + 1) % 3  # an absent agent's action counts for nobody
    torch.testing.assert_close(critic.baseline(x, absent, present)[:, :2], baseline[:, :2])
    value, baselines = critic.evaluate(x, actions, present)
    torch.testing.assert_close(value, critic.value(x, present))
    torch.testing.assert_close(baselines, baseline)


def reference_attention(
    attention: ResidualSelfAttention, entities: torch.Tensor, present: torch.Tensor
) -> torch.Tensor:
    """The attention of ``(B, M, E)`` entities written out plainly, one set at a time: what
    the batched sets (:meth:`ResidualSelfAttention.attend_sets`) must equal."""
    B, M, E = entities.shape
    h = attention.num_heads
    x = torch.nn.functional.layer_norm(entities, (E,))
    q = attention.fc_q(x).view(B, M, 1, h, E // h)
    k = attention.fc_k(x).view(B, 1, M, h, E // h)
    v = attention.fc_v(x).view(B, 1, M, h, E // h)
    scores = (q * k).sum(-1) / E**0.5  # (B, query, key, head)
    scores = scores.masked_fill(~present[:, None, :, None], -1.0e6)
    attended = (torch.softmax(scores, dim=2)[..., None] * v).sum(2).reshape(B, M, E)
    out = torch.nn.functional.layer_norm(attention.fc_out(attended) + x, (E,))
    weight = present.to(out.dtype)[..., None]
    return (out * weight).sum(1) / (weight.sum(1) + 1.0e-7)


def reference_evaluate(
    critic: POCACritic, x: torch.Tensor, actions: torch.Tensor, present: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """POCA's value and baselines one attention call per agent, as the paper reads: agent
    ``i``'s baseline attends over its observation and the others' observations and actions."""
    G = present.shape[1]
    own = critic.obs_embedding(x)
    acted = critic.obs_action_embedding(torch.cat([x, critic.heads.features(actions)], -1))
    value = critic._head(reference_attention(critic.attention, own, present), present)
    baselines = []
    for i in range(G):
        entities = torch.cat([acted[:, :i], own[:, i : i + 1], acted[:, i + 1 :]], 1)
        mask = present.clone()
        mask[:, i] = True
        pooled = reference_attention(critic.attention, entities, mask)
        baselines.append(critic._head(pooled, mask))
    return value, torch.stack(baselines, 1)


@pytest.mark.parametrize("group", [1, 3, 4])
def test_poca_batched_value_and_baselines_equal_one_attention_per_agent(group: int) -> None:
    """The critic attends over the value's set and every agent's baseline set in one batched
    pass; values, baselines and every parameter's gradient are those of one plain attention
    call per set, up to float rounding (absent agents and a group with nobody present too)."""
    critic = poca_critic(group)
    generator = torch.Generator().manual_seed(1)
    width = critic.obs_embedding.linear.in_features
    x = torch.randn(64, group, width, generator=generator)
    actions = torch.randint(3, (64, group), generator=generator)
    present = torch.rand(64, group, generator=generator) > 0.3
    present[0] = False
    grads = []
    for evaluate in (critic.evaluate, partial(reference_evaluate, critic)):
        critic.zero_grad()
        value, baselines = evaluate(x, actions, present)
        loss = value.square().sum() + (baselines * torch.arange(1.0, group + 1)).sum()
        torch.autograd.backward(loss)
        grads.append([p.grad.clone() for p in critic.parameters() if p.grad is not None])
        if evaluate == critic.evaluate:
            batched = value.detach(), baselines.detach()
    torch.testing.assert_close(batched, (value.detach(), baselines.detach()))
    # the gradients sum 64 groups' parts in another order: a looser relative tolerance
    torch.testing.assert_close(grads[0], grads[1], rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(critic.value(x, present), batched[0])


def test_mappo_value_is_each_agents_and_ignores_absent_observations() -> None:
    env = RelayEnv()
    layout = observation_layout(env.single_observation_space)
    network = NetworkSettings(hidden_units=16, num_layers=1)
    critic = MAPPOCritic(layout, network, GROUP, torch.Generator().manual_seed(0))
    x = torch.randn(4, GROUP, 7)
    present = torch.tensor([[True, False, True]] * 4)
    values = critic(x, present)
    assert values.shape == (4, GROUP)
    assert not torch.allclose(values[:, 0], values[:, 2])  # whose value it is matters
    garbage = x.clone()
    garbage[:, 1] = 1e3
    torch.testing.assert_close(critic(garbage, present), values)


# -- rollouts of agent slots --------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["poca", "mappo"])
def test_steps_episodes_and_group_rewards_count_what_the_environment_did(
    kind: str, recording: Recording
) -> None:
    env = RelayEnv(leave={2: 2}, join={1: 1})
    group = trainer(kind, recording, env)
    for _ in range(3):
        group.advance()
    group.write_final_summary()
    recording.flush()
    [event] = recording.stats
    # only the slot steps an agent acted in are steps: 3 rollouts of 2 episodes of 2 copies,
    # where the agents act 6 + 5 + 3 times
    assert group.step == event.step == env.transitions == 3 * 2 * 2 * (6 + 5 + 3)
    stats = event.values
    assert list(stats["Environment/Cumulative Reward"].full_dist) == env.agent_returns
    lengths = stats["Environment/Episode Length"].full_dist
    assert sorted(lengths) == sorted([6.0, 5.0, 3.0] * 12)
    # one group reward per copy episode: the game's 1.0 at the end, 0.5 for each unanimous step
    assert list(stats["Environment/Group Cumulative Reward"].full_dist) == env.group_returns
    assert len(env.group_returns) == 12 and min(env.group_returns) >= 1.0
    expected = {"Losses/Policy Loss", "Losses/Value Loss", "Policy/Entropy"}
    expected |= {"Policy/Extrinsic Value Estimate", "Policy/Learning Rate", "Policy/Beta"}
    if kind == "poca":
        expected |= {"Losses/Baseline Loss", "Policy/Extrinsic Baseline Estimate"}
    assert expected <= set(stats)


def rollout(group: OnPolicyTrainer) -> OnPolicyBatch:
    """One rollout collected step by step, as the group algorithm's batch."""
    for t in range(group.num_steps):
        group.record(t, *group.env_step(group.act(t)))
    batch = group.end_rollout()
    assert batch is not None
    return batch


def steps(group: OnPolicyTrainer) -> GroupSteps:
    assert group.groups is not None
    return group.groups


def core(group: OnPolicyTrainer) -> GroupPPO:
    """The group algorithm's policy, critic and optimizer."""
    assert isinstance(group.algorithm, POCA | MAPPO)
    return group.algorithm.ppo


def need(x: torch.Tensor | None) -> torch.Tensor:
    assert x is not None  # the group loop's batches have values and active
    return x


def poca(group: OnPolicyTrainer) -> POCA:
    assert isinstance(group.algorithm, POCA)
    return group.algorithm


def test_poca_returns_are_the_groups_and_a_departed_agent_keeps_its_credit(
    recording: Recording,
) -> None:
    group = trainer("poca", recording, RelayEnv(leave={2: 2}, truncate=False), **to_episodes())
    b = rollout(group)
    T, C = 12, 2
    assert steps(group).episode_over[5].all() and steps(group).episode_over[11].all()
    # the group's reward: every agent's own, and the group reward
    rewards = group.rollout.rewards.reshape(T, C, GROUP).sum(-1) + steps(group).group_rewards
    returns = monte_carlo(rewards, steps(group).episode_over)
    np.testing.assert_allclose(b.returns.view(T, C).numpy(), returns, rtol=1e-5)
    # agent 2 acts in steps 0-2 of each episode only, and trains on those alone ...
    active = need(b.active).view(T, C, GROUP)
    assert active[[0, 1, 2, 6, 7, 8], :, 2].all() and not active[[3, 4, 5, 9, 10, 11], :, 2].any()
    # ... with the whole group's return after it left (the 1.0 of the episode's end included)
    assert (returns[2] >= 1.0).all()
    advantages = b.advantages.view(T, C, GROUP)
    baselines = b.extras["baselines"].view(T, C, GROUP)
    torch.testing.assert_close(advantages[2, :, 2], b.returns.view(T, C)[2] - baselines[2, :, 2])
    torch.testing.assert_close(need(b.values).view(T, C), poca(group).b_values)


def test_mappo_returns_are_each_agents_own_and_the_groups_rewards(recording: Recording) -> None:
    group = trainer("mappo", recording, RelayEnv(leave={2: 2}, truncate=False), **to_episodes())
    b = rollout(group)
    T, C = 12, 2
    rewards = group.rollout.rewards + np.repeat(steps(group).group_rewards, GROUP, axis=1)
    over = np.repeat(steps(group).episode_over, GROUP, axis=1)
    returns = monte_carlo(rewards, over)
    np.testing.assert_allclose(b.returns.reshape(T, C * GROUP).numpy(), returns, rtol=1e-5)
    # agent 2 left after step 2: the group rewards after it still reach its last steps
    slot = [c * GROUP + 2 for c in range(C)]
    assert (returns[2, slot] >= 1.0).all()
    torch.testing.assert_close(b.advantages + need(b.values), b.returns)


@pytest.mark.parametrize("truncate", [True, False])
def test_a_time_limit_bootstraps_a_group_from_its_final_observations(
    truncate: bool, recording: Recording
) -> None:
    group = trainer("poca", recording, RelayEnv(leave={2: 2}, truncate=truncate), **to_episodes())
    assert isinstance(group, POCATrainer)
    b = rollout(group)
    T, C = 12, 2
    bootstrap = poca(group).group_bootstrap
    rewards = group.rollout.rewards.reshape(T, C, GROUP).sum(-1) + steps(group).group_rewards
    returns = b.returns.view(T, C).numpy()
    np.testing.assert_allclose(returns[5], rewards[5] + bootstrap[5], rtol=1e-5)
    assert bool((bootstrap[steps(group).episode_over] != 0.0).all()) is truncate
    assert (bootstrap[~steps(group).episode_over] == 0.0).all()


def test_on_agent_slots_of_a_pettingzoo_env_a_departed_agent_keeps_the_groups_credit(
    recording: Recording,
) -> None:
    """``tests.multiagent_envs.walkers`` as AgentSlots: walker_1 acts in steps 1-2 and leaves,
    walker_2 appears after step 3, every step's group reward is its number, all truncated
    after step 6."""
    slots = AgentSlots([walkers(), walkers()], "walker")
    group = trainer(
        "poca",
        recording,
        slots,
        hyperparameters={"batch_size": 12, "buffer_size": 36, "lambd": 1.0},
        reward_signals=RewardProviders(extrinsic=RewardProviderSettings(gamma=1.0)),
    )
    assert isinstance(group, POCATrainer)
    assert (group.group_size, group.num_steps) == (3, 6)  # one rollout: one episode of each
    b = rollout(group)
    assert group.step == 2 * (6 + 2 + 3)
    T, C = 6, 2
    rewards = group.rollout.rewards.reshape(T, C, GROUP).sum(-1) + steps(group).group_rewards
    assert steps(group).group_rewards[:, 0].tolist() == [1.0, 2.0, 3.0, 4.0, 5.0, 6.0]
    # a time limit: the final group (walker_0 and walker_2) is worth V of its observations
    assert steps(group).episode_over[5].all() and (poca(group).group_bootstrap[5] != 0.0).all()
    returns = monte_carlo(rewards, steps(group).episode_over) + poca(group).group_bootstrap[5]
    np.testing.assert_allclose(b.returns.view(T, C).numpy(), returns, rtol=1e-5)
    active = need(b.active).view(T, C, GROUP)
    assert active[:, 0, 1].tolist() == [True, True, False, False, False, False]
    assert active[:, 0, 2].tolist() == [False, False, False, True, True, True]
    # walker_1's last step is worth the group rewards of steps 2 to 6 (and its own rewards)
    assert (returns[1] - poca(group).group_bootstrap[5] >= 2.0 + 3.0 + 4.0 + 5.0 + 6.0).all()
    group.write_final_summary()
    recording.flush()
    stats = recording.stats[-1].values
    assert stats["Environment/Group Cumulative Reward"].full_dist == (21.0, 21.0)
    slots.close()


# -- training ------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["poca", "mappo"])
def test_the_agents_learn_to_act_together(kind: str, recording: Recording) -> None:
    """The relay game's best is 0.1 per step for each agent (random: a third of it)."""
    env = RelayEnv(copies=8, leave={2: 2}, join={1: 1})
    group = trainer(
        kind,
        recording,
        env,
        hyperparameters={
            "batch_size": 120,
            "buffer_size": 480,
            "num_epoch": 4,
            "learning_rate": 3e-3,
            "learning_rate_schedule": "constant",
        },
        network_settings=NetworkSettings(hidden_units=32),
    )
    while group.step < 10_000:
        group.advance()
    recent = env.agent_returns[-96:]
    best = (6 + 5 + 3) / 3 * 0.1
    assert np.mean(recent) > 0.8 * best
    assert np.mean(env.group_returns[-16:]) > 3.0  # 4.0 when every step is unanimous


@pytest.mark.parametrize("kind", ["poca", "mappo"])
def test_a_gymnasium_environment_is_groups_of_one(kind: str, recording: Recording) -> None:
    group = trainer(kind, recording, make_vector_env("CartPole-v1", 4), max_steps=256)
    assert (group.group_size, steps(group).num_groups) == (1, 4)
    while not group.should_stop:
        group.advance()
    group.write_final_summary()
    recording.flush()
    stats = recording.stats[-1].values
    assert stats["Environment/Cumulative Reward"].num > 0
    groups = stats["Environment/Group Cumulative Reward"]
    assert groups.num == stats["Environment/Cumulative Reward"].num and groups.sum == 0.0


@pytest.mark.parametrize("kind", ["poca", "mappo"])
def test_image_observations_go_through_encoders_in_the_policy_and_the_critic(
    kind: str, recording: Recording
) -> None:
    group = trainer(kind, recording, RelayEnv(leave={2: 2}, image=True))
    encoder = getattr(core(group).critic, "encoder")  # noqa: B009  # each critic's own
    assert isinstance(encoder, nn.Module) and group.agent.actor_encoder is not None
    before = [p.clone() for p in encoder.parameters()]
    for _ in range(2):
        group.advance()
    assert not all(torch.equal(a, b) for a, b in zip(before, encoder.parameters(), strict=True))
    env = RelayEnv(image=True)
    obs, _ = env.reset(seed=0)
    inputs = policy_inputs(env.single_observation_space, obs)
    assert list(inputs) == ["state", "view"]
    actions = group.policy_module()(
        *(torch.as_tensor(x, dtype=torch.float32) for x in inputs.values())
    )
    assert actions.shape == (6,)


@pytest.mark.parametrize("kind", ["poca", "mappo"])
def test_masked_actions_are_never_taken_and_the_export_takes_the_mask(
    kind: str, recording: Recording, tmp_path: Path
) -> None:
    """:func:`tests.masked_envs.masked_choice` raises on a masked action; groups of one."""
    envs = gym.vector.SyncVectorEnv([masked_choice] * 2, autoreset_mode=AutoresetMode.SAME_STEP)
    hyperparameters: dict[str, Any] = {"batch_size": 64, "buffer_size": 256, "num_epoch": 6}
    hyperparameters.update(learning_rate=0.01, learning_rate_schedule="constant")
    group = trainer(
        kind,
        recording,
        envs,
        hyperparameters=hyperparameters,
        time_horizon=8,
        max_steps=4096,
        summary_freq=1024,
    )
    while not group.should_stop:
        group.advance()  # MaskedActionError otherwise
    recording.flush()
    # uniformly random allowed actions earn about 1.9 an episode, the best policy 5.25
    assert recording.stats[-1].values["Environment/Cumulative Reward"].mean > 4.0
    space = envs.single_observation_space
    example = {
        k: torch.as_tensor(v[:2], dtype=torch.float32)
        for k, v in policy_inputs(space, envs.reset(seed=0)[0]).items()
    }
    PolicyExporter().export(group.policy_module(), example, tmp_path / "policy.onnx")
    inputs = [i.name for i in onnx.load(tmp_path / "policy.onnx").graph.input]
    assert inputs == ["action_mask", "observation"]
    act = onnx_policy(tmp_path / "policy.onnx", threads=1)
    best = np.eye(4, dtype=np.float32)
    masked = act({"observation": best, "action_mask": 1 - np.eye(4, dtype=np.int8)})
    assert masked.tolist() == [1, 2, 3, 0]  # the best masked: the one after it, worth half


@pytest.mark.parametrize("kind", ["poca", "mappo"])
def test_threaded_runs_are_reproducible_and_count_as_unthreaded(
    kind: str, recording: Recording
) -> None:
    def run(threaded: bool) -> OnPolicyTrainer:
        group = trainer(kind, recording, threaded=threaded, max_steps=8 * 56)
        while not group.should_stop:
            group.advance()
        group.write_final_summary()
        group.close()
        return group

    first, second, unthreaded = run(True), run(True), run(False)
    assert torch.equal(core(first).flat_params, core(second).flat_params)
    # 8 rollouts of 56 agent steps, each updated: 2 epochs x 2 minibatches
    assert first.step == unthreaded.step == 8 * 56
    assert (
        int(core(first).optimizer.step_count)
        == int(core(unthreaded).optimizer.step_count)
        == 8 * 2 * 2
    )
    assert not torch.equal(core(first).flat_params, core(unthreaded).flat_params)  # acting lagged


# -- what the group trainers refuse -------------------------------------------------------------


@pytest.mark.parametrize("kind", ["poca", "mappo"])
@pytest.mark.parametrize(
    ("behavior", "problem"),
    [
        (
            {"network_settings": {"memory": {}}},
            "behaviors.B.network_settings: memory (a recurrent policy and critic) with "
            "trainer_type {kind} is not supported by evtrain yet; remove memory, or use "
            "trainer_type: ppo",
        ),
        (
            {"reward_signals": {"curiosity": {}, "rnd": {}}},
            "behaviors.B.reward_signals: curiosity, rnd with trainer_type {kind} is not "
            "supported by evtrain (the group's returns are extrinsic only); remove "
            "reward_signals.curiosity, or use trainer_type: ppo",
        ),
        (
            {"reward_signals": {"gail": {"demo_path": "demos"}}},
            "behaviors.B.reward_signals: gail with trainer_type {kind} is not supported by "
            "evtrain (the group's returns are extrinsic only); remove reward_signals.gail, or "
            "use trainer_type: ppo",
        ),
        (
            {"behavioral_cloning": {"demo_path": "demos"}},
            "behaviors.B.behavioral_cloning: with trainer_type {kind} is not supported by "
            "evtrain yet; remove behavioral_cloning, or use trainer_type: ppo",
        ),
    ],
)
def test_what_a_group_trainer_does_not_support_is_refused_by_name(
    kind: str, behavior: dict[str, Any], problem: str
) -> None:
    with pytest.raises(ConfigError) as info:
        RunOptions.from_dict({"behaviors": {"B": {"trainer_type": kind, **behavior}}})
    assert info.value.problems == (problem.format(kind=kind),)


def test_poca_takes_ppos_keys_but_not_shared_critic() -> None:
    options = RunOptions.from_dict(
        {"behaviors": {"B": {"trainer_type": "poca", "hyperparameters": {"lambd": 0.9}}}}
    )
    hp = options.behaviors["B"].hyperparameters
    assert hp == POCASettings(lambd=0.9)
    assert (hp.batch_size, hp.buffer_size, hp.beta, hp.epsilon, hp.num_epoch) == (
        1024, 10240, 5.0e-3, 0.2, 3,
    )  # fmt: skip
    with pytest.raises(ConfigError) as info:
        RunOptions.from_dict(
            {"behaviors": {"B": {"trainer_type": "mappo", "hyperparameters": {"shared_critic": 1}}}}
        )
    assert info.value.problems[0].startswith("behaviors.B.hyperparameters.shared_critic: unknown")


def test_environments_a_group_trainer_cannot_read_are_refused(recording: Recording) -> None:
    envs = make_vector_env("CartPole-v1", 2)
    envs.metadata["autoreset_mode"] = AutoresetMode.NEXT_STEP
    with pytest.raises(ValueError, match="needs a vector environment in autoreset_mode SAME_STEP"):
        trainer("poca", recording, envs)
    uneven = make_vector_env("CartPole-v1", 4)
    uneven.group_size = 3  # type: ignore[attr-defined]  # 4 slots are no groups of 3
    with pytest.raises(ValueError, match=r"group_size must be a positive integer dividing"):
        trainer("mappo", recording, uneven)


# -- checkpoints and the CLI --------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["poca", "mappo"])
def test_a_resumed_trainer_continues_from_its_state(kind: str, recording: Recording) -> None:
    normalized = NetworkSettings(hidden_units=16, num_layers=1, normalize=True)
    original = trainer(kind, recording, network_settings=normalized)
    for _ in range(2):
        original.advance()
    state = saved(original)
    assert state["trainer_type"] == kind and {"agent", "critic", "optimizer"} <= set(state)
    resumed = [trainer(kind, recording, seed=9, network_settings=normalized) for _ in range(2)]
    for group in resumed:
        group.load_state_dict(state)
        assert group.step == original.step
        assert torch.equal(core(group).flat_params, core(original).flat_params)
        group.advance()
    assert torch.equal(core(resumed[0]).flat_params, core(resumed[1]).flat_params)
    assert not torch.equal(core(resumed[0]).flat_params, core(original).flat_params)
    other = "mappo" if kind == "poca" else "poca"
    with pytest.raises(ValueError, match=f"state of a {kind!r} trainer cannot be loaded"):
        trainer(other, recording).load_state_dict(state)


def evtrain_learn(tmp_path: Path, options: dict[str, Any], *args: str) -> None:
    """``evtrain learn`` (in this process, which imports ``tests``)."""
    result = run_config(tmp_path, options, *args)
    assert result.returncode == 0, result.stderr


def test_poca_on_a_gymnasium_env_trains_resumes_and_exports_through_the_cli(
    tmp_path: Path,
) -> None:
    hyperparameters = {"batch_size": 64, "buffer_size": 128, "num_epoch": 2}
    behavior: dict[str, Any] = {"trainer_type": "poca", "hyperparameters": hyperparameters}
    evtrain_learn(tmp_path, config(tmp_path, **behavior, max_steps=512))
    run = tmp_path / "results" / "run"
    state = load_checkpoint(run / "CartPole" / "checkpoint.pt")
    assert state["step"] == 512 and state["trainer_type"] == "poca"
    evtrain_learn(tmp_path, config(tmp_path, **behavior), "--resume")
    assert load_checkpoint(run / "CartPole" / "checkpoint.pt")["step"] == 1024
    steps = scalar_steps(run / "CartPole", "Environment/Group Cumulative Reward")
    assert steps == [256, 512, 768, 1024]
    policy = onnx_policy(run / "CartPole.onnx")
    actions = policy(np.zeros((3, 4), dtype=np.float32))
    assert actions.shape == (3,) and set(actions.tolist()) <= {0, 1}


@pytest.mark.parametrize("kind", ["poca", "mappo"])
def test_simple_spread_trains_through_the_cli_and_its_policy_runs_in_onnxruntime(
    kind: str, tmp_path: Path
) -> None:
    """mpe2's simple_spread_v3 (3 agents of behavior ``agent``, 25 steps an episode) in 2
    copies: 6 agent slots, groups of 3."""
    behavior = {
        "trainer_type": kind,
        "hyperparameters": {"batch_size": 100, "buffer_size": 300, "num_epoch": 2},
        "network_settings": {"hidden_units": 16, "num_layers": 1},
        "max_steps": 2400,
        "time_horizon": 25,
        "summary_freq": 1200,
        "checkpoint_interval": 2400,
        "keep_checkpoints": 1,
    }
    options = {
        "behaviors": {"agent": behavior},
        "env_settings": {
            "env_id": "mpe2.simple_spread_v3:parallel_env",
            "env_kwargs": {"N": 3, "local_ratio": 0.5, "max_cycles": 25},
            "num_envs": 2,
            "seed": 1,
        },
        "checkpoint_settings": {"run_id": "run", "results_dir": str(tmp_path / "results")},
    }
    evtrain_learn(tmp_path, options)
    run = tmp_path / "results" / "run"
    # 2400 agent steps: 16 episodes of each copy; no group reward in simple_spread
    accumulator = EventAccumulator(str(run / "agent"), size_guidance={"scalars": 0})
    accumulator.Reload()
    groups = accumulator.Scalars("Environment/Group Cumulative Reward")
    assert [(s.step, s.value) for s in groups] == [(1200, 0.0), (2400, 0.0)]
    agents = accumulator.Scalars("Environment/Cumulative Reward")
    assert [s.step for s in agents] == [1200, 2400] and all(s.value < 0 for s in agents)
    state = load_checkpoint(run / "agent" / "checkpoint.pt")
    assert state["trainer_type"] == kind and state["step"] == 2400
    policy = onnx_policy(run / "agent.onnx")
    actions = policy(np.random.default_rng(0).normal(size=(6, 18)).astype(np.float32))
    assert actions.shape == (6,) and set(actions.tolist()) <= {0, 1, 2, 3, 4}


def test_poca_on_two_ranks_ends_with_identical_networks_and_a_global_step(
    tmp_path: Path,
) -> None:
    """A real ``torchrun`` of 2 processes (gloo, CPU), groups of one on CartPole."""
    behavior = {
        "trainer_type": "probe_poca",
        "hyperparameters": {"batch_size": 32, "buffer_size": 64, "num_epoch": 2},
        "network_settings": {"hidden_units": 16, "normalize": True},
        "max_steps": 512,
        "time_horizon": 16,
        "summary_freq": 256,
        "checkpoint_interval": 512,
    }
    options = {
        "behaviors": {"CartPole": behavior},
        "env_settings": {"env_id": "CartPole-v1", "num_envs": 4, "seed": 5},
        "checkpoint_settings": {"run_id": "run", "results_dir": str(tmp_path / "results")},
        "plugins": {"paths": [str(ROOT / "tests" / "group_plugins")]},
        "torch_settings": {"distributed_timeout": 60},
    }
    (tmp_path / "run.yaml").write_text(yaml.safe_dump(options))
    probe = tmp_path / "probe"
    env = clean_env(
        PYTHONPATH=os.pathsep.join(str(p) for p in (ROOT / "src", ROOT)),
        EVTRAIN_PROBE_OUT=str(probe),
        OMP_NUM_THREADS="1",
    )
    torchrun = Path(sys.executable).parent / "torchrun"
    command = [str(torchrun), "--standalone", "--nproc-per-node", "2", "-m", "evtrain", "learn"]
    done = subprocess.run(
        [*command, "run.yaml"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=180
    )
    assert done.returncode == 0, done.stderr[-3000:]
    ranks = [json.loads((probe / f"trainer-rank{r}.json").read_text()) for r in (0, 1)]
    assert ranks[0]["checksum"] == ranks[1]["checksum"]  # every gradient step all-reduced
    assert ranks[0]["step"] == ranks[1]["step"] == sum(r["local_step"] for r in ranks) == 512
    assert (
        load_checkpoint(tmp_path / "results" / "run" / "CartPole" / "checkpoint.pt")["step"] == 512
    )
