"""The replay buffer: what goes in comes out, the ring wraps, the state round-trips."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from evtrain.trainers.loops.replay import ReplayBuffer


def filled(capacity: int, n: int) -> ReplayBuffer:
    """Transition ``i`` has obs ``[i, -i]``, action ``10 i``, reward ``i``, next obs
    ``[i + 1, -i - 1]``, and is terminal when ``i`` is odd."""
    buffer = ReplayBuffer(capacity, obs_dim=2, action_dim=1)
    for start in range(0, n, 3):  # batches of 3 (the last one shorter)
        i = np.arange(start, min(start + 3, n), dtype=np.float32)
        obs = np.stack([i, -i], axis=1)
        buffer.add(obs, 10 * i[:, None], i, obs + np.array([1, -1]), i % 2)
    return buffer


def test_samples_are_whole_transitions() -> None:
    buffer = filled(100, 20)
    obs, actions, rewards, next_obs, terminated = buffer.sample(64, np.random.default_rng(0))
    assert (obs.shape, actions.shape, rewards.shape, next_obs.shape, terminated.shape) == (
        (64, 2),
        (64, 1),
        (64,),
        (64, 2),
        (64,),
    )
    i = rewards
    assert set(i.tolist()) <= set(range(20)) and len(set(i.tolist())) > 10
    torch.testing.assert_close(obs, torch.stack([i, -i], dim=1))
    torch.testing.assert_close(actions[:, 0], 10 * i)
    torch.testing.assert_close(next_obs, obs + torch.tensor([1.0, -1.0]))
    torch.testing.assert_close(terminated, i % 2)


def test_the_ring_overwrites_the_oldest() -> None:
    buffer = filled(8, 11)
    assert (len(buffer), buffer.pos) == (8, 3)
    assert sorted(buffer.rewards.tolist()) == list(range(3, 11))
    assert buffer.obs[:3, 0].tolist() == [8.0, 9.0, 10.0]


def test_state_round_trip() -> None:
    buffer = filled(8, 11)
    restored = ReplayBuffer(8, obs_dim=2, action_dim=1)
    restored.load_state_dict(buffer.state_dict())
    assert (len(restored), restored.pos) == (8, 3)
    for name in ("obs", "actions", "rewards", "next_obs", "terminated"):
        assert np.array_equal(getattr(restored, name), getattr(buffer, name)), name
    with pytest.raises(ValueError, match="resume with the same buffer_size"):
        ReplayBuffer(16, obs_dim=2, action_dim=1).load_state_dict(buffer.state_dict())
