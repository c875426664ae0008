"""Who acts for the agents a behavior does not train: co-players.

In a behavior's copies of a PettingZoo environment, every agent that is not one of its
learning agents (an agent of another behavior, or of another team in self-play) is acted for
by a :class:`CoPlayer`: a callable from the batched observations of the agents it acts for to
their actions.  ``AgentSlots.co_players`` holds them by key, ``"<behavior>?team=<N>"`` looked up
before ``"<behavior>"``; an agent with neither gets uniformly random actions, legal ones where
its observation carries PettingZoo's ``action_mask`` (:class:`RandomCoPlayer`).

A scripted player, ``function(observation, action_mask) -> action`` for one agent
(``evaluation.opponents``' and ``self_play.scripted_opponents``' ``module:function``), acts
through :class:`ScriptedPlayer` (one agent) and :class:`ScriptedCoPlayer` (a batch).
"""

from __future__ import annotations

import importlib
import random
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt
from gymnasium import spaces

from evtrain.errors import ConfigError

ACTION_MASK = "action_mask"
"""PettingZoo's key of the legal actions in a ``Dict`` observation (1: legal)."""
OBSERVATION = "observation"
"""PettingZoo's key of the observation proper in a ``Dict`` observation."""


class CoPlayer(Protocol):
    """Actions for a batch of observations of the agents it acts for: an array (or for a
    ``Dict`` observation space a dictionary of arrays) with one row per agent, in the agents'
    own observation space; returns one action per row, as a numpy array."""

    def __call__(self, obs: Any) -> npt.NDArray[Any]: ...


def co_player_keys(behavior: str, team: int) -> tuple[str, str]:
    """The keys of ``co_players`` an agent's co-player is looked up by, in order."""
    return f"{behavior}?team={team}", behavior


class RandomCoPlayer:
    """Uniformly random actions of ``action_space``; for a ``Discrete`` space, uniform over
    the legal actions where the observations hold an ``action_mask`` (a row without any legal
    action: uniform over all, as PettingZoo gives agents not to move an all-zero mask).

    :param rng: draws every action; shared by the co-players of one ``AgentSlots`` and reseeded
        by its ``reset(seed)``.
    """

    def __init__(self, action_space: spaces.Space[Any], rng: np.random.Generator) -> None:
        if not isinstance(
            action_space, spaces.Discrete | spaces.MultiDiscrete | spaces.Box | spaces.MultiBinary
        ):
            raise TypeError(
                f"a random co-player acts in Discrete, MultiDiscrete, MultiBinary or Box action "
                f"spaces, not {action_space}"
            )
        self.action_space = action_space
        self.rng = rng

    def __call__(self, obs: Any) -> npt.NDArray[Any]:
        count = batch_size(obs)
        space, rng = self.action_space, self.rng
        if isinstance(space, spaces.Discrete):
            scores = rng.random((count, int(space.n)))
            if isinstance(obs, Mapping) and ACTION_MASK in obs:
                legal = np.asarray(obs[ACTION_MASK]).reshape(count, -1) > 0
                legal[~legal.any(axis=1)] = True
                scores[~legal] = -1.0
            best: npt.NDArray[np.int64] = scores.argmax(axis=1).astype(np.int64)
            return best + int(space.start)
        if isinstance(space, spaces.MultiDiscrete):
            draws = rng.integers(0, space.nvec, size=(count, *space.nvec.shape))
            chosen: npt.NDArray[Any] = (draws + space.start).astype(space.dtype)
            return chosen
        if isinstance(space, spaces.MultiBinary):
            return rng.integers(0, 2, size=(count, *space.shape)).astype(space.dtype)
        assert isinstance(space, spaces.Box)  # checked in __init__
        low = np.where(np.isfinite(space.low), space.low, -1.0)
        high = np.where(np.isfinite(space.high), space.high, 1.0)
        return rng.uniform(low, high, size=(count, *space.shape)).astype(space.dtype)


def batch_size(obs: Any) -> int:
    """Rows of a batch of observations (an array, or a dictionary of arrays)."""
    if isinstance(obs, Mapping):
        return batch_size(next(iter(obs.values())))
    return int(np.shape(obs)[0])


