"""Discrete action masks (an ``action_mask`` observation, PettingZoo's key): where the layout
puts them, the masked distributions of PPO and discrete SAC, the exported policy's
``action_mask`` input in onnxruntime, and real ``evtrain learn`` runs of PPO and SAC on
:mod:`tests.masked_envs`, whose environment raises on a masked action."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import onnx
import pytest
import torch
from gymnasium import spaces
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from evtrain import StatsReporter
from evtrain.bus import Bus
from evtrain.errors import SpaceMismatchError
from evtrain.export import PolicyExporter, onnx_policy
from evtrain.run.learn import learn
from evtrain.trainers import (
    MemorySettings,
    NetworkSettings,
    PPOTrainer,
    RewardProviders,
    RewardProviderSettings,
    SACTrainer,
)
from evtrain.trainers.networks.masks import MASKED_LOGIT, allowed
from evtrain.trainers.networks.policies import ActorCritic, DeterministicPolicy, sample_action
from evtrain.trainers.networks.recurrent import RecurrentActorCritic, RecurrentPolicy
from evtrain.trainers.observations import VectorNormalizer, observation_layout, policy_inputs
from evtrain.trainers.sac.discrete import Branches, CategoricalActor, soft_value
from evtrain.trainers.sac.discrete_policy import DiscreteSACPolicy
from evtrain.trainers.settings import CuriositySettings
from tests.helpers import run_config
from tests.masked_envs import MaskedChoice, masked_choice
from tests.trainers.helpers import small_ppo, small_sac

N = 4
NETWORK = NetworkSettings(hidden_units=8, num_layers=1, normalize=True)
SPACE = MaskedChoice(n=N).observation_space
MEMORY = MemorySettings(memory_size=8, sequence_length=4)


def rows(observation: np.ndarray, mask: np.ndarray) -> torch.Tensor:
    """Observation rows of :data:`SPACE`: the vector, then the mask (the layout's order)."""
    layout = observation_layout(SPACE)
    obs = {"observation": observation, "action_mask": mask}
    return torch.from_numpy(layout.rows(obs))


def random_masks(rng: np.random.Generator, count: int) -> np.ndarray:
    """``count`` masks of :data:`N` actions, a quarter of them all zeros."""
    masks = (rng.random((count, N)) < 0.5).astype(np.int8)
    masks[rng.random(count) < 0.25] = 0
    return masks


# -- the layout ---------------------------------------------------------------------------------


def test_the_mask_sits_after_the_vectors_outside_the_features_and_the_normaliser() -> None:
    space = spaces.Dict(
        {
            "action_mask": spaces.Box(0, 1, (N,), np.int8),
            "camera": spaces.Box(0, 255, (20, 20, 3), np.uint8),
            "speed": spaces.Box(-1.0, 1.0, (2,), np.float32),
        }
    )
    layout = observation_layout(space, spaces.Discrete(N))
    assert [(p.key, p.start, p.mask) for p in layout.parts] == [
        ("speed", 0, False),
        ("action_mask", 2, True),
        ("camera", 6, False),
    ]
    assert layout.mask == slice(2, 6) and layout.vector_size == 2
    assert layout.features(NETWORK) == 2 + NETWORK.hidden_units  # no mask among them
    assert layout.input_names == ("action_mask", "camera", "speed")

    vector = observation_layout(SPACE, spaces.Discrete(N))
    assert not vector.plain and vector.mask == slice(N, 2 * N)
    encoder = vector.encoder(NETWORK, torch.Generator().manual_seed(0))
    assert encoder is not None and list(encoder.parameters()) == []
    x = rows(np.full((3, N), 7.0, np.float32), np.ones((3, N), np.int8))
    assert torch.equal(encoder(x), x[:, :N])  # the features: the vector alone

    normalizer = vector.normalizer(True)
    assert isinstance(normalizer, VectorNormalizer) and normalizer.width == N
    batch = rows(
        np.random.default_rng(0).normal(size=(64, N)).astype(np.float32), np.eye(N)[[0] * 64]
    )
    normalizer.update(batch)
    assert torch.equal(normalizer(batch)[:, N:], batch[:, N:])  # the mask as it came


@pytest.mark.parametrize(
    ("space", "action_space", "message"),
    [
        (
            SPACE,
            spaces.Box(-1.0, 1.0, (N,)),
            "observation 'action_mask' is an action mask, which needs a Discrete, MultiDiscrete "
            "or hybrid action space, got Box(-1.0, 1.0, (4,), float32); rename the observation "
            "key if it is no mask",
        ),
        (
            SPACE,
            spaces.MultiDiscrete([2, 3]),
            "observation 'action_mask' has 4 entries (shape (4,)), the action space "
            "MultiDiscrete([2 3]) has 5 actions; an action mask holds one entry per action of "
            "every branch (1: allowed, 0: masked)",
        ),
        (
            SPACE,
            spaces.Discrete(3),
            "observation 'action_mask' has 4 entries (shape (4,)), the action space Discrete(3) "
            "has 3 actions; an action mask holds one entry per action of every branch "
            "(1: allowed, 0: masked)",
        ),
        (
            spaces.Dict({"action_mask": spaces.Box(0, 1, (N,), np.int8)}),
            spaces.Discrete(N),
            "the observation holds nothing but 'action_mask', expected the observation itself "
            "beside the action mask (e.g. Dict(observation=Box, action_mask=Box))",
        ),
    ],
)
def test_a_mask_that_does_not_fit_the_actions_is_refused_by_name(
    space: spaces.Space[Any], action_space: spaces.Space[Any], message: str
) -> None:
    with pytest.raises(SpaceMismatchError) as info:
        observation_layout(space, action_space)
    assert info.value.problems == (message,)


# -- PPO's masked distribution ----------------------------------------------------------------


def test_a_row_of_zeros_allows_every_action() -> None:
    mask = torch.tensor([[1.0, 0.3, 0.0, 0.7], [0.0, 0.0, 0.0, 0.0]])
    assert allowed(mask).tolist() == [[True, False, False, True], [True] * N]


def test_masked_actions_are_never_sampled_and_the_rest_keep_their_odds() -> None:
    # the masked actions have by far the largest logits
    logits = torch.tensor([[9.0, 0.0, 9.0, math.log(3.0)]]).expand(40_000, N)
    ok = allowed(torch.tensor([[0.0, 1.0, 0.0, 1.0]]).expand(40_000, N))
    out = logits.masked_fill(~ok, MASKED_LOGIT)
    action, log_prob = sample_action(
        out, torch.zeros(0), True, torch.Generator().manual_seed(0), ok
    )
    counts = np.bincount(action.numpy(), minlength=N)
    assert counts[0] == counts[2] == 0
    assert counts[3] / counts.sum() == pytest.approx(0.75, abs=0.01)  # 3 : 1 among the allowed
    expected = torch.where(action == 3, math.log(0.75), math.log(0.25))
    torch.testing.assert_close(log_prob, expected)


def test_ppo_scores_the_masked_distribution_and_its_argmax_is_allowed() -> None:
    agent = ActorCritic(SPACE, spaces.Discrete(N), NETWORK, torch.Generator().manual_seed(0))
    with torch.no_grad():  # logits (3, 2, 1, 0) whatever the observation
        agent.actor.out.weight.zero_()
        agent.actor.out.bias.copy_(torch.tensor([3.0, 2.0, 1.0, 0.0]))
    masks = np.array([[0, 1, 1, 0], [0, 0, 0, 0], [0, 0, 0, 1]], np.int8)
    x = rows(np.zeros((3, N), np.float32), masks)
    action = torch.tensor([2, 1, 3])
    log_prob, entropy, _ = agent.evaluate(x, action)
    # row 0: softmax over (2, 1); row 1: all four (zeros allow all); row 2: one action
    allowed_logits = torch.tensor([2.0, 1.0]), torch.tensor([3.0, 2.0, 1.0, 0.0])
    expected_lp = [*(torch.log_softmax(z, 0)[1] for z in allowed_logits), torch.tensor(0.0)]
    expected_entropy = [-(z.softmax(0) * z.log_softmax(0)).sum() for z in allowed_logits]
    expected_entropy.append(torch.tensor(0.0))
    assert entropy is not None
    torch.testing.assert_close(log_prob, torch.stack(expected_lp))
    torch.testing.assert_close(entropy, torch.stack(expected_entropy))
    assert agent.deterministic(x).tolist() == [1, 0, 3]


def test_a_recurrent_ppo_policy_masks_its_steps_and_sequences() -> None:
    network = NetworkSettings(hidden_units=8, num_layers=1, memory=MEMORY)
    agent = RecurrentActorCritic(SPACE, spaces.Discrete(N), network, torch.Generator())
    rng = np.random.default_rng(1)
    masks = random_masks(rng, 512)
    x = rows(rng.normal(size=(512, N)).astype(np.float32), masks)
    ok = allowed(torch.from_numpy(masks).float())
    action, _, _ = agent.act(x, torch.zeros(512, 8), torch.Generator().manual_seed(1))
    assert ok.gather(1, action[:, None]).all()
    best, _ = agent.deterministic(x, torch.zeros(512, 8))
    assert ok.gather(1, best[:, None]).all()
    seq = x.reshape(128, 4, -1)
    log_prob, _, _ = agent.evaluate(
        seq, torch.zeros(128, 8), torch.zeros(128, 8), torch.ones(128, 4, dtype=torch.bool), action
    )
    assert torch.isfinite(log_prob).all() and log_prob.max() <= 0.0  # allowed: probability > 0


def test_reward_providers_see_the_whole_row_mask_included() -> None:
    envs = gym.vector.SyncVectorEnv([masked_choice, masked_choice])
    signals = RewardProviders(extrinsic=RewardProviderSettings(), curiosity=CuriositySettings())
    with Bus() as bus:
        settings = small_ppo(reward_signals=signals)
        trainer = PPOTrainer("C", settings, envs, StatsReporter(bus, "C"), seed=0)
        trainer.advance()  # the env raises on a masked action
    weight = trainer.reward_providers["curiosity"].model.state_dict()["encoder.layers.0.weight"]
    assert weight.shape[1] == 2 * N  # the observation and its mask
    envs.close()


# -- SAC's masked distribution ------------------------------------------------------------------


def test_discrete_sac_gives_masked_actions_no_probability_nor_value() -> None:
    branches = Branches(spaces.Discrete(N))
    layout = observation_layout(SPACE, spaces.Discrete(N))
    encoder = layout.encoder(NETWORK, torch.Generator())
    actor = CategoricalActor(N, branches, NETWORK, torch.Generator(), encoder, layout.mask)
    masks = np.array([[1, 0, 1, 0], [0, 0, 0, 0]], np.int8)
    x = rows(np.ones((2, N), np.float32), masks)
    probs = actor.log_probs(x).exp()
    assert probs[0, 1] == probs[0, 3] == 0.0 and (probs[1] > 0.0).all()
    torch.testing.assert_close(probs.sum(-1), torch.ones(2))
    # the soft value of s' is over the actions allowed at s': a masked action's huge Q is
    # worth nothing there
    q_next = torch.tensor([0.0, 1e6, 0.0, 1e6]).expand(2, 2, N)
    value = soft_value(q_next, actor.log_probs(x), torch.zeros(1), branches)
    assert value[0] == 0.0 and value[1] > 1e5
    picks = actor(x.repeat(1000, 1), torch.Generator().manual_seed(0))[0][:, 0]
    assert set(picks[0::2].tolist()) == {0, 2} and set(picks[1::2].tolist()) == {0, 1, 2, 3}
    rng = np.random.default_rng(0)
    uniform = branches.uniform(rng, 4000, np.array([[0, 1, 1, 0]] * 4000))
    assert np.bincount(uniform[:, 0], minlength=N)[[0, 3]].tolist() == [0, 0]


def test_a_recurrent_sac_refuses_a_mask_by_name() -> None:
    envs = gym.vector.SyncVectorEnv([masked_choice])
    settings = small_sac(network_settings=NetworkSettings(hidden_units=8, memory=MEMORY))
    with Bus() as bus, pytest.raises(SpaceMismatchError) as info:
        SACTrainer("Chooser", settings, envs, StatsReporter(bus, "Chooser"), seed=0)
    assert info.value.problems == (
        "observation 'action_mask' masks the actions, which a recurrent SAC "
        "(behaviors.Chooser.network_settings.memory) does not support yet; remove memory, or "
        "use trainer_type: ppo, which masks with memory",
    )
    envs.close()


# -- export -------------------------------------------------------------------------------------


def picks_allowed_in_onnxruntime(policy: torch.nn.Module, path: Path, memory: int = 0) -> None:
    """Export ``policy`` and check onnxruntime never picks a masked action, and agrees with
    torch."""
    rng = np.random.default_rng(2)
    obs = {"action_mask": random_masks(rng, 256), "observation": rng.normal(size=(256, N))}
    inputs = policy_inputs(SPACE, obs)
    example = {k: torch.as_tensor(v[:2], dtype=torch.float32) for k, v in inputs.items()}
    PolicyExporter().export(policy, example, path)
    graph = onnx.load(path).graph
    assert [i.name for i in graph.input][:2] == ["action_mask", "observation"]
    got = onnx_policy(path, threads=1)(obs)
    ok = allowed(torch.from_numpy(obs["action_mask"]).float()).numpy()
    assert ok[np.arange(256), got].all()
    tensors = [torch.as_tensor(v, dtype=torch.float32) for v in inputs.values()]
    if memory:
        tensors.append(torch.zeros(256, memory))
    with torch.no_grad():
        want = policy(*tensors)
    assert got.tolist() == (want[0] if memory else want).tolist()


def test_the_exported_policies_take_the_mask_as_an_input_and_obey_it(tmp_path: Path) -> None:
    generator = torch.Generator().manual_seed(3)
    agent = ActorCritic(SPACE, spaces.Discrete(N), NETWORK, generator)
    picks_allowed_in_onnxruntime(DeterministicPolicy(agent, spaces.Discrete(N)), tmp_path / "a")
    network = NetworkSettings(hidden_units=8, num_layers=1, memory=MEMORY)
    recurrent = RecurrentActorCritic(SPACE, spaces.Discrete(N), network, generator)
    policy = RecurrentPolicy(recurrent, spaces.Discrete(N))
    picks_allowed_in_onnxruntime(policy, tmp_path / "r", memory=8)
    layout = observation_layout(SPACE, spaces.Discrete(N))
    encoder = layout.encoder(NETWORK, generator)
    branches = Branches(spaces.Discrete(N))
    actor = CategoricalActor(N, branches, NETWORK, generator, encoder, layout.mask)
    sac = DiscreteSACPolicy(layout.normalizer(True), actor, layout.flattener())
    picks_allowed_in_onnxruntime(sac, tmp_path / "s")


# -- real runs ---------------------------------------------------------------------------------


def masked_run(tmp_path: Path, trainer: str, max_steps: int) -> dict[str, Any]:
    """``evtrain learn`` of ``trainer`` on :func:`tests.masked_envs.masked_choice` (which
    raises on a masked action) in a subprocess; returns its options."""
    network = {"hidden_units": 16, "num_layers": 1}
    if trainer == "ppo":
        hp: dict[str, Any] = {
            "batch_size": 64,
            "buffer_size": 256,
            "learning_rate": 0.01,
            "learning_rate_schedule": "constant",
            "num_epoch": 6,
        }
    else:  # the warm-up's random actions must obey the mask too
        hp = {
            "batch_size": 32,
            "buffer_size": 2000,
            "buffer_init_steps": 100,
            "learning_rate": 3e-3,
        }
    behavior = {
        "trainer_type": trainer,
        "hyperparameters": hp,
        "network_settings": network,
        "max_steps": max_steps,
        "time_horizon": 8,
        "summary_freq": 512,
        "checkpoint_interval": max_steps,
    }
    options = {
        "behaviors": {"Chooser": behavior},
        "env_settings": {"env_id": "tests.masked_envs:masked_choice", "num_envs": 2, "seed": 1},
        "checkpoint_settings": {"run_id": "run", "results_dir": str(tmp_path / "results")},
    }
    result = run_config(tmp_path, options)  # in this process, which imports the environment
    assert result.returncode == 0, result.stderr  # MaskedActionError otherwise
    return options


def rewards(folder: Path) -> list[float]:
    acc = EventAccumulator(str(folder), size_guidance={"scalars": 0})
    acc.Reload()
    return [s.value for s in acc.Scalars("Environment/Cumulative Reward")]


@pytest.mark.parametrize(("trainer", "max_steps"), [("ppo", 4096), ("sac", 2048)])
def test_a_masked_run_never_takes_a_masked_action_learns_and_exports_the_mask(
    tmp_path: Path, trainer: str, max_steps: int
) -> None:
    options = masked_run(tmp_path, trainer, max_steps)
    run = tmp_path / "results" / "run"
    # uniformly random allowed actions earn about 1.9 an episode, the best policy 5.25
    got = rewards(run / "Chooser")
    assert got[-1] > 4.0, got
    path = run / "Chooser.onnx"
    shapes = [
        (
            i.name,
            i.type.tensor_type.elem_type,
            [d.dim_value or d.dim_param for d in i.type.tensor_type.shape.dim],
        )
        for i in onnx.load(path).graph.input
    ]
    float32 = onnx.TensorProto.FLOAT
    assert shapes == [
        ("action_mask", float32, ["batch", N]),
        ("observation", float32, ["batch", N]),
    ]
    act = onnx_policy(path, threads=1)
    best = np.eye(N, dtype=np.float32)  # each action best once
    # allowed, the best is taken; masked, the one after it, worth half
    assert act({"observation": best, "action_mask": np.ones((N, N), np.int8)}).tolist() == [
        0,
        1,
        2,
        3,
    ]
    masked = act({"observation": best, "action_mask": 1 - np.eye(N, dtype=np.int8)})
    assert masked.tolist() == [1, 2, 3, 0]

    # --inference plays the exported policy, mask and all (the env raises otherwise)
    options["checkpoint_settings"]["inference"] = True
    options["behaviors"]["Chooser"]["max_steps"] = 64
    assert learn(options).steps == {"Chooser": 64}
