"""The ghost controller: the self-play of one behavior (ML-Agents' ``GhostTrainer`` and
``GhostController``, for a behavior whose agents form two teams in its own environments).

One team learns at a time; the agents of the other team are co-players of the behavior's
:class:`~evtrain.multiagent.slots.AgentSlots` and act with the *opponent*, a frozen copy of the
policy that samples its actions.  After each turn of the trainer (:meth:`after_turn`), counted
in the learning team's steps (the trainer's ``step``):

- every ``team_change`` steps the next team learns (``set_learning_team``: each copy of the
  environment switches at its next episode), and the opponent is drawn anew;
- every ``save_steps`` steps a snapshot of the policy joins the window (the oldest leaves);
- every ``swap_steps`` steps the opponent is drawn anew: with probability
  ``play_against_latest_model_ratio`` the policy as it is now, else a snapshot of the window,
  uniformly.  ML-Agents counts these in the opponents' steps; in a game of two teams they take
  as many as the learning team.

Every episode's end moves the ELO ratings (:mod:`evtrain.trainers.ghost.elo`): the learning
policy's by the result, its opponent's snapshot's the other way, and reports the policy's as
``Self-play/ELO``.  All of it is saved in the behavior's checkpoint (:meth:`state_dict`, through
:attr:`~evtrain.trainers.base.Trainer.attachments`) and restored by ``--resume``.
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np
import torch

from evtrain.errors import ConfigError
from evtrain.events.stats import StatsPropertyType
from evtrain.trainers.ghost.elo import game_score, rating_change
from evtrain.trainers.ghost.snapshots import LATEST, SnapshotWindow
from evtrain.trainers.observations import policy_inputs

if TYPE_CHECKING:
    from evtrain.trainers.base import Trainer
    from evtrain.trainers.self_play_settings import SelfPlaySettings

logger = logging.getLogger("evtrain")

ELO = "Self-play/ELO"
"""Stat key (ML-Agents'): the learning policy's rating, at each episode's end."""
SELF_PLAY = "self_play"
"""The controller's name among the trainer's attachments (and in its checkpoint)."""


class EpisodeOutcome(Protocol):
    """How a copy's episode ended for its learning team (``AgentSlots``' ``EpisodeResult``)."""

    @property
    def team(self) -> int: ...
    @property
    def reward(self) -> float: ...


class TeamSlots(Protocol):
    """What self-play needs of a behavior's environments (``AgentSlots``)."""

    teams: list[int]
    learning_team: int | None
    co_players: dict[str, Callable[[Any], Any]]
    episode_listeners: list[Callable[[Any], None]]

    def set_learning_team(self, team: int) -> None: ...


def team_slots(behavior: str, envs: Any) -> TeamSlots:
    """``envs`` as the environments of a self-playing behavior.

    :raises ConfigError: they are not a multi-agent environment's, or the behavior's agents
        do not form exactly two teams.
    """
    key = f"behaviors.{behavior}.self_play"
    teams = getattr(envs, "teams", None)
    if teams is None:
        raise ConfigError(
            [
                f"{key}: self-play needs a multi-agent (PettingZoo) environment whose agents of "
                f"behavior {behavior!r} form two teams; this environment has one agent (a "
                "Gymnasium environment): remove self_play, or train a PettingZoo environment"
            ]
        )
    if len(teams) != 2:
        listed = ", ".join(map(str, teams))
        raise ConfigError(
            [
                f"{key}: the agents of behavior {behavior!r} form {len(teams)} team(s) "
                f"({listed}); evtrain's self-play plays exactly two teams of one behavior "
                "against each other (ML-Agents' ELO rates two): map the agents to two teams "
                f"with env_settings.agent_behaviors ('{behavior}?team=0', "
                f"'{behavior}?team=1'), or remove self_play"
            ]
        )
    return envs  # type: ignore[no-any-return]


class Opponent:
    """The co-player of the team that does not learn: a frozen copy of the trainer's sampling
    policy, batched observations in, a numpy array of actions out."""

    def __init__(self, trainer: Trainer, generator: torch.Generator) -> None:
        self.generator = generator
        """Every draw of the opponent's actions."""
        module = trainer.sampling_policy_module(generator)
        # the copy shares the generator, not the trainer's parameters
        self.module = copy.deepcopy(module, memo={id(generator): generator}).requires_grad_(False)
        self.space = trainer.envs.single_observation_space
        self.device = trainer.device

    @torch.no_grad()
    def __call__(self, obs: Any) -> Any:
        inputs = policy_inputs(self.space, obs).values()
        tensors = [
            torch.as_tensor(np.asarray(x, dtype=np.float32), device=self.device) for x in inputs
        ]
        return self.module(*tensors).cpu().numpy()


class GhostController:
    """The self-play of ``trainer``'s behavior on its environments (see the module).

    Attaches itself: to the trainer (:attr:`~evtrain.trainers.base.Trainer.attachments`, so its
    state is checkpointed), and to the environments' episode ends.  :meth:`start` begins the
    play once the trainer has its starting weights.

    :raises ConfigError: the environments do not have two teams of the behavior
        (:func:`team_slots`).
    """

    def __init__(self, trainer: Trainer, settings: SelfPlaySettings) -> None:
        self.trainer = trainer
        self.settings = settings
        self.envs = team_slots(trainer.behavior_name, trainer.envs)
        self.window = SnapshotWindow(settings.window, settings.initial_elo)
        self.rng = np.random.default_rng([trainer.seed, 0x5E1F])
        """Draws the opponents."""
        generator = torch.Generator(trainer.device).manual_seed(trainer.seed + 0x5E1F)
        self.opponent = Opponent(trainer, generator)
        self.opponent_index = LATEST
        """Which snapshot the opponent plays (:data:`LATEST`: the policy as it was drawn)."""
        self.learning_team = self.envs.teams[0]
        self.last_save = self.last_swap = self.last_team_change = trainer.step
        self._restored = False
        trainer.attachments[SELF_PLAY] = self
        self.envs.episode_listeners.append(self.episode_ended)
        trainer.reporter.add_property(StatsPropertyType.SELF_PLAY, True)

    # -- what the runner calls ------------------------------------------------------------------

    def start(self) -> None:
        """Begin: the first snapshot (of the starting weights; a resumed window keeps its own),
        the learning team, the first opponent."""
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
        self._swap()

    def after_turn(self) -> None:
        """Change the learning team, save a snapshot, swap the opponent: whichever is due."""
        step, settings = self.trainer.step, self.settings
        changed = step - self.last_team_change >= settings.team_change
        if changed:
            teams = self.envs.teams
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
        if changed or step - self.last_swap >= settings.swap_steps:
            self._swap()

    def episode_ended(self, outcome: EpisodeOutcome) -> None:
        """A copy's episode ended: the ratings move by its result (the sign of the learning
        team's final reward)."""
        index = self.opponent_index
        window = self.window
        change = rating_change(window.elo, window.rating(index), game_score(outcome.reward))
        window.record(index, change)
        self.trainer.reporter.add_stat(ELO, window.elo)

    @property
    def elo(self) -> float:
        """The learning policy's ELO rating."""
        return self.window.elo

    # -- snapshots and opponents ----------------------------------------------------------------

    def _current_weights(self) -> dict[str, torch.Tensor]:
        """The policy's weights now (threaded: once the update in flight is done)."""
        self.trainer.wait_for_update()
        return self.trainer.sampling_policy_module(self.opponent.generator).state_dict()

    def _save_snapshot(self) -> None:
        self.window.save(self._current_weights())
        self.last_save = self.trainer.step

    def _swap(self) -> None:
        """Draw the opponent: the policy now, or a snapshot of the window."""
        if self.rng.random() < self.settings.play_against_latest_model_ratio:
            self.opponent_index = LATEST
            weights = self._current_weights()
        else:
            self.opponent_index = int(self.rng.integers(len(self.window)))
            weights = self.window.snapshots[self.opponent_index]
        self.opponent.module.load_state_dict(weights)
        self.envs.co_players[self.trainer.behavior_name] = self.opponent
        self.last_swap = self.trainer.step

    # -- checkpoints ----------------------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        """Ratings, snapshots, the learning team, the counters and the opponent draws."""
        return {
            "window": self.window.state_dict(),
            "learning_team": self.learning_team,
            "last_save": self.last_save,
            "last_swap": self.last_swap,
            "last_team_change": self.last_team_change,
            "rng": self.rng.bit_generator.state,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict`'s output (before :meth:`start`, which draws the opponent
        afresh)."""
        self.window.load_state_dict(state["window"])
        team = int(state["learning_team"])
        self.learning_team = team if team in self.envs.teams else self.envs.teams[0]
        self.last_save = int(state["last_save"])
        self.last_swap = int(state["last_swap"])
        self.last_team_change = int(state["last_team_change"])
        self.rng.bit_generator.state = state["rng"]
        self._restored = True
