"""Generalised advantage estimation (Schulman et al. 2016) over a vectorised rollout.

Pure numpy: a rollout is a handful of time steps by a handful of environments, where a Python
loop over time on small arrays costs far less than the same loop in torch.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float32]
BoolArray = npt.NDArray[np.bool_]


def compute_gae(
    rewards: npt.ArrayLike,
    values: npt.ArrayLike,
    dones: npt.ArrayLike,
    bootstrap_values: npt.ArrayLike,
    next_value: npt.ArrayLike,
    gamma: float,
    lambd: float,
) -> tuple[FloatArray, FloatArray]:
    """Advantages and returns (``advantages + values``) of a rollout, arrays shaped ``(T, N)``.

    Step ``t`` of environment ``n`` went from an observation valued ``values[t]`` to one valued
    ``values[t + 1]`` (``next_value`` after the last step), unless the episode ended there:

    * ``dones[t]`` is true when the episode ended at step ``t``, by termination or truncation;
      nothing flows back across it.
    * ``bootstrap_values[t]`` is then what the final observation is worth: ``V(final obs)``
      where the episode was truncated (time limit, or a trajectory cut at ``time_horizon``),
      ``0`` where it terminated.  It is ignored where ``dones[t]`` is false.

    So ``delta[t] = r[t] + gamma * next[t] - values[t]`` with ``next[t]`` the bootstrap value
    if done else ``values[t + 1]``, and ``A[t] = delta[t] + gamma * lambd * (1 - done[t]) *
    A[t + 1]``.

    :param rewards: ``(T, N)`` rewards.
    :param values: ``(T, N)`` value estimates of the observations the actions were taken in.
    :param dones: ``(T, N)`` episode ended at this step.
    :param bootstrap_values: ``(T, N)`` value of the final observation where an episode ended
        by truncation, 0 where it terminated.
    :param next_value: ``(N,)`` value of the observation after the last step.
    :param gamma: discount factor.
    :param lambd: GAE lambda; 1 gives Monte-Carlo returns, 0 one-step TD.
    :returns: ``(advantages, returns)``, both ``(T, N)`` float32.
    """
    r = np.asarray(rewards, dtype=np.float32)
    vals = np.asarray(values, dtype=np.float32)
    done = np.asarray(dones, dtype=np.bool_)
    boot = np.asarray(bootstrap_values, dtype=np.float32)
    if not r.shape == vals.shape == done.shape == boot.shape or r.ndim != 2:
        raise ValueError(
            "rewards, values, dones and bootstrap_values must share one (T, N) shape, got "
            f"{r.shape}, {vals.shape}, {done.shape}, {boot.shape}"
        )
    # The value each step's target is built on: the next observation's, or, where the
    # episode ended, the final observation's (0 for a terminal one).
    following = np.concatenate([vals[1:], np.asarray(next_value, dtype=np.float32)[None]])
    next_values = np.where(done, boot, following)
    deltas = r + gamma * next_values - vals
    carry = gamma * lambd * (~done).astype(np.float32)

    advantages = np.empty_like(r)
    last = np.zeros(r.shape[1], dtype=np.float32)
    for t in range(r.shape[0] - 1, -1, -1):
        last = deltas[t] + carry[t] * last
        advantages[t] = last
    return advantages, advantages + vals
