"""ML-Agents' action spaces beyond ``Discrete`` and ``Box``: ``MultiDiscrete`` branches and the
hybrid ``Dict(continuous=Box, discrete=MultiDiscrete)`` (:mod:`evtrain.trainers.networks.
action_heads`): PPO learns both on :mod:`tests.branch_envs`, masks hold per branch, the
recurrent policy takes them, and the exported graphs answer as torch does."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch
from gymnasium import spaces
from gymnasium.vector.utils import batch_space

from evtrain import StatsReporter
from evtrain.bus import Bus
from evtrain.errors import SpaceMismatchError
from evtrain.export import export_onnx, onnx_policy
from evtrain.run.learn import learn
from evtrain.trainers import MemorySettings, NetworkSettings, PPOSettings, PPOTrainer, SACTrainer
from evtrain.trainers.networks.action_heads import action_heads, to_env
from evtrain.trainers.networks.policies import ActorCritic, DeterministicPolicy
from evtrain.trainers.networks.recurrent import RecurrentActorCritic, RecurrentPolicy
from evtrain.trainers.networks.sampled import SampledPolicy
from evtrain.trainers.observations import observation_layout
from tests.branch_envs import RIGHT_ARMS, TARGETS, hybrid_target, two_bandits
from tests.group_envs import TRAINERS, RelayEnv
from tests.group_envs import settings as group_settings
from tests.helpers import run_config
from tests.trainers.helpers import small_ppo, small_sac

HYBRID = spaces.Dict(
    {
        "continuous": spaces.Box(-1.0, 1.0, (2,), np.float32),
        "discrete": spaces.MultiDiscrete([3, 2]),
    }
)
BRANCHES = spaces.MultiDiscrete([3, 2])
MASKED_OBS = spaces.Dict(
    {"obs": spaces.Box(-1.0, 1.0, (4,), np.float32), "action_mask": spaces.Box(0, 1, (5,), np.int8)}
)
NETWORK = NetworkSettings(hidden_units=16, num_layers=1)
MEMORY = MemorySettings(memory_size=8, sequence_length=4)


def train(env: Any, max_steps: int, learning_rate: float = 0.01, **kwargs: Any) -> PPOTrainer:
    """A PPO trainer on two copies of ``env``, advanced to ``max_steps``."""
    envs = gym.vector.SyncVectorEnv([env, env])
    hp = PPOSettings(
        batch_size=64,
        buffer_size=256,
        learning_rate=learning_rate,
        learning_rate_schedule="constant",
        num_epoch=6,
    )
    settings = small_ppo(hyperparameters=hp, max_steps=max_steps, time_horizon=8, **kwargs)
    with Bus() as bus:
        trainer = PPOTrainer("Branches", settings, envs, StatsReporter(bus, "Branches"), seed=0)
        for _ in range(max_steps):  # each advance takes steps: bounded well above enough
            if trainer.step >= max_steps:
                break
            trainer.advance()
    envs.close()
    return trainer


def random_masks(rng: np.random.Generator, count: int) -> np.ndarray:
    """``count`` masks of the branches ``[3, 2]``, some branches all zeros."""
    masks = (rng.random((count, 5)) < 0.5).astype(np.int8)
    masks[rng.random(count) < 0.2, :3] = 0
    return masks


def masked_rows(rng: np.random.Generator, masks: np.ndarray) -> torch.Tensor:
    layout = observation_layout(MASKED_OBS, BRANCHES)
    obs = {"obs": rng.normal(size=(len(masks), 4)).astype(np.float32), "action_mask": masks}
    return torch.from_numpy(layout.rows(obs))


def obeys(masks: np.ndarray, actions: np.ndarray) -> bool:
    """Whether every action takes an allowed arm of each branch (or any of an all-zero one)."""
    for offset, (size, branch) in enumerate(((3, 0), (2, 3))):
        entries = masks[:, branch : branch + size]
        taken = entries[np.arange(len(masks)), actions[:, offset]]
        if not np.all((taken == 1) | (entries.sum(1) == 0)):
            return False
    return True


# -- learning -----------------------------------------------------------------------------------


def test_ppo_learns_two_bandit_branches() -> None:
    trainer = train(two_bandits, 3072)
    policy = trainer.policy_module()
    with torch.no_grad():
        picked = policy(torch.eye(2)).numpy()
    assert picked.dtype == np.int64 and picked.tolist() == [list(arms) for arms in RIGHT_ARMS]


def test_ppo_with_branch_masks_never_takes_a_masked_arm_and_learns() -> None:
    trainer = train(lambda: two_bandits(masked=True), 3072)  # the env raises on a masked arm
    policy = trainer.policy_module()
    every = np.ones((2, 6), np.float32)
    with torch.no_grad():
        picked = policy(torch.from_numpy(every), torch.eye(2)).numpy()  # action_mask, context
    assert picked.tolist() == [list(arms) for arms in RIGHT_ARMS]


def test_ppo_learns_hybrid_actions() -> None:
    # a clipped Gaussian whose mean overshoots the bounds far learns nothing more there: a
    # gentler step than the bandits'
    trainer = train(hybrid_target, 8192, learning_rate=0.005)
    policy = trainer.policy_module()
    with torch.no_grad():
        action = policy(torch.eye(3)).numpy()
    assert action.shape == (3, 2)
    assert action[:, 1].tolist() == [0.0, 1.0, 2.0]  # each context's right choice
    np.testing.assert_allclose(action[:, 0], TARGETS, atol=0.25)
    env_action = to_env(trainer.envs.single_action_space, action)
    assert env_action["discrete"].dtype == np.int64 and env_action["discrete"].shape == (3, 1)


# -- the distributions ---------------------------------------------------------------------------


def test_masked_arms_of_each_branch_are_never_sampled_nor_chosen() -> None:
    agent = ActorCritic(MASKED_OBS, BRANCHES, NETWORK, torch.Generator().manual_seed(0))
    rng = np.random.default_rng(0)
    masks = random_masks(rng, 4000)
    x = masked_rows(rng, masks)
    action, log_prob = agent.act(x, torch.Generator().manual_seed(1))
    assert action.shape == (4000, 2) and obeys(masks, action.numpy())
    # the arms an all-zero branch leaves open are all taken
    open_branch = masks[:, :3].sum(1) == 0
    assert set(action[torch.from_numpy(open_branch), 0].tolist()) == {0, 1, 2}
    assert obeys(masks, agent.deterministic(x).numpy())
    scored, entropy, _ = agent.evaluate(x, action)
    torch.testing.assert_close(scored, log_prob)
    assert entropy is not None and bool((entropy <= np.log(3) + np.log(2) + 1e-6).all())


def test_branch_log_probabilities_and_entropy_are_the_sums_of_the_branches() -> None:
    heads = action_heads(HYBRID)
    assert (heads.kind, heads.continuous, heads.branches, heads.width) == (
        "hybrid",
        2,
        (3, 2),
        7,
    )
    out = torch.randn(5, 7, generator=torch.Generator().manual_seed(2))
    log_std = torch.tensor([-0.5, 0.3])
    action = torch.tensor([[0.1, -0.2, 2.0, 1.0]] * 5)
    log_prob, entropy = heads.score(out, log_std, action, True, True)
    z = (action[:, :2] - out[:, :2]) / log_std.exp()
    gauss = (-0.5 * z.square() - log_std - 0.5 * np.log(2 * np.pi)).sum(-1)
    first, second = torch.log_softmax(out[:, 2:5], -1), torch.log_softmax(out[:, 5:], -1)
    expected = gauss + first[:, 2] + second[:, 1]
    torch.testing.assert_close(log_prob, expected)
    assert entropy is not None
    gauss_entropy = (0.5 + 0.5 * np.log(2 * np.pi) + log_std).sum()
    categorical = -(first.exp() * first).sum(-1) - (second.exp() * second).sum(-1)
    torch.testing.assert_close(entropy, gauss_entropy + categorical)


def test_a_hybrid_policy_clips_its_continuous_actions_only() -> None:
    obs = spaces.Box(-1.0, 1.0, (3,), np.float32)
    agent = ActorCritic(obs, HYBRID, NETWORK, torch.Generator().manual_seed(0))
    with torch.no_grad():
        agent.actor.out.bias[:2] = torch.tensor([5.0, -5.0])
    x = torch.zeros(4, 3)
    action = DeterministicPolicy(agent, HYBRID)(x)
    assert action[:, :2].tolist() == [[1.0, -1.0]] * 4
    sampled = SampledPolicy(agent, HYBRID, torch.Generator().manual_seed(3))(x)
    assert bool((sampled[:, :2].abs() <= 1.0).all())
    assert set(sampled[:, 2].tolist()) <= {0.0, 1.0, 2.0}


def test_a_recurrent_policy_takes_branches_masks_and_hybrid_actions() -> None:
    network = NetworkSettings(
        hidden_units=8, num_layers=1, memory=MemorySettings(memory_size=8, sequence_length=4)
    )
    agent = RecurrentActorCritic(MASKED_OBS, BRANCHES, network, torch.Generator())
    rng = np.random.default_rng(1)
    masks = random_masks(rng, 512)
    x = masked_rows(rng, masks)
    action, _, _ = agent.act(x, torch.zeros(512, 8), torch.Generator().manual_seed(1))
    assert obeys(masks, action.numpy())
    best, _ = agent.deterministic(x, torch.zeros(512, 8))
    assert obeys(masks, best.numpy())
    seq, present = x.reshape(128, 4, -1), torch.ones(128, 4, dtype=torch.bool)
    log_prob, _, _ = agent.evaluate(seq, torch.zeros(128, 8), torch.zeros(128, 8), present, action)
    assert torch.isfinite(log_prob).all() and log_prob.max() <= 0.0
    hybrid = RecurrentActorCritic(spaces.Box(-1, 1, (3,)), HYBRID, network, torch.Generator())
    acted, memory = RecurrentPolicy(hybrid, HYBRID)(torch.zeros(2, 3), torch.zeros(2, 8))
    assert acted.shape == (2, 4) and memory.shape == (2, 8)


def test_recurrent_ppo_trains_on_branches() -> None:
    network = NetworkSettings(
        hidden_units=8, num_layers=1, memory=MemorySettings(memory_size=8, sequence_length=4)
    )
    trainer = train(two_bandits, 512, network_settings=network)
    assert trainer.step >= 512


# -- export ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("space", [BRANCHES, HYBRID], ids=["multi_discrete", "hybrid"])
def test_the_exported_graph_acts_as_torch(tmp_path: Path, space: spaces.Space[Any]) -> None:
    agent = ActorCritic(MASKED_OBS, space, NETWORK, torch.Generator().manual_seed(4))
    policy = DeterministicPolicy(agent, space).eval()
    rng = np.random.default_rng(5)
    masks = random_masks(rng, 64)
    obs = rng.normal(size=(64, 4)).astype(np.float32)
    example = {"action_mask": masks.astype(np.float32), "obs": obs}
    path = export_onnx(policy, example, tmp_path / "policy.onnx")
    with torch.no_grad():
        expected = policy(*(torch.from_numpy(x) for x in example.values())).numpy()
    got = onnx_policy(path, threads=1)(example)
    c = 2 if space is HYBRID else 0
    assert got.shape == expected.shape == (64, c + 2)
    np.testing.assert_array_equal(got[:, c:], expected[:, c:])
    np.testing.assert_allclose(got[:, :c], expected[:, :c], atol=1e-5)
    assert obeys(masks, got[:, c:].astype(np.int64))


# -- SAC ------------------------------------------------------------------------------------------


def test_sac_with_branch_masks_never_takes_a_masked_arm_and_learns() -> None:
    envs = gym.vector.SyncVectorEnv([lambda: two_bandits(masked=True)] * 2)
    settings = small_sac(max_steps=800)  # the warm-up's random arms obey the masks too
    with Bus() as bus:
        trainer = SACTrainer("Branches", settings, envs, StatsReporter(bus, "Branches"), seed=0)
        for _ in range(800):
            if trainer.step >= 800:
                break
            trainer.advance()
    envs.close()
    every = np.ones((2, 6), np.float32)
    with torch.no_grad():
        picked = trainer.policy_module()(torch.from_numpy(every), torch.eye(2)).numpy()
    assert picked.tolist() == [list(arms) for arms in RIGHT_ARMS]


def test_sac_refuses_hybrid_actions_naming_the_behavior() -> None:
    envs = gym.vector.SyncVectorEnv([hybrid_target])
    with Bus() as bus, pytest.raises(SpaceMismatchError) as info:
        SACTrainer("Hybrid", small_sac(), envs, StatsReporter(bus, "Hybrid"), seed=0)
    envs.close()
    assert str(info.value) == (
        "behaviors.Hybrid: SAC does not learn hybrid actions yet, got Dict('continuous': "
        "Box(-1.0, 1.0, (1,), float32), 'discrete': MultiDiscrete([3])) (ML-Agents' "
        "continuous and discrete actions at once); use trainer_type: ppo, poca or mappo, "
        "which learn them"
    )


# -- a run ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("env", ["two_bandits", "hybrid_target"])
def test_a_run_saves_exports_and_plays_its_policy_in_inference(tmp_path: Path, env: str) -> None:
    behavior = {
        "trainer_type": "ppo",
        "hyperparameters": {"batch_size": 32, "buffer_size": 64, "num_epoch": 1},
        "network_settings": {"hidden_units": 8, "num_layers": 1},
        "max_steps": 128,
        "time_horizon": 8,
        "summary_freq": 64,
        "checkpoint_interval": 64,
    }
    options: dict[str, Any] = {
        "behaviors": {"Branches": behavior},
        "env_settings": {"env_id": f"tests.branch_envs:{env}", "num_envs": 2, "seed": 1},
        "checkpoint_settings": {"run_id": "run", "results_dir": str(tmp_path / "results")},
    }
    result = run_config(tmp_path, options)
    assert result.returncode == 0, result.stderr
    run = tmp_path / "results" / "run"
    act = onnx_policy(run / "Branches.onnx", threads=1)
    assert act(np.eye(3 if env == "hybrid_target" else 2, dtype=np.float32)).shape[1] == 2
    options["checkpoint_settings"]["inference"] = True
    options["behaviors"]["Branches"]["max_steps"] = 32
    assert learn(options).steps == {"Branches": 32}


# -- the group trainers ---------------------------------------------------------------------------


class BranchedRelay(RelayEnv):
    """The relay game of :mod:`tests.group_envs` with ``space``'s actions: its first branch
    is the relay's action."""

    def __init__(self, space: spaces.Space[Any]) -> None:
        super().__init__(leave={2: 2}, join={1: 1})
        self.single_action_space = space
        self.action_space = batch_space(space, self.num_envs)

    def step(self, actions: Any) -> tuple[Any, Any, Any, Any, dict[str, Any]]:
        branches = actions["discrete"] if isinstance(actions, dict) else actions
        return super().step(np.asarray(branches)[:, 0])


@pytest.mark.parametrize("kind", ["poca", "mappo"])
@pytest.mark.parametrize("space", [BRANCHES, HYBRID], ids=["multi_discrete", "hybrid"])
def test_group_trainers_learn_from_branches_and_hybrid_actions(
    kind: str, space: spaces.Space[Any]
) -> None:
    with Bus() as bus:
        reporter = StatsReporter(bus, "Relay")
        trainer = TRAINERS[kind](
            "Relay", group_settings(kind), BranchedRelay(space), reporter, seed=0
        )
        before = [p.detach().clone() for p in trainer.algorithm.agent.parameters()]
        for _ in range(4):
            trainer.advance()
    after = list(trainer.algorithm.agent.parameters())
    assert any(not torch.equal(a, b) for a, b in zip(before, after, strict=True))
    with torch.no_grad():
        action = trainer.policy_module()(torch.zeros(2, 7))
    assert action.shape == (2, 2 if space is BRANCHES else 4)
