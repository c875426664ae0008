"""A small PPO trainer with its ghost controller on the duel of :mod:`tests.self_play_envs`,
as the self-play tests drive it: turns of the runner, an update then the controller."""

from __future__ import annotations

import random
from typing import Any

import numpy as np

from evtrain import StatsReporter
from evtrain.trainers import PPOTrainer
from evtrain.trainers.ghost import GhostController
from evtrain.trainers.settings import LeagueSettings, PPOSettings, SelfPlaySettings
from tests.self_play_envs import DuelSlots
from tests.trainers.helpers import small_ppo


def duel(
    reporter: StatsReporter,
    seed: int = 0,
    teams: tuple[int, ...] = (0, 1),
    league: dict[str, Any] | None = None,
    **self_play: Any,
) -> tuple[PPOTrainer, GhostController]:
    """PPO (64 steps per update over 4 copies) and its controller, started; with ``league``,
    its exploiter on 4 copies of its own."""
    if league is not None:
        self_play["league"] = LeagueSettings(**league)
    settings = small_ppo(
        self_play=SelfPlaySettings(**self_play),
        summary_freq=256,
        hyperparameters=PPOSettings(batch_size=32, buffer_size=64, learning_rate=0.01, beta=0.0),
    )
    trainer = PPOTrainer("duel", settings, DuelSlots(4, teams=teams), reporter, seed=seed)
    assert settings.self_play is not None
    exploiter_envs = (lambda: DuelSlots(4, teams=teams)) if league is not None else None
    controller = GhostController(trainer, settings.self_play, exploiter_envs)
    controller.start()
    return trainer, controller


def turns(trainer: PPOTrainer, controller: GhostController, n: int) -> None:
    """``n`` turns of the runner: an update, then the controller."""
    for _ in range(n):
        trainer.advance()
        controller.after_turn()


def plays_zero(observation: Any, action_mask: Any) -> int:
    """A scripted player of the duel (``tests.self_play_duel:plays_zero``): the lowest number,
    whatever it sees; one agent's observation and no mask are what it is given."""
    assert np.shape(observation) == (2,) and action_mask is None
    return 0


def plays_two(observation: Any, action_mask: Any) -> int:
    """A scripted player of the duel: the highest number."""
    return 2


def plays_at_random(observation: Any, action_mask: Any) -> int:
    """A scripted player of the duel that draws from Python's ``random`` and numpy's global
    generator, as scripted players do."""
    return (random.randrange(3) + int(np.random.randint(3))) % 3


NOT_A_FUNCTION = 3
"""Named by a test as a scripted player that is not one."""
