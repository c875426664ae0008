"""Curiosity and RND: their settings from ML-Agents YAML, their models, PPO with them."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from gymnasium.vector import AutoresetMode

from evtrain import ConfigError, RunOptions
from evtrain.export import onnx_policy
from evtrain.run.checkpoints.checkpoint import load_checkpoint
from evtrain.run.learn import learn
from evtrain.trainers import NetworkSettings, PPOTrainer, make_vector_env
from evtrain.trainers.rewards.curiosity import CuriosityRewardProvider
from evtrain.trainers.rewards.rnd import RNDRewardProvider
from evtrain.trainers.settings import CuriositySettings, RewardProviders, RNDSettings
from evtrain.world import World
from tests.helpers import saved
from tests.trainers.helpers import Recording, cartpole_transitions, make_envs, small_ppo


def behavior(reward_signals: dict[str, Any], **settings: Any) -> dict[str, Any]:
    return {"behaviors": {"B": {"reward_signals": reward_signals, **settings}}}


def problems(data: dict[str, Any]) -> list[str]:
    with pytest.raises(ConfigError) as info:
        RunOptions.from_dict(data)
    return list(info.value.problems)


def test_ml_agents_yaml_structures_with_ml_agents_defaults() -> None:
    # Pyramids' PPO config (ML-Agents' config/ppo/Pyramids.yaml), the reward providers part.
    options = RunOptions.from_dict(
        behavior(
            {
                "extrinsic": {"gamma": 0.99, "strength": 1.0},
                "curiosity": {"gamma": 0.99, "strength": 0.02, "encoding_size": 256},
                "rnd": {"strength": 0.01, "learning_rate": "1.0e-4"},
            }
        )
    )
    signals = options.behaviors["B"].reward_signals
    assert signals.curiosity == CuriositySettings(strength=0.02, encoding_size=256)
    assert signals.rnd == RNDSettings(strength=0.01)
    assert list(signals.intrinsic) == ["curiosity", "rnd"]
    defaults = RunOptions.from_dict(behavior({"curiosity": {}, "rnd": {}})).behaviors["B"]
    assert attrs_values(defaults.reward_signals.curiosity) == (0.99, 1.0, 64, 3.0e-4)
    assert attrs_values(defaults.reward_signals.rnd) == (0.99, 1.0, 64, 1.0e-4)
    # A run without them writes (and reports) its reward providers as before.
    plain = RunOptions.from_dict(behavior({"extrinsic": {"gamma": 0.9}}))
    assert plain.as_dict()["behaviors"]["B"]["reward_signals"] == {
        "extrinsic": {"gamma": 0.9, "strength": 1.0}
    }
    assert RunOptions.from_dict(options.as_dict()) == options


def attrs_values(s: CuriositySettings | RNDSettings | None) -> tuple[float, ...]:
    assert s is not None
    return (s.gamma, s.strength, s.encoding_size, s.learning_rate)


def test_reward_provider_settings_errors_name_the_key() -> None:
    assert problems(behavior({"curiosity": {"encoding_size": 0}, "gail": {}})) == [
        "behaviors.B.reward_signals.curiosity.encoding_size: must be > 0, got 0",
        "behaviors.B.reward_signals.gail.demo_path: required key is missing",
    ]
    assert problems(behavior({"rnd": {"network_settings": {"hidden_unit": 8}}})) == [
        "behaviors.B.reward_signals.rnd.network_settings.hidden_unit: unknown key (did you "
        "mean hidden_units?)",
    ]


def test_network_settings_shape_the_reward_provider_models_as_in_ml_agents(
    caplog: pytest.LogCaptureFixture,
) -> None:
    import gymnasium as gym

    from evtrain.trainers.settings import provider_hidden_layers

    with caplog.at_level(logging.WARNING, logger="evtrain"):
        options = RunOptions.from_dict(
            behavior(
                {
                    "extrinsic": {"network_settings": {}},
                    "curiosity": {"network_settings": {"hidden_units": 32, "num_layers": 3}},
                    "rnd": {
                        "encoding_size": 16,
                        "network_settings": {"hidden_units": 8, "normalize": True},
                    },
                }
            )
        )
    signals = options.behaviors["B"].reward_signals
    assert provider_hidden_layers(signals.curiosity) == [32, 32, 32]  # type: ignore[arg-type]
    assert provider_hidden_layers(signals.rnd) == [8, 8]  # type: ignore[arg-type]
    assert provider_hidden_layers(CuriositySettings(encoding_size=16)) == [16, 16]
    assert provider_hidden_layers(RNDSettings()) == [64, 64]  # no network_settings: as before
    assert caplog.messages == [
        "behaviors.B.reward_signals.extrinsic.network_settings: has no effect: the extrinsic "
        "reward provider has no model",
        "behaviors.B.reward_signals.rnd.network_settings.normalize: True has no effect on the "
        "rnd model: only hidden_units and num_layers shape it",
        "behaviors.B.reward_signals.rnd.encoding_size: 16 is ignored: network_settings shapes "
        "the rnd model (ML-Agents' rule)",
    ]
    assert RunOptions.from_dict(options.as_dict()) == options
    generator = torch.Generator().manual_seed(0)
    settings = signals.curiosity
    assert settings is not None
    curiosity = CuriosityRewardProvider(
        settings, 4, gym.spaces.Discrete(2), generator, torch.device("cpu")
    )
    encoder = curiosity.curiosity.encoder.modules()
    linear = [m for m in encoder if isinstance(m, torch.nn.Linear)]
    assert [(layer.in_features, layer.out_features) for layer in linear] == [
        (4, 32),
        (32, 32),
        (32, 32),
    ]
    # the forward model predicts the encoding: as wide as the last layer
    assert curiosity.curiosity.forward_out.out_features == 32


@pytest.mark.parametrize("kind", ["curiosity", "rnd"])
def test_reward_is_larger_on_novel_than_on_repeated_transitions(kind: str) -> None:
    import gymnasium as gym

    generator = torch.Generator().manual_seed(0)
    action_space = gym.spaces.Discrete(2)
    signal: CuriosityRewardProvider | RNDRewardProvider
    if kind == "curiosity":
        signal = CuriosityRewardProvider(
            CuriositySettings(), 4, action_space, generator, torch.device("cpu")
        )
    else:
        signal = RNDRewardProvider(
            RNDSettings(learning_rate=1e-3), 4, generator, torch.device("cpu")
        )
    seen = cartpole_transitions(action=0)
    novel = cartpole_transitions(action=1)  # the pole falls the other way
    losses = [signal.update(*seen, World.current()) for _ in range(150)]
    key = "Losses/Curiosity Forward Loss" if kind == "curiosity" else "Losses/RND Loss"
    assert float(losses[-1][key]) < 0.2 * float(losses[0][key])
    assert signal.evaluate(*novel).mean() > 3 * signal.evaluate(*seen).mean()


def test_untrained_curiosity_pays_nothing_and_strength_caps_it_at_one() -> None:
    import gymnasium as gym

    generator = torch.Generator().manual_seed(0)
    settings = CuriositySettings(strength=1000.0)
    signal = CuriosityRewardProvider(
        settings, 4, gym.spaces.Discrete(2), generator, torch.device("cpu")
    )
    batch = cartpole_transitions(action=0, steps=64)
    assert not signal.evaluate(*batch).any()  # ML-Agents: 0 until the first update
    signal.update(*batch, World.current())
    reward = signal.evaluate(*batch)
    assert reward.max() == 1.0 and reward.min() > 0.0


def intrinsic_ppo(**signals: Any) -> Any:
    return small_ppo(
        reward_signals=RewardProviders(**signals),
        network_settings=NetworkSettings(hidden_units=16, num_layers=1, normalize=True),
    )


@pytest.mark.parametrize("mode", [AutoresetMode.SAME_STEP, AutoresetMode.NEXT_STEP])
def test_ppo_values_terminated_episodes_for_the_intrinsic_rewards_only(
    recording: Recording, mode: AutoresetMode
) -> None:
    settings = intrinsic_ppo(curiosity=CuriositySettings(), rnd=RNDSettings())
    trainer = PPOTrainer(
        "Test", settings, make_envs("CartPole-v1", 2, mode), recording.reporter, seed=0
    )
    assert trainer.agent.critic.out.out_features == 3
    for _ in range(4):  # CartPole's random episodes end within 256 steps
        trainer.advance()
    assert trainer.rollout.terminated.any()
    next_value = trainer._collect_rollout()
    trainer.provider_rewards = trainer._evaluate_reward_providers()
    ended = trainer.rollout.terminated & trainer.rollout.valid
    ended[-1] = False  # a step with a next one in the rollout
    t, n = (int(i) for i in np.argwhere(ended)[0])
    # s' of the terminated step is its final observation (not the next episode's first)
    final = trainer.rollout.b_next_obs[t, n]
    assert (
        not torch.equal(final, trainer.rollout.b_obs[t + 1, n]) or mode is AutoresetMode.NEXT_STEP
    )
    with torch.no_grad():
        v_final = trainer.agent.value(final[None])[0]
    advantages, returns = trainer._advantages(next_value)
    v = trainer.rollout.b_values[t, n]
    gamma = 0.99
    for i, reward in enumerate([trainer.rollout.rewards, *trainer.provider_rewards]):
        # one-step: the last step of an episode carries nothing from the next one
        bootstrap = 0.0 if i == 0 else float(v_final[i])
        expected = reward[t, n] + gamma * bootstrap
        assert float(returns[t, n, i]) == pytest.approx(expected, abs=1e-5)
    assert float(advantages[t, n]) == pytest.approx(float((returns[t, n] - v).sum()), abs=1e-5)


def test_round_trip_restores_the_reward_provider_models_and_optimizers(
    recording: Recording,
) -> None:
    settings = intrinsic_ppo(curiosity=CuriositySettings(), rnd=RNDSettings())
    original = PPOTrainer(
        "Test", settings, make_vector_env("Pendulum-v1", 2), recording.reporter, seed=0
    )
    for _ in range(2):
        original.advance()
    state = saved(original)
    assert sorted(state["reward_signals"]) == ["curiosity", "rnd"]
    resumed = [
        PPOTrainer("Test", settings, make_vector_env("Pendulum-v1", 2), recording.reporter, seed=7)
        for _ in range(2)
    ]
    for trainer in resumed:
        trainer.load_state_dict(state)
        for name, signal in trainer.reward_providers.items():
            for (key, x), (_, y) in zip(
                signal.model.state_dict().items(),
                original.reward_providers[name].model.state_dict().items(),
                strict=True,
            ):
                assert torch.equal(x, y), (name, key)
            assert int(signal.optimizer.step_count) == 2 * 2 * 2
    first, second = resumed
    first.advance()
    second.advance()
    for name in ("curiosity", "rnd"):
        mine, theirs = first.reward_providers[name], second.reward_providers[name]
        assert torch.equal(mine.flat_params, theirs.flat_params)
        assert not torch.equal(mine.flat_params, original.reward_providers[name].flat_params)
    plain = PPOTrainer(
        "Test", small_ppo(), make_vector_env("CartPole-v1", 2), recording.reporter, seed=0
    )
    assert "reward_signals" not in plain.state_dict()
    # Same networks, other signals: refused with what to configure.
    curious, rnd_only = (
        PPOTrainer(
            "Test",
            intrinsic_ppo(**signals),
            make_vector_env("Pendulum-v1", 2),
            recording.reporter,
            seed=0,
        )
        for signals in ({"curiosity": CuriositySettings()}, {"rnd": RNDSettings()})
    )
    with pytest.raises(
        ValueError, match=r"the state has the intrinsic reward providers \['curiosity'\]"
    ):
        rnd_only.load_state_dict(saved(curious))


def test_learn_with_curiosity_and_rnd_writes_ml_agents_stats_and_resumes(tmp_path: Path) -> None:
    from tests.helpers import config
    from tests.helpers import tensorboard_steps as scalar_steps

    signals = {"curiosity": {"strength": 0.1}, "rnd": {"strength": 0.1}}
    first = config(tmp_path, max_steps=512, reward_signals=signals)
    learn(first)
    folder = tmp_path / "results/run/CartPole"
    checkpoint = load_checkpoint(folder / "checkpoint.pt")
    assert sorted(checkpoint["reward_signals"]) == ["curiosity", "rnd"]
    resumed = config(tmp_path, max_steps=1024, reward_signals=signals)
    resumed["checkpoint_settings"]["resume"] = True
    assert learn(resumed).steps == {"CartPole": 1024}
    for tag in (
        "Policy/Curiosity Reward",
        "Policy/Curiosity Value Estimate",
        "Losses/Curiosity Forward Loss",
        "Losses/Curiosity Inverse Loss",
        "Policy/Rnd Reward",
        "Policy/Rnd Value Estimate",
        "Losses/RND Loss",
        "Policy/Extrinsic Value Estimate",
    ):
        assert scalar_steps(folder, tag) == [256, 512, 768, 1024], tag
    # The exported policy is the policy alone: observations in, actions out.
    actions = onnx_policy(folder.parent / "CartPole.onnx")(np.zeros((5, 4)))
    assert actions.shape == (5,) and set(actions.tolist()) <= {0, 1}
