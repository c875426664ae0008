"""How the trainers read Gymnasium 1.x vector environments' autoreset behaviour."""

from __future__ import annotations

import numpy as np
import pytest
from gymnasium.vector import AutoresetMode

from evtrain.trainers import PPOTrainer, make_vector_env
from evtrain.trainers.envs import AutoresetTracker, autoreset_mode, final_observations
from tests.trainers.helpers import Recording, counting_envs, small_ppo


def test_make_vector_env_resets_in_the_same_step() -> None:
    envs = make_vector_env("CartPole-v1", 3)
    assert envs.num_envs == 3
    assert autoreset_mode(envs) is AutoresetMode.SAME_STEP
    envs.close()


def test_same_step_mode_hands_over_the_final_observation() -> None:
    envs = counting_envs(AutoresetMode.SAME_STEP, num_envs=2, episode_steps=2)
    envs.reset(seed=0)
    actions = np.zeros(2, dtype=np.int64)
    envs.step(actions)
    obs, _, terminated, truncated, infos = envs.step(actions)
    assert truncated.tolist() == [True, True] and not terminated.any()
    assert obs[:, 0].tolist() == [0.0, 0.0]  # already reset
    np.testing.assert_array_equal(final_observations(infos, truncated), [[2.0], [2.0]])
    np.testing.assert_array_equal(final_observations(infos, np.array([False, True])), [[2.0]])
    envs.close()


def test_tracker_marks_the_reset_step_of_next_step_mode_invalid() -> None:
    tracker = AutoresetTracker(AutoresetMode.NEXT_STEP, 3)
    done = np.array
    assert tracker.observe(done([False, True, False])).tolist() == [True, True, True]
    assert tracker.observe(done([True, False, False])).tolist() == [True, False, True]
    assert tracker.observe(done([False, False, False])).tolist() == [False, True, True]
    assert tracker.observe(done([False, False, False])).tolist() == [True, True, True]


def test_tracker_in_same_step_mode_finds_every_step_valid() -> None:
    tracker = AutoresetTracker(AutoresetMode.SAME_STEP, 2)
    assert tracker.observe(np.array([True, True])).tolist() == [True, True]
    assert tracker.observe(np.array([False, False])).tolist() == [True, True]


def test_disabled_autoreset_is_refused(recording: Recording) -> None:
    envs = counting_envs(AutoresetMode.DISABLED)
    with pytest.raises(
        ValueError,
        match="got autoreset_mode=DISABLED. Create it with "
        r"autoreset_mode=AutoresetMode.SAME_STEP",
    ):
        PPOTrainer("Test", small_ppo(), envs, recording.reporter, seed=0)
    envs.close()
