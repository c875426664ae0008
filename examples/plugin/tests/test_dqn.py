"""The example plugin's DQN (``trainer_type: dqn``): its pieces against hand-computed values,
and the off-policy loop driving it.  The run through ``evtrain learn`` with the plugin
installed is in the main suite (tests/test_example_plugin_learn.py)."""

from __future__ import annotations

import time

import attrs
import numpy as np
import pytest
import torch
from evtrain_example_plugin.dqn import (
    DQN,
    DQNSettings,
    DQNTrainer,
    epsilon,
    soft_update,
    td_loss,
    trainer_types,
)

from evtrain import Bus, StatsEvent, StatsReporter, signals
from evtrain.trainers.algorithm import ReplayBatch
from evtrain.trainers.envs import make_vector_env
from evtrain.trainers.loops.off_policy import OffPolicyLoop
from evtrain.trainers.settings import (
    NetworkSettings,
    RewardProviders,
    RewardProviderSettings,
    TrainerSettings,
)

REWARD = "Environment/Cumulative Reward"


def test_registration_returns_the_trainer_type_by_name() -> None:
    assert trainer_types() == {"dqn": DQNTrainer}
    assert DQNTrainer.settings_type is DQNSettings
    # a loop that has an algorithm: the plugin's class, the loop, evtrain's Trainer
    evtrain_bases = [c for c in DQNTrainer.__mro__ if c.__module__.startswith("evtrain.")]
    assert [c.__name__ for c in evtrain_bases] == ["OffPolicyLoop", "Trainer"]


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("learning_rate", 0.0, "learning_rate: expected a number above 0, got 0.0"),
        ("target_update_interval", 0, "target_update_interval: expected a number above 0, got 0"),
        ("tau", 1.5, "tau: expected a number above 0, at most 1, got 1.5"),
        ("exploration_final_eps", -0.1, "exploration_final_eps: expected a number from 0 to 1"),
        ("buffer_init_steps", -1, "buffer_init_steps: expected a whole number from 0 up, got -1"),
        ("loss", "l1", "loss: expected one of ['huber', 'mse'], got 'l1'"),
    ],
)
def test_settings_are_checked(key: str, value: object, message: str) -> None:
    with pytest.raises(ValueError, match=message.replace("[", r"\[").replace("]", r"\]")):
        DQNSettings(**{key: value})  # type: ignore[arg-type]


def test_epsilon_falls_linearly_then_stays() -> None:
    hp = DQNSettings(
        exploration_initial_eps=1.0, exploration_final_eps=0.1, exploration_fraction=0.5
    )
    # over the first half of 1000 steps: 1.0 -> 0.1
    assert [epsilon(hp, step, 1000) for step in (0, 250, 500, 900)] == pytest.approx(
        [1.0, 0.55, 0.1, 0.1]
    )
    assert epsilon(DQNSettings(exploration_fraction=0.0), 0, 1000) == 0.04  # no decay at all


def test_td_loss_against_hand_computed_targets() -> None:
    q_values = torch.tensor([1.0, 2.0])
    next_q_target = torch.tensor([[0.5, 3.0], [4.0, 1.0]])
    rewards = torch.tensor([1.0, 0.5])
    terminated = torch.tensor([0.0, 1.0])
    # targets: 1 + 0.9 * 3 = 3.7 (bootstrapped); 0.5 (terminal): errors 2.7 and -1.5
    mse = td_loss(q_values, next_q_target, rewards, terminated, 0.9, "mse")
    assert float(mse) == pytest.approx((2.7**2 + 1.5**2) / 2)
    huber = td_loss(q_values, next_q_target, rewards, terminated, 0.9, "huber")
    assert float(huber) == pytest.approx((2.7 - 0.5 + 1.5 - 0.5) / 2)  # |e| - 1/2 beyond 1


def test_soft_update_moves_the_target_part_of_the_way() -> None:
    source, target = torch.nn.Linear(1, 1), torch.nn.Linear(1, 1).requires_grad_(False)
    with torch.no_grad():
        source.weight.fill_(1.0)
        target.weight.fill_(0.0)
    soft_update(target, source, 0.25)
    assert float(target.weight) == pytest.approx(0.25)
    soft_update(target, source, 1.0)
    assert float(target.weight) == 1.0


