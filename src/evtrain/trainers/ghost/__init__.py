"""Self-play (``behaviors.<name>.self_play``): ML-Agents' ghost trainer for a behavior whose
agents form two teams, with any trainer type.

A room shared by every algorithm, as ``loops`` and ``signals`` are: it drives the trainer from
outside (its weights, its environments' teams and co-players) and imports no algorithm.  The
runner builds a :class:`GhostController` per self-playing behavior
(:mod:`evtrain.run.build`) and calls it after each turn; the ratings are in
:mod:`evtrain.trainers.ghost.elo`, the window of snapshots in
:mod:`evtrain.trainers.ghost.snapshots`.
"""

from __future__ import annotations

from evtrain.trainers.ghost.controller import (
    ELO,
    SELF_PLAY,
    GhostController,
    Opponent,
    team_slots,
)
from evtrain.trainers.ghost.elo import ELO_K, expected_score, game_score, rating_change
from evtrain.trainers.ghost.snapshots import LATEST, SnapshotWindow

__all__ = [
    "ELO",
    "ELO_K",
    "LATEST",
    "SELF_PLAY",
    "GhostController",
    "Opponent",
    "SnapshotWindow",
    "expected_score",
    "game_score",
    "rating_change",
    "team_slots",
]
