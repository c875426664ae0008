"""Scripted players of PettingZoo's tic-tac-toe and connect four, for ``evaluation.opponents``
(``examples.players:tictactoe_perfect``, from the repository root: ``examples`` is importable
from the run's working folder, as ``examples.custom_env.corridor`` is), the docs and the
benchmarks.

Each is ``player(observation, action_mask) -> action`` for the agent to move:
``tictactoe_v3`` and ``connect_four_v3`` give ``observation`` as ``(rows, cols, 2)`` planes
from that agent's point of view (plane 0 its own pieces, plane 1 the opponent's) and
``action_mask`` with 1 for each legal move.  Tic-tac-toe's move ``i`` is cell ``i`` of the
board read row by row; connect four's move is a column, and a piece falls to the lowest empty
row (row 0 is the top).  Random choices draw from Python's ``random``, which the evaluation
worker seeds for each episode.
"""

from __future__ import annotations

import functools
import random
from typing import Any

import numpy as np

LINES = ((0, 1, 2), (3, 4, 5), (6, 7, 8), (0, 3, 6), (1, 4, 7), (2, 5, 8), (0, 4, 8), (2, 4, 6))
"""Tic-tac-toe's lines of three, by cell."""


def _board(observation: Any) -> tuple[int, ...]:
    """The board from the mover's side: 0 empty, 1 its own, 2 the opponent's, cell by cell."""
    planes = np.asarray(observation).reshape(-1, 2)
    return tuple(1 if own else 2 if theirs else 0 for own, theirs in planes)


def tictactoe_illegal(observation: Any, action_mask: Any) -> int:
    """Plays an occupied cell whenever there is one (an illegal move, which loses the game at
    once), else cell 0: it loses every game, by its first or second move."""
    board = _board(observation)
    occupied = [cell for cell in range(9) if board[cell]]
    return occupied[0] if occupied else 0


@functools.cache
def _value(board: tuple[int, ...]) -> int:
    """The value of ``board`` for the player to move (1 on ``board``, 2 its opponent): 1 a
    win, 0 a draw, -1 a loss, with best play on both sides (negamax over every board)."""
    if any(all(board[i] == 2 for i in line) for line in LINES):
        return -1
    empty = [i for i in range(9) if board[i] == 0]
    if not empty:
        return 0
    return max(-_value(_after(board, move)) for move in empty)


def _after(board: tuple[int, ...], move: int) -> tuple[int, ...]:
    """The board after the mover plays ``move``, from the other player's side."""
    played = (*board[:move], 1, *board[move + 1 :])
    return tuple(0 if c == 0 else 3 - c for c in played)


def optimal_moves(board: tuple[int, ...]) -> list[int]:
    """Every move of the best value for the player to move on ``board`` (as :func:`_board`)."""
    empty = [i for i in range(9) if board[i] == 0]
    values = {move: -_value(_after(board, move)) for move in empty}
    best = max(values.values())
    return [move for move, value in values.items() if value == best]


def tictactoe_perfect(observation: Any, action_mask: Any) -> int:
    """A perfect tic-tac-toe player: uniformly at random among all the optimal moves (it never
    loses; it wins whenever the opponent errs so that it can)."""
    return random.choice(optimal_moves(_board(observation)))


ROWS, COLUMNS = 6, 7

Grid = list[list[int]]
"""A connect four board, row by row from the top: 0 empty, 1 the mover's, 2 the opponent's
(plain lists: the players index single squares, which a list does many times faster than a
numpy array)."""


def _drop(grid: Grid, column: int) -> int | None:
    """The row a piece played in ``column`` lands on (its lowest empty square), or ``None``
    when it is full."""
    for row in range(ROWS - 1, -1, -1):
        if grid[row][column] == 0:
            return row
    return None


def _wins(grid: Grid, row: int, column: int, player: int) -> bool:
    """Whether ``player``'s piece at ``(row, column)`` makes four in a row."""
    for dr, dc in ((0, 1), (1, 0), (1, 1), (1, -1)):
        count = 1
        for sign in (1, -1):
            r, c = row + sign * dr, column + sign * dc
            while 0 <= r < ROWS and 0 <= c < COLUMNS and grid[r][c] == player:
                count += 1
                r, c = r + sign * dr, c + sign * dc
        if count >= 4:
            return True
    return False


def _grid(observation: Any) -> Grid:
    """The board from the mover's side (:data:`Grid`)."""
    planes = np.asarray(observation)
    grid: Grid = np.where(planes[:, :, 0] > 0, 1, np.where(planes[:, :, 1] > 0, 2, 0)).tolist()
    return grid


def winning_moves(grid: Grid, player: int, legal: list[int]) -> list[int]:
    """The columns of ``legal`` where ``player`` (1 or 2 on ``grid``) wins at once."""
    found = []
    for column in legal:
        row = _drop(grid, column)
        if row is not None and _wins(grid, row, column, player):
            found.append(column)
    return found


def connect_four_one_ply(observation: Any, action_mask: Any) -> int:
    """Wins at once if it can, else blocks the opponent's immediate win, else a uniformly
    random legal move."""
    grid = _grid(observation)
    legal = [int(c) for c in np.flatnonzero(np.asarray(action_mask))]
    for player in (1, 2):  # own win first, then the opponent's to block
        moves = winning_moves(grid, player, legal)
        if moves:
            return moves[0]
    return random.choice(legal)


def safe_moves(grid: Grid, legal: list[int]) -> list[int]:
    """The columns of ``legal`` after which the opponent (2 on ``grid``) has no immediate win
    (on the square the move opens above it, or anywhere else)."""
    safe = []
    for column in legal:
        row = _drop(grid, column)
        if row is None:
            continue
        after = [line[:] for line in grid]
        after[row][column] = 1
        replies = [c for c in range(COLUMNS) if _drop(after, c) is not None]
        if not winning_moves(after, 2, replies):
            safe.append(column)
    return safe


def connect_four_two_ply(observation: Any, action_mask: Any) -> int:
    """Wins at once if it can, else blocks the opponent's immediate win, else a uniformly
    random legal move among those that leave the opponent no immediate win (any legal move if
    none does): :func:`connect_four_one_ply` that also looks at the opponent's reply."""
    grid = _grid(observation)
    legal = [int(c) for c in np.flatnonzero(np.asarray(action_mask))]
    for player in (1, 2):
        moves = winning_moves(grid, player, legal)
        if moves:
            return moves[0]
    return random.choice(safe_moves(grid, legal) or legal)
