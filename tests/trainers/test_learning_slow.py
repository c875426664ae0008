"""Longer learning checks (``-m slow``): the trainers solve their reference tasks."""

from __future__ import annotations

import numpy as np
import pytest

from evtrain.trainers import NetworkSettings, SACSettings, SACTrainer, make_vector_env
from evtrain.trainers.ppo import PPOTrainer
from tests.trainers.helpers import Recording, small_sac, zoo_cartpole

pytestmark = pytest.mark.slow


def episode_returns(recording: Recording) -> list[float]:
    recording.flush()
    key = "Environment/Cumulative Reward"
    return [r for e in recording.stats if key in e.values for r in e.values[key].full_dist]


def test_ppo_solves_cartpole_with_rl_zoo_hyperparameters(recording: Recording) -> None:
    # SB3 with the same hyperparameters reaches a mean-20 return of 475 at ~30k steps here
    # (30 seeds: median 32.4k); evtrain's median over the same seeds is 29.4k.
    envs = make_vector_env("CartPole-v1", 8)
    trainer = PPOTrainer("Test", zoo_cartpole(summary_freq=1024), envs, recording.reporter, seed=0)
    while trainer.step < 50_000:
        trainer.advance()
    envs.close()
    returns = episode_returns(recording)
    assert np.mean(returns[-20:]) >= 475


def test_sac_learns_pendulum(recording: Recording) -> None:
    settings = small_sac(
        hyperparameters=SACSettings(
            batch_size=256, buffer_size=100_000, buffer_init_steps=1000, learning_rate=1e-3
        ),
        network_settings=NetworkSettings(hidden_units=64, num_layers=2, activation="relu"),
        summary_freq=1000,
    )
    envs = make_vector_env("Pendulum-v1", 1)
    trainer = SACTrainer("Test", settings, envs, recording.reporter, seed=0)
    while trainer.step < 10_000:
        trainer.advance()
    envs.close()
    returns = episode_returns(recording)
    # A random policy scores about -1200; a swung-up, balanced pendulum better than -200.
    # 12 seeds, the mean of the last 10 episodes: -109 to -261 at 10k steps (at 6k steps, the
    # last 5 of 8 seeds: -124 to -534, 3 under -300: too early for a seed on another CPU).
    assert np.mean(returns[-10:]) > -400


def test_sac_learns_cartpole_with_discrete_actions(recording: Recording) -> None:
    # examples/configs/cartpole_sac.yaml's hyperparameters; benchmarks/bench_sac_discrete.py
    # measures them over seeds (mean return of the last 10 episodes ~250 from 10k steps on)
    settings = small_sac(
        hyperparameters=SACSettings(
            batch_size=64, buffer_size=50_000, buffer_init_steps=1000, tau=0.01
        ),
        network_settings=NetworkSettings(hidden_units=64, num_layers=2, activation="relu"),
        summary_freq=1000,
    )
    envs = make_vector_env("CartPole-v1", 1)
    trainer = SACTrainer("Test", settings, envs, recording.reporter, seed=0)
    while trainer.step < 15_000:
        trainer.advance()
    envs.close()
    returns = episode_returns(recording)
    # A random policy lasts about 22 steps; the policy keeps the pole up ten times longer.
    assert np.mean(returns[-10:]) >= 150
