"""GAE and returns against values computed by hand (gamma 0.9, lambda 0.8 unless stated)."""

from __future__ import annotations

import numpy as np
import pytest

from evtrain.trainers.loops.gae import compute_gae

GAMMA, LAMBD = 0.9, 0.8


def column(*values: float) -> np.ndarray:
    """A (T, 1) array: one environment."""
    return np.array(values, dtype=np.float32)[:, None]


def test_no_episode_end_bootstraps_from_next_value() -> None:
    # delta2 = 1 + .9*.2 - .3 = .88        A2 = .88
    # delta1 = 1 + .9*.3 - .4 = .87        A1 = .87 + .72*.88    = 1.5036
    # delta0 = 1 + .9*.4 - .5 = .86        A0 = .86 + .72*1.5036 = 1.942592
    advantages, returns = compute_gae(
        rewards=column(1, 1, 1),
        values=column(0.5, 0.4, 0.3),
        dones=column(0, 0, 0).astype(bool),
        bootstrap_values=column(0, 0, 0),
        next_value=np.array([0.2]),
        gamma=GAMMA,
        lambd=LAMBD,
    )
    np.testing.assert_allclose(advantages[:, 0], [1.942592, 1.5036, 0.88], rtol=1e-6)
    np.testing.assert_allclose(returns[:, 0], [2.442592, 1.9036, 1.18], rtol=1e-6)
    assert advantages.dtype == returns.dtype == np.float32


def test_terminal_and_truncated_episode_ends() -> None:
    # Two environments, both end their episode at t=1 and start a new one at t=2.
    # env 0 terminates: nothing beyond t=1 counts.
    #   A2 = .88;  delta1 = 1 + .9*0 - .4 = .6, A1 = .6;  A0 = .86 + .72*.6 = 1.292
    # env 1 is truncated; its final observation is worth 2.0.
    #   A2 = .88;  delta1 = 1 + .9*2 - .4 = 2.4, A1 = 2.4;  A0 = .86 + .72*2.4 = 2.588
    values = np.array([[0.5, 0.5], [0.4, 0.4], [0.3, 0.3]], dtype=np.float32)
    advantages, returns = compute_gae(
        rewards=np.ones((3, 2)),
        values=values,
        dones=np.array([[False, False], [True, True], [False, False]]),
        bootstrap_values=np.array([[0.0, 0.0], [0.0, 2.0], [0.0, 0.0]]),
        next_value=np.array([0.2, 0.2]),
        gamma=GAMMA,
        lambd=LAMBD,
    )
    np.testing.assert_allclose(advantages[:, 0], [1.292, 0.6, 0.88], rtol=1e-6)
    np.testing.assert_allclose(advantages[:, 1], [2.588, 2.4, 0.88], rtol=1e-6)
    np.testing.assert_allclose(returns, advantages + values, rtol=1e-6)


def test_bootstrap_value_is_ignored_where_the_episode_goes_on() -> None:
    kwargs = dict(
        rewards=column(1, 1),
        values=column(0.5, 0.4),
        dones=column(0, 0).astype(bool),
        next_value=np.array([0.2]),
        gamma=GAMMA,
        lambd=LAMBD,
    )
    a, _ = compute_gae(bootstrap_values=column(0, 0), **kwargs)  # type: ignore[arg-type]
    b, _ = compute_gae(bootstrap_values=column(99, 99), **kwargs)  # type: ignore[arg-type]
    np.testing.assert_array_equal(a, b)


def test_lambda_one_gives_discounted_returns_independent_of_values() -> None:
    # gamma .5: G2 = 3 + .5*10 = 8, G1 = 2 + .5*8 = 6, G0 = 1 + .5*6 = 4
    _, returns = compute_gae(
        rewards=column(1, 2, 3),
        values=column(7, -3, 0.25),
        dones=column(0, 0, 0).astype(bool),
        bootstrap_values=column(0, 0, 0),
        next_value=np.array([10.0]),
        gamma=0.5,
        lambd=1.0,
    )
    np.testing.assert_allclose(returns[:, 0], [4.0, 6.0, 8.0], rtol=1e-6)


def test_lambda_zero_gives_one_step_td_errors() -> None:
    advantages, _ = compute_gae(
        rewards=column(1, 1, 1),
        values=column(0.5, 0.4, 0.3),
        dones=column(0, 0, 0).astype(bool),
        bootstrap_values=column(0, 0, 0),
        next_value=np.array([0.2]),
        gamma=GAMMA,
        lambd=0.0,
    )
    np.testing.assert_allclose(advantages[:, 0], [0.86, 0.87, 0.88], rtol=1e-6)


def test_mismatched_shapes_are_refused() -> None:
    with pytest.raises(ValueError, match=r"share one \(T, N\) shape, got \(3, 1\), \(2, 1\)"):
        compute_gae(
            rewards=column(1, 1, 1),
            values=column(0.5, 0.4),
            dones=column(0, 0, 0).astype(bool),
            bootstrap_values=column(0, 0, 0),
            next_value=np.array([0.2]),
            gamma=GAMMA,
            lambd=LAMBD,
        )
