"""The ghost controller: the self-play of one behavior (ML-Agents' ``GhostTrainer`` and
``GhostController``).

Its agents form the two teams of a game (SoccerTwos), or one team against another
self-playing behavior's (StrikersVsGoalie: :func:`~evtrain.trainers.ghost.teams.team_slots`).
In the behavior's copies of the environment (its ``AgentSlots``) one team learns; the other
team's agents are co-players acting with an *opponent*, a frozen copy of a policy that samples
its actions, seated there (:class:`~evtrain.trainers.ghost.seats.Seat`): of the behavior's own
policy in a game of two teams of it; across behaviors, of the other behavior's, drawn from that
behavior's window by that behavior's rules (:func:`face_rivals` seats them).  After each turn of
the trainer (:meth:`after_turn`), counted in the learning team's steps (the trainer's
``step``):

- with two teams of the behavior, every ``team_change`` steps the next team learns
  (``set_learning_team``: each copy of the environment switches at its next episode), and the
  opponent is drawn anew; a behavior of one team always learns, on its own copies;
- every ``save_steps`` steps a snapshot of the policy joins the window (the oldest leaves);
- every ``swap_steps`` the opponents of its seats are drawn anew: with probability
  ``random_opponent_ratio`` (evtrain's, 0 unset) a policy whose actions ignore what it observes
  (:func:`~evtrain.trainers.ghost.snapshots.blank`), else in its own copies with probability
  ``scripted_opponent_ratio`` (evtrain's, 0 unset) one of ``scripted_opponents``, a scripted
  player (:class:`~evtrain.multiagent.coplayers.ScriptedCoPlayer`), else with probability
  ``play_against_latest_model_ratio`` the policy as it is now, else a snapshot of the window,
  uniformly (ML-Agents), or with ``opponent_sampling: pfsp`` by the learning side's results
  against each (:mod:`evtrain.trainers.ghost.pfsp`).  ML-Agents counts these in the opponents'
  (ghost) steps: in its own copies, where the two teams take as many steps, evtrain counts the
  learning team's; in another behavior's copies, the steps its opponent took there.

With ``league``, a main exploiter trained against the policy as it is now is drawn first, with
probability ``league.exploiter_ratio``, and takes a turn after each of the trainer's
(:mod:`evtrain.trainers.ghost.league`).

Every episode's end moves the ELO ratings (:mod:`evtrain.trainers.ghost.elo`): the learning
policy's by the result, the rating of the opponent that played the other way (of the other
behavior's window, across behaviors), and reports the policy's as ``Self-play/ELO``; the
result is also counted against the snapshot that played (PFSP's win rates).  All of it is
saved in the behavior's checkpoint (:meth:`state_dict`, through
:attr:`~evtrain.trainers.base.Trainer.attachments`) and restored by ``--resume``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from evtrain.errors import ConfigError
from evtrain.events.stats import StatsPropertyType
from evtrain.multiagent.coplayers import ScriptedCoPlayer, ScriptedPlayer, import_player
from evtrain.trainers.ghost.elo import game_score, rating_change
from evtrain.trainers.ghost.league import MainExploiter
from evtrain.trainers.ghost.pfsp import PFSP_ENTROPY, POOL_WIN_RATE, entropy, pfsp_weights
from evtrain.trainers.ghost.seats import Opponent, Seat
from evtrain.trainers.ghost.snapshots import EXPLOITER, LATEST, RANDOM, SnapshotWindow, blank
from evtrain.trainers.ghost.teams import EpisodeOutcome, TeamSlots, rivals, team_slots

if TYPE_CHECKING:
    from evtrain.trainers.base import Trainer
    from evtrain.trainers.self_play_settings import SelfPlaySettings

logger = logging.getLogger("evtrain")

ELO = "Self-play/ELO"
"""Stat key (ML-Agents'): the learning policy's rating, at each episode's end."""
SELF_PLAY = "self_play"
"""The controller's name among the trainer's attachments (and in its checkpoint)."""


class GhostController:
    """The self-play of ``trainer``'s behavior on its environments (see the module).

    Attaches itself: to the trainer (:attr:`~evtrain.trainers.base.Trainer.attachments`, so its
    state is checkpointed), and to the environments' episode ends.  :meth:`start` begins the
    play once the trainer has its starting weights; across behaviors, :func:`face_rivals`
    then seats each behavior's opponent in the other's copies.

    :param league_envs: makes the environment copies of ``settings.league``'s main exploiter
        (:mod:`evtrain.trainers.ghost.league`); called once, if there is a league.
    :raises ConfigError: the environments' self-playing agents do not form two teams
        (:func:`~evtrain.trainers.ghost.teams.team_slots`); a league across behaviors, or
        without ``league_envs``; scripted opponents across behaviors, or one that cannot be
        imported.
    """

    def __init__(
        self,
        trainer: Trainer,
        settings: SelfPlaySettings,
        league_envs: Callable[[], Any] | None = None,
    ) -> None:
        self.trainer = trainer
        self.settings = settings
        self.envs = team_slots(trainer.behavior_name, trainer.envs)
        self.window = SnapshotWindow(settings.window, settings.initial_elo)
        self.rng = np.random.default_rng([trainer.seed, 0x5E1F])
        """Draws the opponents."""
        self.generator = torch.Generator(trainer.device).manual_seed(trainer.seed + 0x5E1F)
        """Every draw of the opponents' actions."""
        self.seats: dict[str, Seat] = {}
        """Where the policy plays the opponent, by the behavior whose copies they are."""
        self.facing: Seat | None = None
        """The opponent in the behavior's own copies: its own seat with two teams, the other
        behavior's across behaviors (none until :func:`face_rivals`)."""
        if len(self.envs.teams) == 2:
            self.facing = self.seat(self.envs, lambda: trainer.step)
        self.learning_team = self.envs.teams[0]
        self.last_save = self.last_team_change = trainer.step
        self._restored = False
        self.scripted = self._scripted(settings.scripted_opponents)
        """The players of ``scripted_opponents``, in their order."""
        self.exploiter: MainExploiter | None = None
        """The league's main exploiter (``settings.league``)."""
        if settings.league is not None:
            self.exploiter = MainExploiter(
                trainer,
                settings.league,
                self._league_envs(league_envs),
                settings.team_change,
                self.window,
            )
        trainer.attachments[SELF_PLAY] = self
        self.envs.episode_listeners.append(self.episode_ended)
        trainer.reporter.add_property(StatsPropertyType.SELF_PLAY, True)

    # -- what the runner calls ------------------------------------------------------------------

    def start(self) -> None:
        """Begin: the first snapshot (of the starting weights; a resumed window keeps its own),
        the learning team, the opponents of its seats."""
        if not self.window:
            self._save_snapshot()
        elif self._restored:
            logger.info(
                "%s: self-play resumes at ELO %.3f, %d snapshot(s), team %d learning",
                self.trainer.behavior_name,
                self.elo,
                len(self.window),
                self.learning_team,
            )
        self.envs.set_learning_team(self.learning_team)
        for seat in self.seats.values():
            self.draw(seat)
        if self.exploiter is not None:
            self.exploiter.start()

    def after_turn(self) -> None:
        """The league's exploiter takes its turn; then change the learning team, save a
        snapshot, swap the opponents: whichever is due."""
        if self.exploiter is not None:
            self.exploiter.after_main_turn()
        step, settings = self.trainer.step, self.settings
        teams = self.envs.teams
        changed = len(teams) > 1 and step - self.last_team_change >= settings.team_change
        if changed:
            self.learning_team = teams[(teams.index(self.learning_team) + 1) % len(teams)]
            self.envs.set_learning_team(self.learning_team)
            self.last_team_change = step
            logger.debug(
                "%s: team %d learns from step %d",
                self.trainer.behavior_name,
                self.learning_team,
                step,
            )
        if step - self.last_save >= settings.save_steps:
            self._save_snapshot()
        for seat in self.seats.values():
            if (changed and seat.envs is self.envs) or seat.due(settings.swap_steps):
                self.draw(seat)

    def close(self) -> None:
        """Close the league's exploiter (its trainer and copies), if any."""
        if self.exploiter is not None:
            self.exploiter.close()

    def episode_ended(self, outcome: EpisodeOutcome) -> None:
        """A copy's episode ended: the ratings move by its result (the sign of the learning
        team's final reward), the opponent's the other way."""
        seat = self.facing
        if seat is None:  # across behaviors, before face_rivals
            return
        score = game_score(outcome.reward)
        change = rating_change(self.window.elo, seat.rating, score)
        self.window.elo += change
        seat.concede(change)
        seat.played(score)
        self.trainer.reporter.add_stat(ELO, self.window.elo)

    @property
    def elo(self) -> float:
        """The learning policy's ELO rating."""
        return self.window.elo

    # -- seats, snapshots and opponents -----------------------------------------------------------

    @property
    def opponent(self) -> Opponent | None:
        """The opponent in the behavior's own copies (its own, or the other behavior's)."""
        return None if self.facing is None else self.facing.opponent

    @property
    def last_swap(self) -> int:
        """When the opponent in its own copies was last drawn, on that seat's clock."""
        return 0 if self.facing is None else self.facing.last_swap

    def seat(self, envs: TeamSlots, clock: Callable[[], int] | None = None) -> Seat:
        """A new seat of the policy's opponent in ``envs`` (its own, or another behavior's
        copies, where its swaps count the opponent's steps unless ``clock`` says otherwise)."""
        opponent = Opponent(self.trainer, self.generator)
        name = self.trainer.behavior_name
        seat = Seat(name, envs, opponent, self.window, clock or (lambda: opponent.steps))
        key = name if envs is self.envs else getattr(envs, "behavior", name)
        self.seats[key] = seat
        return seat

    def draw(self, seat: Seat) -> None:
        """Draw the opponent of ``seat``: a policy that ignores its observation, the league's
        exploiter (in its own copies), the policy now, or a snapshot of the window."""
        league = self.settings.league
        ratio = self.settings.random_opponent_ratio
        # no draw at all when it is 0: the draws of every config without it stay as they were
        if ratio > 0 and self.rng.random() < ratio:
            parameters = {name for name, _ in seat.opponent.module.named_parameters()}
            seat.play(RANDOM, blank(self._current_weights(), parameters))
        elif (
            self.scripted
            and seat.envs is self.envs
            and self.rng.random() < self.settings.scripted_opponent_ratio
        ):
            seat.play_scripted(self.scripted[int(self.rng.integers(len(self.scripted)))])
        elif (
            self.exploiter is not None
            and league is not None
            and seat.envs is self.envs
            and self.rng.random() < league.exploiter_ratio
        ):
            seat.play(EXPLOITER, self.exploiter.weights())
        elif self.rng.random() < self.settings.play_against_latest_model_ratio:
            seat.play(LATEST, self._current_weights())
        elif self.settings.opponent_sampling == "pfsp":
            index = self._pfsp_index()
            seat.play(index, self.window.snapshots[index])
        else:
            index = int(self.rng.integers(len(self.window)))
            seat.play(index, self.window.snapshots[index])

    def _pfsp_index(self) -> int:
        """A snapshot drawn by PFSP from the results against the window, reported."""
        settings = self.settings
        win_rates = self.window.win_rates(settings.pfsp_prior)
        weights = pfsp_weights(win_rates, settings.pfsp_weighting, settings.pfsp_exponent)
        self.trainer.reporter.add_stat(PFSP_ENTROPY, entropy(weights))
        self.trainer.reporter.add_stat(POOL_WIN_RATE, float(np.mean(win_rates)))
        return int(self.rng.choice(len(weights), p=weights))

    def _scripted(self, specs: list[str]) -> list[ScriptedCoPlayer]:
        key = f"behaviors.{self.trainer.behavior_name}.self_play.scripted_opponents"
        if specs and len(self.envs.teams) != 2:
            raise ConfigError(
                [
                    f"{key}: a scripted opponent plays the other team of the behavior's own "
                    "agents, and across behaviors (a team of it against another behavior's) "
                    "there is none: remove scripted_opponents"
                ]
            )
        seeds = np.random.SeedSequence([self.trainer.seed, 0x5C817]).generate_state(len(specs))
        return [
            ScriptedCoPlayer(ScriptedPlayer(import_player(spec, f"{key}[{i}]")), int(seed))
            for i, (spec, seed) in enumerate(zip(specs, seeds, strict=True))
        ]

    def _league_envs(self, make: Callable[[], Any] | None) -> Any:
        key = f"behaviors.{self.trainer.behavior_name}.self_play.league"
        if len(self.envs.teams) != 2:
            raise ConfigError(
                [
                    f"{key}: a league needs the behavior's agents to form both teams; across "
                    "behaviors (a team of it against another behavior's) it is not supported "
                    "by evtrain yet: remove league"
                ]
            )
        if make is None:
            raise ConfigError(
                [
                    f"{key}: the main exploiter needs environment copies of its own, and "
                    "env_settings.shared_env shares the environment's copies between "
                    "behaviors: remove league, or shared_env"
                ]
            )
        return make()

    def _current_weights(self) -> dict[str, torch.Tensor]:
        """The policy's weights now (threaded: once the update in flight is done)."""
        self.trainer.wait_for_update()
        return self.trainer.sampling_policy_module(self.generator).state_dict()

    def _save_snapshot(self) -> None:
        self.window.save(self._current_weights())
        self.last_save = self.trainer.step

    # -- checkpoints ----------------------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        """Ratings, snapshots, the learning team, the counters, the opponent draws and the
        scripted opponents' streams."""
        return {
            "window": self.window.state_dict(),
            "learning_team": self.learning_team,
            "last_save": self.last_save,
            "last_swap": self.last_swap,
            "last_team_change": self.last_team_change,
            "rng": self.rng.bit_generator.state,
            **({"scripted": [p.state_dict() for p in self.scripted]} if self.scripted else {}),
            **({} if self.exploiter is None else {"league": self.exploiter.state_dict()}),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict`'s output (before :meth:`start`, which draws the opponents
        afresh)."""
        self.window.load_state_dict(state["window"])
        team = int(state["learning_team"])
        self.learning_team = team if team in self.envs.teams else self.envs.teams[0]
        self.last_save = int(state["last_save"])
        self.last_team_change = int(state["last_team_change"])
        self.rng.bit_generator.state = state["rng"]
        saved = state.get("scripted", [])
        if len(saved) == len(self.scripted):  # else (the list changed) they start afresh
            for player, streams in zip(self.scripted, saved, strict=True):
                player.load_state_dict(streams)
        if self.exploiter is not None and "league" in state:  # else it starts afresh
            self.exploiter.load_state_dict(state["league"])
        self._restored = True


def face_rivals(trainers: Mapping[str, Trainer]) -> None:
    """Across behaviors: seat each self-playing behavior's opponent in the copies of the
    behavior whose team it plays, drawn from its window (after every controller's
    :meth:`~GhostController.start`, before the first step)."""
    controllers = {
        name: found
        for name, trainer in trainers.items()
        if isinstance(found := trainer.attachments.get(SELF_PLAY), GhostController)
    }
    for controller in controllers.values():
        for rival in rivals(controller.envs):
            owner = controllers[rival]
            seat = owner.seat(controller.envs)
            controller.facing = seat
            owner.draw(seat)
