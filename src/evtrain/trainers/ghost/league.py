"""A small league (``self_play.league``, AlphaStar's): beside the behavior's policy, the *main
learner*, and its window of snapshots, a *main exploiter*.

The exploiter is a second policy of the same trainer type, network and hyperparameters,
trained on environment copies of its own against the main learner's policy *as it is now*
(reloaded after each of the main learner's turns) and nothing else: it learns to beat the main
learner, and the main learner, which plays it with probability ``exploiter_ratio`` at each draw
of its opponent (:meth:`~evtrain.trainers.ghost.GhostController.draw`), learns from the holes
it finds.  It takes one turn (an ``advance`` of its trainer) after each of the main learner's,
switching its learning team every ``team_change`` of its steps as the main learner does.

Its results against the main learner since its last reset are counted (1 a win, 0.5 a draw, 0
a loss, by the sign of its final reward, as for ELO).  Once it has played ``min_games`` games
and its win rate reaches ``win_threshold``, a snapshot of it joins the main learner's window
(rated as the main learner is) and it starts again from its initial weights and optimizer;
so it does after ``reset_steps`` of its steps without getting there.  Its own training is
reported under the category ``<behavior>/exploiter`` (its curves beside the behavior's); its
win rate against the main learner as ``Self-play/Exploiter Win Rate`` in the behavior's.
"""

from __future__ import annotations

import copy
import logging
from typing import TYPE_CHECKING, Any

import torch

from evtrain.bus.reporter import StatsReporter
from evtrain.trainers.ghost.elo import game_score
from evtrain.trainers.ghost.seats import Opponent
from evtrain.trainers.ghost.teams import EpisodeOutcome, TeamSlots
from evtrain.trainers.ghost.teams import team_slots as as_team_slots

if TYPE_CHECKING:
    from evtrain.trainers.base import Trainer
    from evtrain.trainers.ghost.snapshots import SnapshotWindow, Weights
    from evtrain.trainers.self_play_settings import LeagueSettings

logger = logging.getLogger("evtrain")

EXPLOITER_WIN_RATE = "Self-play/Exploiter Win Rate"
"""Stat key: the main exploiter's score against the main learner, at each of its episodes' ends
(1 a win, 0.5 a draw, 0 a loss)."""
EXPLOITER_CATEGORY = "/exploiter"
"""What the behavior's name is followed by in the category of the exploiter's own stats."""


class MainExploiter:
    """The main exploiter of ``main``'s league, on the environment copies ``envs`` (its own;
    it closes them).

    :param team_change: its steps before its other team learns (the behavior's
        ``self_play.team_change``).
    :param window: the main learner's snapshots, which the exploiter's joins when it wins.
    """

    def __init__(
        self,
        main: Trainer,
        settings: LeagueSettings,
        envs: Any,
        team_change: int,
        window: SnapshotWindow,
    ) -> None:
        self.main = main
        self.settings = settings
        self.team_change = team_change
        self.window = window
        name = main.behavior_name
        self.envs: TeamSlots = as_team_slots(name, envs)
        reporter = StatsReporter(main.reporter.bus, name + EXPLOITER_CATEGORY)
        seed = main.seed + 0xE1
        self.trainer = type(main)(
            name, main.settings, envs, reporter, seed=seed, device=main.device
        )
        self.initial = copy.deepcopy(self.trainer._state_dict())
        """Its algorithm's state as built: what a reset goes back to."""
        self.generator = torch.Generator(main.device).manual_seed(seed)
        """Every draw of the main learner's actions in the exploiter's copies."""
        self.opponent = Opponent(main, self.generator)
        """The main learner, as it is after its latest turn."""
        self.learning_team = self.envs.teams[0]
        self.last_team_change = 0
        self.games = 0
        """Its games since its last reset."""
        self.score = 0.0
        """Its score in them."""
        self.reset_at = 0
        """Its step at its last reset."""
        self.resets = 0
        self.promotions = 0
        """Resets that put a snapshot of it in the main learner's window."""
        self.envs.episode_listeners.append(self.episode_ended)

    def start(self) -> None:
        """Seat the main learner as it is now in its copies, and its learning team."""
        self.envs.set_learning_team(self.learning_team)
        self.opponent.module.load_state_dict(self._main_weights())
        self.envs.co_players[self.main.behavior_name] = self.opponent

    def after_main_turn(self) -> None:
        """The main learner took a turn: the exploiter plays its new policy for one turn, then
        changes its learning team, or starts again, if due."""
        self.opponent.module.load_state_dict(self._main_weights())
        self.trainer.advance()
        step, teams = self.trainer.step, self.envs.teams
        if step - self.last_team_change >= self.team_change:
            self.learning_team = teams[(teams.index(self.learning_team) + 1) % len(teams)]
            self.envs.set_learning_team(self.learning_team)
            self.last_team_change = step
        settings = self.settings
        if self.games >= settings.min_games and self.win_rate >= settings.win_threshold:
            self._log("beats the main learner: a snapshot of it joins the window")
            self.window.save(self.weights())
            self.promotions += 1
            self._reset()
        elif step - self.reset_at >= settings.reset_steps:
            self._log(f"reached reset_steps ({settings.reset_steps})")
            self._reset()

    def episode_ended(self, outcome: EpisodeOutcome) -> None:
        """One of its copies' episodes ended: its result against the main learner counts."""
        score = game_score(outcome.reward)
        self.games += 1
        self.score += score
        self.main.reporter.add_stat(EXPLOITER_WIN_RATE, score)

    @property
    def win_rate(self) -> float:
        """Its score per game against the main learner since its last reset (0 before any)."""
        return self.score / self.games if self.games else 0.0

    def weights(self) -> Weights:
        """Its policy's weights now (as an opponent of the main learner plays them)."""
        self.trainer.wait_for_update()
        return self.trainer.sampling_policy_module(self.generator).state_dict()

    def close(self) -> None:
        """End its trainer (an update in flight first) and close its copies."""
        self.trainer.close()
        self.envs.close()  # type: ignore[attr-defined]  # every TeamSlots is a VectorEnv

    def _main_weights(self) -> Weights:
        self.main.wait_for_update()
        return self.main.sampling_policy_module(self.generator).state_dict()

    def _log(self, why: str) -> None:
        logger.info(
            "%s: the main exploiter %s at its step %d (win rate %.3f in %d games); it starts again",
            self.main.behavior_name,
            why,
            self.trainer.step,
            self.win_rate,
            self.games,
        )

    def _reset(self) -> None:
        """Back to its initial weights and optimizer (its step and generators go on)."""
        self.trainer.load_state_dict({**self.trainer.state_dict(), **copy.deepcopy(self.initial)})
        self.games, self.score = 0, 0.0
        self.reset_at = self.trainer.step
        self.resets += 1

    # -- checkpoints ----------------------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        """Its trainer's state (weights, optimizer, step, generators), its learning team and
        its counters."""
        return {
            "trainer": self.trainer.state_dict(),
            "learning_team": self.learning_team,
            "last_team_change": self.last_team_change,
            "games": self.games,
            "score": self.score,
            "reset_at": self.reset_at,
            "resets": self.resets,
            "promotions": self.promotions,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict`'s output (its initial weights are its seed's, as before)."""
        self.trainer.load_state_dict(state["trainer"])
        team = int(state["learning_team"])
        self.learning_team = team if team in self.envs.teams else self.envs.teams[0]
        self.last_team_change = int(state["last_team_change"])
        self.games, self.score = int(state["games"]), float(state["score"])
        self.reset_at = int(state["reset_at"])
        self.resets, self.promotions = int(state["resets"]), int(state["promotions"])
