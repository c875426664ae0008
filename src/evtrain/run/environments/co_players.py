"""Several behaviors in one PettingZoo environment: each acts, with its current policy, for its
agents in the other behaviors' copies.

Each behavior trains on copies of its own (:class:`~evtrain.multiagent.slots.AgentSlots`);
the agents of behavior X in behavior Y's copies are acted for by a co-player: a frozen copy of
X's policy (the deterministic one it exports), refreshed after each turn of X in the run's
loop, so at most once per update of X.  Until X's first refresh (made before the first step,
from the policy X starts with) they act at random.  With ``threaded: true`` a refresh waits
for X's update in flight: the copy holds a finished update.  Where X and Y self-play against
each other (one team each), X's agents in Y's copies are X's self-play opponent instead
(:func:`~evtrain.trainers.ghost.face_rivals` seats it), not its current policy.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

if TYPE_CHECKING:
    from gymnasium import spaces
    from torch import nn

    from evtrain.multiagent.slots import AgentSlots
    from evtrain.trainers.base import Trainer


class PolicyCoPlayer:
    """A policy module acting as a co-player: run on the CPU without gradients, on float32
    inputs in the order :func:`~evtrain.trainers.observations.policy_inputs` gives (a ``Dict``
    observation's parts as separate inputs).

    :param module: a frozen copy, owned by the co-player (moved to the CPU here).
    :param observation_space: the observations of the agents it acts for.
    """

    def __init__(self, module: nn.Module, observation_space: spaces.Space[Any]) -> None:
        self.module = module.to("cpu").eval()
        self.observation_space = observation_space

    def __call__(self, obs: Any) -> npt.NDArray[Any]:
        import torch

        from evtrain.trainers.observations import policy_inputs

        inputs = policy_inputs(self.observation_space, obs).values()
        x = [torch.as_tensor(np.asarray(part, dtype=np.float32)) for part in inputs]
        with torch.no_grad():
            actions: npt.NDArray[Any] = self.module(*x).numpy()
        return actions

    def load(self, module: nn.Module) -> None:
        """Take ``module``'s current weights (a module of the same structure)."""
        import torch

        with torch.no_grad():
            self.module.load_state_dict(module.state_dict())


class CoPlayerWiring:
    """Keeps every behavior's co-players in the other behaviors' copies up to date.

    :param trainers: the run's trainers by behavior; those whose environments are not agent
        slots take no part.
    """

    def __init__(self, trainers: Mapping[str, Trainer]) -> None:
        self.trainers = trainers
        self.targets: dict[str, list[AgentSlots]] = {}
        """Per behavior X: the agent slots of the other behaviors in whose copies X plays."""
        for name, trainer in trainers.items():
            slots: Any = trainer.envs  # AgentSlots, or a Gymnasium vector env
            rivals = getattr(slots, "rivals", ())  # self-play seats their opponents
            for other in getattr(slots, "co_player_behaviors", ()):
                if other in trainers and other != name and other not in rivals:
                    self.targets.setdefault(other, []).append(slots)
        self.players: dict[str, PolicyCoPlayer] = {}

    def refresh(self, name: str, trainer: Trainer) -> None:
        """Behavior ``name``'s co-players take its current policy (the run loop's ``after``
        hook: once per turn of ``name``)."""
        targets = self.targets.get(name)
        if not targets:
            return
        trainer.wait_for_update()
        live = trainer.policy_module()
        player = self.players.get(name)
        if player is not None:
            player.load(live)
            return
        import torch

        with torch.no_grad():
            frozen = copy.deepcopy(live)
        player = PolicyCoPlayer(frozen, trainer.envs.single_observation_space)
        self.players[name] = player
        for slots in targets:
            slots.co_players[name] = player

    def refresh_all(self) -> None:
        """Every behavior's co-players take its current policy (before the first step)."""
        for name, trainer in self.trainers.items():
            self.refresh(name, trainer)
