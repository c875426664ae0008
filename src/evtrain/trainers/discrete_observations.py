"""``Discrete`` observations as the networks see them: one-hot rows.

A ``Discrete(n)`` observation (PettingZoo's rock-paper-scissors, Gymnasium's FrozenLake) is an
index, which a network would read as a magnitude; it takes ``n`` columns instead, a 1 in the
column of the value.  The rows the trainers store, the exported policy's inputs, the evaluation
and the co-players all encode with :func:`one_hot` (see :mod:`evtrain.trainers.observations`).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt
from gymnasium import spaces


def one_hot(values: Any, n: int, first: int = 0) -> npt.NDArray[np.float32]:
    """A batch of ``Discrete(n, start=first)`` observations as ``(B, n)`` float32 rows: a 1 in
    the column of each value (``value - first``), 0 elsewhere.

    :raises ValueError: a value outside ``first .. first + n - 1``.
    """
    index = np.asarray(values).reshape(-1).astype(np.int64) - first
    if index.size and (index.min() < 0 or index.max() >= n):
        raise ValueError(
            f"observation values {np.asarray(values).tolist()} outside Discrete({n}, start={first})"
        )
    rows = np.zeros((index.size, n), dtype=np.float32)
    rows[np.arange(index.size), index] = 1.0
    return rows


def encoded(space: spaces.Space[Any], values: Any) -> npt.NDArray[Any]:
    """A batch of one part's observations as the exported policy takes them: a ``Discrete``'s
    one-hot rows, anything else as it is."""
    if isinstance(space, spaces.Discrete):
        return one_hot(values, int(space.n), int(space.start))
    return np.asarray(values)
