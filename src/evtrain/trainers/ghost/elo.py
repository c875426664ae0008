"""The ELO rating of self-play: how a game's result moves the learning policy's rating and its
opponent's.

A player rated ``R`` expects to score ``E = 1 / (1 + 10 ** ((R_opponent - R) / 400))`` against
its opponent (1 for a win, 0.5 for a draw, 0 for a loss); after the game it gains
``K * (score - E)`` and the opponent loses as much.  ``K`` is 16, the figure of ML-Agents'
"ELO Rating System" page (its ghost controller's code applies ``score - E`` alone, a ``K`` of
1, which moves the rating by under one point a game).
"""

from __future__ import annotations

import math

ELO_K = 16.0
"""Most points one game moves a rating by."""

WIN = 1.0
DRAW = 0.5
LOSS = 0.0


def game_score(final_reward: float) -> float:
    """The learning team's score from the reward it got at its episode's end, by its sign
    (ML-Agents' rule: positive a win, zero a draw, negative a loss)."""
    if final_reward > 0:
        return WIN
    if final_reward < 0:
        return LOSS
    return DRAW


def expected_score(rating: float, opponent_rating: float) -> float:
    """What a player rated ``rating`` expects to score against one rated ``opponent_rating``."""
    return 1.0 / (1.0 + math.pow(10.0, (opponent_rating - rating) / 400.0))


def rating_change(rating: float, opponent_rating: float, score: float) -> float:
    """Points the player rated ``rating`` gains (the opponent loses as many) for ``score``."""
    return ELO_K * (score - expected_score(rating, opponent_rating))