def settings(**overrides: object) -> TrainerSettings:
    """A small DQN on CartPole: 64 warm-up steps, a gradient step every 2 environment steps,
    the target network copied every 4 gradient steps."""
    hyperparameters: dict[str, object] = dict(
        batch_size=32,
        buffer_size=1000,
        buffer_init_steps=64,
        steps_per_update=2.0,
        target_update_interval=4,
        exploration_fraction=0.5,
    )
    hyperparameters.update(overrides)
    return TrainerSettings(
        trainer_type="dqn",
        hyperparameters=DQNSettings(**hyperparameters),  # type: ignore[arg-type]
        network_settings=NetworkSettings(hidden_units=16, num_layers=1, activation="relu"),
        max_steps=256,
        summary_freq=128,
    )


def test_dqn_learns_on_the_off_policy_loop_and_resumes() -> None:
    stats: list[StatsEvent] = []
    envs = [make_vector_env("CartPole-v1", 2) for _ in range(2)]
    try:
        with Bus() as bus:
            bus.connect(signals.stats, stats.append)
            trainer = DQNTrainer(
                "CartPole", settings(), envs[0], StatsReporter(bus, "CartPole"), seed=0
            )
            dqn = trainer.algorithm
            assert isinstance(trainer, OffPolicyLoop) and isinstance(dqn, DQN)
            before = {k: p.detach().clone() for k, p in dqn.q_network.named_parameters()}
            while trainer.step < 256:
                trainer.advance()
            resumed = DQNTrainer(
                "CartPole", settings(), envs[1], StatsReporter(bus, "CartPole"), seed=1
            )
            resumed.load_state_dict(trainer.state_dict())
            bus.flush()
    finally:
        for env in envs:
            env.close()
    # (256 - 64) / 2 = 96 gradient steps; the target network was last copied at the 96th
    assert trainer.num_updates == dqn.num_updates == 96
    for name, p in dqn.q_network.named_parameters():
        assert not torch.equal(p, before[name]), name
        assert torch.equal(p, dqn.target_network.get_parameter(name))
    assert [event.step for event in stats] == [128, 256]
    last = stats[-1].values
    assert {"Losses/Value Loss", "Policy/Q Value", "Policy/Learning Rate"} <= set(last)
    # ε, averaged over the gradient steps of steps 130..256, on its way from 1 to 0.04 at 128
    assert last["Policy/Epsilon"].mean == pytest.approx(0.04)
    assert resumed.algorithm.num_updates == 96 and resumed.num_updates == 96
    for name, p in resumed.algorithm.q_network.named_parameters():
        assert torch.equal(p, dqn.q_network.get_parameter(name)), name
    # the exported policy: the greedy action of each observation
    obs = torch.randn(5, 4)
    expected = dqn.q_network(obs).argmax(dim=1)
    assert torch.equal(trainer.policy_module()(obs), expected)


def test_threaded_dqn_acts_with_a_copy_and_takes_as_many_gradient_steps() -> None:
    """``threaded: true``: the loop's update thread runs the gradient steps while the
    environments step, acting with its copy of the algorithm's ``acting_module``."""
    envs = make_vector_env("CartPole-v1", 2)
    try:
        with Bus() as bus:
            threaded = attrs.evolve(settings(), threaded=True)
            trainer = DQNTrainer("CartPole", threaded, envs, StatsReporter(bus, "CartPole"), seed=0)
            assert trainer.algorithm.acting_module() is trainer.algorithm.q_network
            while trainer.step < 256:
                trainer.advance()
            trainer.wait_for_update()
    finally:
        envs.close()
    assert trainer.num_updates == trainer.algorithm.num_updates == 96


def test_dqn_acts_greedily_once_epsilon_is_zero() -> None:
    envs = make_vector_env("CartPole-v1", 4)
    try:
        with Bus() as bus:
            trainer = DQNTrainer(
                "CartPole",
                settings(exploration_initial_eps=0.0, exploration_final_eps=0.0),
                envs,
                StatsReporter(bus, "CartPole"),
                seed=0,
            )
            dqn = trainer.algorithm
            obs = torch.randn(4, 4)
            greedy = dqn.q_network(obs).argmax(dim=1).numpy()
            generator = torch.Generator()
            acted = dqn.act(
                obs, step=100, warmup=False, generator=generator, acting=None, memories={}
            )
            warming = [
                dqn.act(obs, step=0, warmup=True, generator=generator, acting=None, memories={})
                for _ in range(8)
            ]
    finally:
        envs.close()
    assert acted.env_actions.tolist() == greedy.tolist()
    assert acted.actions.tolist() == [[float(a)] for a in greedy]  # stored as [N, 1] rows
    assert {a for w in warming for a in w.env_actions.tolist()} == {0, 1}  # random at warm-up


