"""Prioritized fictitious self-play (PFSP, AlphaStar's): which snapshot of the window plays the
opponent, by how often the learning side beats each one.

The window keeps, per snapshot, the games the learning side played against it and its score
there (1 a win, 0.5 a draw, 0 a loss: :func:`~evtrain.trainers.ghost.elo.game_score`).  The
estimate of ``x``, the probability that the learning side beats snapshot ``i``, counts one more
game, of score ``prior``: ``x = (score + prior) / (games + 1)``, ``prior`` itself for a snapshot
not played yet, and never a certainty after a few games.  Snapshot ``i`` is drawn with
probability proportional to ``f(x_i)``:

- ``hard``: ``f(x) = (1 - x) ** p``, the snapshots the learning side loses to most
  (AlphaStar's ``f_hard``);
- ``variance``: ``f(x) = x * (1 - x)``, the snapshots of its level.

Where every weight is 0 (all beaten for certain, with a prior of 1), the draw is uniform.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import numpy as np

PFSP_ENTROPY = "Self-play/PFSP Entropy"
"""Stat key: the entropy (nats) of PFSP's draw over the window, at each draw of a snapshot; the
log of the window's size when the draw is uniform, lower the more it favours some snapshots."""
POOL_WIN_RATE = "Self-play/Pool Win Rate"
"""Stat key: the mean over the window of the learning side's estimated win rate, at each draw
of a snapshot."""


def win_rate(score: float, games: int, prior: float) -> float:
    """The estimated probability that the learning side beats a snapshot against which it scored
    ``score`` in ``games`` games (``prior`` counted as one game more)."""
    return (score + prior) / (games + 1)


def pfsp_weights(
    win_rates: Sequence[float], weighting: Literal["hard", "variance"], exponent: float
) -> np.ndarray:
    """The probability of drawing each snapshot, from the learning side's win rates against
    them (``exponent``: the ``p`` of ``hard``)."""
    x = np.asarray(win_rates, dtype=np.float64)
    f = (1.0 - x) ** exponent if weighting == "hard" else x * (1.0 - x)
    total = f.sum()
    if total <= 0.0:
        return np.full(len(x), 1.0 / len(x))
    return f / total  # type: ignore[no-any-return]


def entropy(probabilities: np.ndarray) -> float:
    """The entropy in nats of a draw with these probabilities."""
    p = probabilities[probabilities > 0]
    return float((p * np.log(1.0 / p)).sum())
