"""Self-play (``behaviors.<name>.self_play``): ML-Agents' ghost trainer for a behavior whose
agents form two teams, or one team against another self-playing behavior's, with any trainer
type.

A room shared by every algorithm, as ``loops`` and ``signals`` are: it drives the trainer from
outside (its weights, its environments' teams and co-players) and imports no algorithm.  The
runner builds a :class:`GhostController` per self-playing behavior
(:mod:`evtrain.run.build`), seats the behaviors' opponents in each other's copies
(:func:`face_rivals`) and calls each controller after each turn; which environments can be
played is :mod:`evtrain.trainers.ghost.teams`'s, the opponents and their seats
:mod:`evtrain.trainers.ghost.seats`', the ratings :mod:`evtrain.trainers.ghost.elo`'s, the
window of snapshots :mod:`evtrain.trainers.ghost.snapshots`', the prioritized draw of a
snapshot :mod:`evtrain.trainers.ghost.pfsp`'s, a league's main exploiter
:mod:`evtrain.trainers.ghost.league`'s.
"""

from __future__ import annotations

from evtrain.trainers.ghost.controller import ELO, SELF_PLAY, GhostController, face_rivals
from evtrain.trainers.ghost.elo import ELO_K, expected_score, game_score, rating_change
from evtrain.trainers.ghost.league import EXPLOITER_WIN_RATE, MainExploiter
from evtrain.trainers.ghost.pfsp import PFSP_ENTROPY, POOL_WIN_RATE, pfsp_weights, win_rate
from evtrain.trainers.ghost.seats import Opponent, Seat
from evtrain.trainers.ghost.snapshots import EXPLOITER, LATEST, SnapshotWindow
from evtrain.trainers.ghost.teams import team_slots

__all__ = [
    "ELO",
    "ELO_K",
    "EXPLOITER",
    "EXPLOITER_WIN_RATE",
    "LATEST",
    "PFSP_ENTROPY",
    "POOL_WIN_RATE",
    "SELF_PLAY",
    "GhostController",
    "MainExploiter",
    "Opponent",
    "Seat",
    "SnapshotWindow",
    "expected_score",
    "face_rivals",
    "game_score",
    "pfsp_weights",
    "rating_change",
    "team_slots",
    "win_rate",
]
