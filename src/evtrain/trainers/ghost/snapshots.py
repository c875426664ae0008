"""The window of self-play: the last ``window`` snapshots of the learning policy, each with its
ELO rating and the learning side's results against it (for PFSP,
:mod:`evtrain.trainers.ghost.pfsp`), and the learning policy's own rating."""

from __future__ import annotations

from typing import Any

import torch

from evtrain.trainers.ghost.pfsp import win_rate

Weights = dict[str, torch.Tensor]
"""A policy module's ``state_dict``, on the CPU."""

LATEST = -1
"""The opponent index of the learning policy as it is now (not a snapshot of the window)."""

EXPLOITER = -2
"""The opponent index of a league's main exploiter as it is now
(:mod:`evtrain.trainers.ghost.league`): it has no rating of its own, and a game against it
moves no rating, as against :data:`LATEST`."""


RANDOM = -3
"""The opponent index of a policy whose actions ignore its observation (``random_opponent_ratio``):
rated as the learning policy, so that a game against it moves no rating, as against
:data:`LATEST`."""

SCRIPTED = -4
"""The opponent index of one of ``scripted_opponents`` (a scripted player): rated as the learning
policy, so that a game against it moves no rating, as against :data:`LATEST`."""


def blank(weights: Weights, parameters: set[str]) -> Weights:
    """``weights`` with the tensors named in ``parameters`` (the module's parameters) zero: the
    output layer's then no longer depends on the observation (a discrete action's logits are all
    zero: uniform over the legal moves); buffers (a normaliser's statistics) are kept."""
    return {
        key: torch.zeros_like(value) if key in parameters else value
        for key, value in weights.items()
    }


class SnapshotWindow:
    """Snapshots in a ring of ``size``: the oldest is replaced by each new one (ML-Agents'
    ``policy_snapshots``), and the ratings that go with them.

    :param initial_elo: the learning policy's rating before any game.
    """

    def __init__(self, size: int, initial_elo: float) -> None:
        self.size = size
        self.snapshots: list[Weights] = []
        self.elos: list[float] = []
        """The rating of each snapshot, in the order of :attr:`snapshots`."""
        self.games: list[int] = []
        """Games the learning side played against each snapshot (not against :data:`LATEST`)."""
        self.scores: list[float] = []
        """The learning side's score in them: 1 a win, 0.5 a draw, 0 a loss."""
        self.elo = initial_elo
        """The learning policy's rating."""
        self._next = 0
        """Where the next snapshot goes once the window is full."""

    def __len__(self) -> int:
        return len(self.snapshots)

    def save(self, weights: Weights) -> None:
        """Keep ``weights`` (copied to the CPU), rated as the learning policy is now."""
        copy = {key: value.detach().to("cpu", copy=True) for key, value in weights.items()}
        if len(self.snapshots) < self.size:
            self.snapshots.append(copy)
            self.elos.append(self.elo)
            self.games.append(0)
            self.scores.append(0.0)
        else:
            self.snapshots[self._next] = copy
            self.elos[self._next] = self.elo
            self.games[self._next] = 0
            self.scores[self._next] = 0.0
        self._next = (self._next + 1) % self.size

    def rating(self, index: int) -> float:
        """The rating of snapshot ``index``, or the learning policy's (:data:`LATEST`,
        :data:`EXPLOITER`)."""
        return self.elo if index < 0 else self.elos[index]

    def record(self, index: int, change: float) -> None:
        """The learning policy gained ``change`` points against opponent ``index``, which loses
        them: against :data:`LATEST`, itself, the two cancel out (as in ML-Agents)."""
        self.elo += change
        self.concede(index, change)

    def concede(self, index: int, change: float) -> None:
        """Opponent ``index`` (:data:`LATEST`: the learning policy; :data:`EXPLOITER`, rated
        as it) lost ``change`` points."""
        if index < 0:
            self.elo -= change
        else:
            self.elos[index] -= change

    def played(self, index: int, score: float) -> None:
        """The learning side scored ``score`` in a game against opponent ``index`` (against
        :data:`LATEST`, itself, or :data:`EXPLOITER`, nothing is kept)."""
        if index >= 0:
            self.games[index] += 1
            self.scores[index] += score

    def win_rates(self, prior: float) -> list[float]:
        """The learning side's estimated win rate against each snapshot
        (:func:`~evtrain.trainers.ghost.pfsp.win_rate`)."""
        return [win_rate(s, n, prior) for s, n in zip(self.scores, self.games, strict=True)]

    def state_dict(self) -> dict[str, Any]:
        """The snapshots, ratings, results and ring position (tensors and plain values)."""
        return {
            "snapshots": list(self.snapshots),
            "elos": list(self.elos),
            "games": list(self.games),
            "scores": list(self.scores),
            "elo": self.elo,
            "next": self._next,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict`'s output; from a larger window, the newest ``size``
        snapshots are kept; a state saved before the window kept results has none (every
        snapshot unplayed)."""
        snapshots, elos = list(state["snapshots"]), [float(e) for e in state["elos"]]
        games = [int(n) for n in state.get("games", [0] * len(snapshots))]
        scores = [float(s) for s in state.get("scores", [0.0] * len(snapshots))]
        start = int(state["next"]) % max(len(snapshots), 1)  # the oldest, once full
        kept = [*range(start, len(snapshots)), *range(start)][-self.size :]
        self.snapshots = [snapshots[i] for i in kept]
        self.elos = [elos[i] for i in kept]
        self.games = [games[i] for i in kept]
        self.scores = [scores[i] for i in kept]
        self.elo = float(state["elo"])
        self._next = len(kept) % self.size  # kept is oldest first