def test_update_reads_the_batch_and_returns_its_statistics() -> None:
    envs = make_vector_env("CartPole-v1", 1)
    try:
        with Bus() as bus:
            trainer = DQNTrainer(
                "CartPole",
                TrainerSettings(
                    trainer_type="dqn",
                    hyperparameters=DQNSettings(loss="mse", learning_rate=0.1),
                    network_settings=NetworkSettings(hidden_units=8, num_layers=1),
                    reward_signals=RewardProviders(extrinsic=RewardProviderSettings(gamma=0.5)),
                ),
                envs,
                StatsReporter(bus, "CartPole"),
                seed=0,
            )
    finally:
        envs.close()
    dqn = trainer.algorithm
    obs = torch.zeros(3, 4)
    batch = ReplayBatch(
        obs=obs,
        actions=torch.tensor([[0.0], [1.0], [1.0]]),
        rewards=torch.tensor([1.0, 2.0, 3.0]),
        next_obs=obs,
        terminations=torch.tensor([0.0, 0.0, 1.0]),
        step=1000,
    )
    with torch.no_grad():
        q = dqn.q_network(obs)[0]  # every row observes zeros: one Q per action
        target = dqn.target_network(obs)[0].max()
    expected = (
        (q[0] - 1.0 - 0.5 * target) ** 2 + (q[1] - 2.0 - 0.5 * target) ** 2 + (q[1] - 3.0) ** 2
    ) / 3
    stats = dqn.update(batch)
    assert float(stats["Losses/Value Loss"]) == pytest.approx(float(expected), rel=1e-5)
    assert float(stats["Policy/Q Value"]) == pytest.approx(float(q[0] + 2 * q[1]) / 3, rel=1e-5)
    assert dqn.num_updates == 1
    assert not torch.equal(dqn.q_network(obs)[0], q)  # one Adam step was taken


def episode_returns(stats: list[StatsEvent]) -> list[float]:
    return [r for e in stats if REWARD in e.values for r in e.values[REWARD].full_dist]


@pytest.mark.slow
def test_dqn_learns_to_balance_cartpole() -> None:
    """The plugin's default hyperparameters (RL Zoo's for DQN on CartPole-v1) with the learning
    rate decayed linearly to 0, 50k steps; then the trained greedy policy (``--inference``'s)
    keeps the pole up: a mean return of 300 or more over 20 episodes (random actions: ~22).

    Measured on 12 seeds: 409-500, 8 of them 475 or more. With Zoo's constant rate DQN ends
    wherever its oscillation is at 50k steps (6 seeds: 94-500, two at 500; SB3's DQN with the
    same settings did the same), which a seed on another CPU cannot be held to."""
    stats: list[StatsEvent] = []
    envs = make_vector_env("CartPole-v1", 1)
    training = TrainerSettings(
        trainer_type="dqn",
        hyperparameters=DQNSettings(learning_rate_schedule="linear"),
        network_settings=NetworkSettings(hidden_units=256, num_layers=2, activation="relu"),
        max_steps=50_000,
        summary_freq=1000,
    )
    start = time.monotonic()
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # small networks: more threads only contend for the cores
    try:
        with Bus() as bus:
            bus.connect(signals.stats, stats.append)
            trainer = DQNTrainer("CartPole", training, envs, StatsReporter(bus, "CartPole"), seed=0)
            while not trainer.should_stop:
                trainer.advance()
            bus.flush()
            trained, training_returns = time.monotonic() - start, episode_returns(stats)
            stats.clear()
            trainer.begin_inference()
            while len(episode_returns(stats)) < 20 and trainer.step < 20 * 500:
                trainer.run_policy()
                bus.flush()
    finally:
        torch.set_num_threads(threads)
        envs.close()
    greedy = episode_returns(stats)[:20]
    last = np.mean(training_returns[-20:])
    print(
        f"DQN on CartPole-v1: trained in {trained:.0f} s, mean return of the last 20 training "
        f"episodes {last:.1f}, of 20 greedy episodes {np.mean(greedy):.1f}"
    )
    assert len(greedy) == 20
    assert np.mean(greedy) >= 300
