"""What the trainers need from Gymnasium 1.x vector environments.

Gymnasium 1.x vector environments reset finished sub-environments themselves, in one of two
ways (``envs.metadata["autoreset_mode"]``):

``SAME_STEP``
    ``step`` returns the *reset* observation of a finished sub-environment; its final
    observation is in ``infos["final_obs"][i]`` (an object array, masked by
    ``infos["_final_obs"]``).  Every step is a real transition.  evtrain prefers this mode:
    :func:`make_vector_env` builds it.
``NEXT_STEP`` (Gymnasium's default)
    ``step`` returns the *final* observation; the following ``step`` ignores that
    sub-environment's action, resets it and returns reward 0, not done.  That step is not a
    transition and the trainers drop it (:class:`AutoresetTracker`).

``DISABLED`` is refused: the trainers never reset sub-environments themselves.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import gymnasium as gym
import numpy as np
import numpy.typing as npt
from gymnasium.vector import AutoresetMode, VectorEnv

from evtrain.multiagent.copies import ACTIVE

BoolArray = npt.NDArray[np.bool_]


def autoreset_mode(envs: VectorEnv[Any, Any, Any]) -> AutoresetMode:
    """The vector environment's autoreset mode (``NEXT_STEP`` when it does not say).

    :raises ValueError: the mode is ``DISABLED``.
    """
    mode = AutoresetMode(envs.metadata.get("autoreset_mode", AutoresetMode.NEXT_STEP))
    if mode is AutoresetMode.DISABLED:
        raise ValueError(
            "evtrain trainers need a vector environment that resets itself; got "
            "autoreset_mode=DISABLED. Create it with autoreset_mode=AutoresetMode.SAME_STEP "
            "(see evtrain.trainers.make_vector_env)"
        )
    return mode


def final_observations(infos: Mapping[str, Any], which: BoolArray) -> Any:
    """Stacked final observations of the sub-environments ``which`` (``SAME_STEP`` mode): an
    array, or for ``Dict`` observations a dictionary of arrays (as the vector env's own)."""
    final_obs = infos["final_obs"]
    finals = [final_obs[i] for i in np.flatnonzero(which)]
    if isinstance(finals[0], Mapping):
        return {key: np.stack([f[key] for f in finals]) for key in finals[0]}
    return np.stack(finals)


class AutoresetTracker:
    """Marks which sub-environments' latest step was a real transition.

    In ``NEXT_STEP`` mode the step after an episode end only resets; :attr:`valid` is false
    for those sub-environments.  In ``SAME_STEP`` mode every step is valid, except where the
    vector environment says a sub-environment did not act: the ``infos["active"]`` mask of
    :class:`~evtrain.multiagent.slots.AgentSlots` (an agent that left its episode, or has not
    appeared yet), which joins :attr:`valid` in either mode.
    """

    def __init__(self, mode: AutoresetMode, num_envs: int) -> None:
        self.next_step = mode is AutoresetMode.NEXT_STEP
        self.valid: BoolArray = np.ones(num_envs, dtype=np.bool_)
        """Whether the step just taken was a transition, per sub-environment."""
        self.masked = self.next_step
        """Whether :attr:`valid` can be false (``NEXT_STEP`` mode, or an ``active`` mask seen):
        otherwise every step of every sub-environment is a transition."""
        self._resetting: BoolArray = np.zeros(num_envs, dtype=np.bool_)

    def observe(self, dones: BoolArray, infos: Mapping[str, Any] | None = None) -> BoolArray:
        """Record the ``terminated | truncated`` (and, when given, the ``infos``) of a step;
        returns :attr:`valid` for it."""
        if self.next_step:
            np.logical_not(self._resetting, out=self.valid)
            self._resetting = dones & self.valid
        active = None if infos is None else infos.get(ACTIVE)
        if active is not None:
            self.masked = True
            if self.next_step:
                self.valid &= active
            else:
                np.copyto(self.valid, active)
        return self.valid

    def reset(self) -> None:
        """Forget pending resets (after ``envs.reset()``)."""
        self._resetting[:] = False
        self.valid[:] = True


def make_vector_env(
    env_id: str,
    num_envs: int,
    *,
    asynchronous: bool = False,
    env_kwargs: Mapping[str, Any] | None = None,
    wrappers: Sequence[Callable[[gym.Env[Any, Any]], gym.Wrapper[Any, Any, Any, Any]]]
    | None = None,
) -> VectorEnv[Any, Any, Any]:
    """``num_envs`` copies of Gymnasium environment ``env_id`` resetting in ``SAME_STEP`` mode.

    :param asynchronous: one subprocess per copy (``AsyncVectorEnv``) instead of stepping them
        in this process; worth it only when one environment step costs far more than the
        inter-process round trip (not for classic control).
    """
    return gym.make_vec(
        env_id,
        num_envs=num_envs,
        vectorization_mode="async" if asynchronous else "sync",
        vector_kwargs={"autoreset_mode": AutoresetMode.SAME_STEP},
        wrappers=wrappers,
        **dict(env_kwargs or {}),
    )
