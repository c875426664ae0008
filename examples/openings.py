"""PettingZoo's tic-tac-toe, each game begun by up to two uniformly random moves: self-play then
meets openings its own players would not choose (``env_id: examples.openings:tictactoe``, from
the repository root, as ``examples.players`` is importable).

Why: a policy trained on its own games answers the openings it likes itself, and a perfect
player, which may open on any cell (every first move draws), finds the lines it never learned
to defend.  The random moves belong to no one: the agents' experience starts after them, and
the game, its rules and its rewards are PettingZoo's own.  The policy that results plays the
plain game (``benchmarks/bench_selfplay.py`` plays it there; the example config's evaluation
too, with ``env_kwargs: {openings: false}``).
"""

from __future__ import annotations

from typing import Any

import numpy as np
from pettingzoo.utils.wrappers import BaseWrapper

OPENING_MOVES = (0, 1, 2)
OPENING_WEIGHTS = (0.5, 0.25, 0.25)
"""How many random moves begin a game, and how often: half the games are the plain game."""


class RandomOpenings(BaseWrapper[Any, Any, Any]):  # type: ignore[misc]  # untyped to mypy
    """An AEC game whose :meth:`reset` plays ``OPENING_MOVES`` random legal moves (drawn with
    ``OPENING_WEIGHTS``, from a generator seeded by ``reset``'s seed) before handing it over."""

    def __init__(self, env: Any) -> None:
        super().__init__(env)
        self._rng = np.random.default_rng()

    def reset(self, seed: int | None = None, options: dict[str, Any] | None = None) -> None:
        if seed is not None:
            self._rng = np.random.default_rng(seed)
        self.env.reset(seed=seed, options=options)
        moves = int(self._rng.choice(OPENING_MOVES, p=OPENING_WEIGHTS))
        for _ in range(moves):
            agent = self.env.agent_selection
            if self.env.terminations[agent] or self.env.truncations[agent]:
                break
            legal = np.flatnonzero(self.env.observe(agent)["action_mask"])
            self.env.step(int(self._rng.choice(legal)))


def tictactoe(openings: bool = True, **kwargs: Any) -> Any:
    """PettingZoo's ``classic/tictactoe-v3`` (its AEC game, as ``env_id: classic/tictactoe-v3``
    makes it) with random openings; ``openings=False`` (e.g. an evaluation's ``env_kwargs``):
    the plain game."""
    import pettingzoo

    env = pettingzoo.make("aec", "classic/tictactoe-v3", **kwargs)
    return RandomOpenings(env) if openings else env