def stack(observations: Sequence[Any], space: spaces.Space[Any]) -> Any:
    """Single observations of ``space`` as one batch: an array, or for a ``Dict`` space a
    dictionary of arrays in the space's key order."""
    if isinstance(space, spaces.Dict):
        return {
            key: stack([o[key] for o in observations], part) for key, part in space.spaces.items()
        }
    return np.stack([np.asarray(o, dtype=space.dtype) for o in observations])


def blank(space: spaces.Space[Any]) -> Any:
    """An observation of zeros: what a slot shows before its agent ever appeared."""
    if isinstance(space, spaces.Dict):
        return {key: blank(part) for key, part in space.spaces.items()}
    return np.zeros(space.shape or (), dtype=space.dtype)


def row(batch: Any, index: int) -> Any:
    """Row ``index`` of a batch (an array, or a dictionary of arrays)."""
    if isinstance(batch, Mapping):
        return {key: value[index] for key, value in batch.items()}
    return batch[index]


class ScriptedPlayer:
    """``function(observation, action_mask) -> action`` for one agent: its raw observation
    (the ``observation`` entry of a ``Dict`` observation that has one) and its
    ``action_mask``, else ``None``."""

    def __init__(self, function: Callable[[Any, Any], Any]) -> None:
        self.function = function

    def __call__(self, obs: Any) -> Any:
        if isinstance(obs, Mapping) and OBSERVATION in obs:
            return self.function(obs[OBSERVATION], obs.get(ACTION_MASK))
        return self.function(obs, None)


class ScriptedCoPlayer:
    """A :class:`ScriptedPlayer` as a co-player: called on each row of the batch in turn.

    :param seed: the player's own streams of Python's ``random`` and numpy's global generator
        (where scripted players draw): swapped in for each batch and out after it, so that its
        draws repeat with the seed and neither disturb nor follow anyone else's.
    """

    def __init__(self, player: ScriptedPlayer, seed: int) -> None:
        self.player = player
        self._random = random.Random(seed).getstate()
        self._numpy: Any = np.random.RandomState(seed).get_state()  # legacy: a tuple

    def state_dict(self) -> dict[str, Any]:
        """Where its two streams are, as plain numbers (a checkpoint's)."""
        version, keys, gauss = self._random
        name, numpy_keys, position, has_gauss, cached = self._numpy
        return {
            "random": [version, list(keys), gauss],
            "numpy": [name, numpy_keys.tolist(), position, has_gauss, cached],
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Go on from :meth:`state_dict`'s streams."""
        version, keys, gauss = state["random"]
        self._random = (version, tuple(keys), gauss)
        name, numpy_keys, position, has_gauss, cached = state["numpy"]
        self._numpy = (name, np.asarray(numpy_keys, np.uint32), position, has_gauss, cached)

    def __call__(self, obs: Any) -> npt.NDArray[Any]:
        outside = random.getstate(), np.random.get_state()
        random.setstate(self._random)
        np.random.set_state(self._numpy)
        try:
            return np.asarray([self.player(row(obs, i)) for i in range(batch_size(obs))])
        finally:
            self._random, self._numpy = random.getstate(), np.random.get_state()
            random.setstate(outside[0])
            np.random.set_state(outside[1])


def import_player(spec: str, where: str) -> Callable[[Any, Any], Any]:
    """The function ``module:function`` names (``where``: how errors name the setting).

    :raises ConfigError: it cannot be imported, or is not callable.
    """
    module_name, _, name = spec.partition(":")
    try:
        found = getattr(importlib.import_module(module_name), name)
    except (ImportError, AttributeError) as error:
        raise ConfigError(
            [
                f"{where}: {spec!r} cannot be imported ({type(error).__name__}: {error}); give "
                "module:function of a module importable from the run's working folder or the "
                "installed packages"
            ]
        ) from None
    if not callable(found):
        raise ConfigError([f"{where}: {spec!r} is a {type(found).__name__}, not a function"])
    function: Callable[[Any, Any], Any] = found
    return function
