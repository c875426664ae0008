"""Where a self-playing policy plays the opponent: a :class:`Seat` in some behavior's copies,
with the :class:`Opponent` acting there.

In a game of two teams of one behavior, the behavior's policy has one seat, in its own copies.
Across behaviors (Strikers against a Goalie), each behavior's policy has a seat in the other's
copies: the Goalie's snapshots play the opponent of the learning Strikers, and the other way.
The seat's ratings are those of its owner's window: a game in the copies moves the learning
behavior's rating and, the other way, the rating of whichever of the owner's policies played.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from evtrain.multiagent.coplayers import CoPlayer
from evtrain.trainers.ghost.snapshots import LATEST, SCRIPTED, SnapshotWindow, Weights
from evtrain.trainers.observations import policy_inputs

if TYPE_CHECKING:
    from evtrain.trainers.base import Trainer
    from evtrain.trainers.ghost.teams import TeamSlots


class Opponent:
    """A frozen copy of ``trainer``'s sampling policy acting as a co-player: batched
    observations in, a numpy array of actions out.  Counts the actions it takes
    (:attr:`steps`: ML-Agents' ghost steps)."""

    def __init__(self, trainer: Trainer, generator: torch.Generator) -> None:
        self.generator = generator
        """Every draw of the opponent's actions."""
        module = trainer.sampling_policy_module(generator)
        # the copy shares the generator, not the trainer's parameters; the buffers a view
        # makes (action bounds) start on the CPU: all of it goes where the observations go
        self.device = trainer.device
        copied = copy.deepcopy(module, memo={id(generator): generator})
        self.module = copied.requires_grad_(False).to(self.device)
        self.space = trainer.envs.single_observation_space
        self.steps = 0
        """Actions taken: one per agent it acted for, per step."""

    @torch.no_grad()
    def __call__(self, obs: Any) -> Any:
        inputs = policy_inputs(self.space, obs).values()
        tensors = [
            torch.as_tensor(np.asarray(x, dtype=np.float32), device=self.device) for x in inputs
        ]
        self.steps += len(tensors[0])
        return self.module(*tensors).cpu().numpy()


class Seat:
    """The opponent of ``owner``'s policy in the copies ``envs`` (its co-player ``owner``).

    :param window: the owner's snapshots and ratings.
    :param clock: the steps its swaps are counted in: the owner's trainer's steps in its own
        copies, the opponent's :attr:`Opponent.steps` in another behavior's.
    """

    def __init__(
        self,
        owner: str,
        envs: TeamSlots,
        opponent: Opponent,
        window: SnapshotWindow,
        clock: Callable[[], int],
    ) -> None:
        self.owner = owner
        self.envs = envs
        self.opponent = opponent
        self.window = window
        self.clock = clock
        self.index = LATEST
        """Which snapshot of the window plays (:data:`LATEST`: the policy as it was drawn)."""
        self.last_swap = clock()

    @property
    def rating(self) -> float:
        """The rating of the policy that plays."""
        return self.window.rating(self.index)

    def concede(self, change: float) -> None:
        """The learning side gained ``change`` points against it: it loses them."""
        self.window.concede(self.index, change)

    def played(self, score: float) -> None:
        """The learning side scored ``score`` against it (kept for PFSP by its window)."""
        self.window.played(self.index, score)

    def due(self, swap_steps: int) -> bool:
        """Whether ``swap_steps`` have passed on its clock since the last draw."""
        return self.clock() - self.last_swap >= swap_steps

    def play(self, index: int, weights: Weights) -> None:
        """From now on, snapshot ``index`` (with ``weights``) plays."""
        self.index = index
        self.opponent.module.load_state_dict(weights)
        self.envs.co_players[self.owner] = self.opponent
        self.last_swap = self.clock()

    def play_scripted(self, player: CoPlayer) -> None:
        """From now on, the scripted ``player`` plays (:data:`SCRIPTED`)."""
        self.index = SCRIPTED
        self.envs.co_players[self.owner] = player
        self.last_swap = self.clock()
