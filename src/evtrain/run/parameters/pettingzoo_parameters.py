"""``environment_parameters`` on the copies of a PettingZoo environment: a PettingZoo wrapper
around each copy behind a behavior's :class:`~evtrain.multiagent.slots.AgentSlots` that sets
every parameter at every reset of the copy, as
:class:`~evtrain.run.parameters.env_parameters.EnvironmentParameters` does for a Gymnasium
sub-environment (an attribute of the unwrapped environment when it has one, else a reset
option; the same seeded draws).  A copy's reset starts an episode of every agent in it, so all
its agents see the same values; a new lesson applies from the copy's next episode.  The runner
reaches the wrappers through ``AgentSlots.call``.

Imported only for a PettingZoo environment
(:func:`~evtrain.run.parameters.env_parameters.with_parameters`): it imports PettingZoo.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pettingzoo import AECEnv, ParallelEnv
from pettingzoo.utils import BaseParallelWrapper, BaseWrapper

from evtrain.config.environment_parameters import Sampler
from evtrain.run.parameters.parameter_draws import ParameterDraws, SetsParameters


def pettingzoo_parameters(env: Any, samplers: Mapping[str, Sampler]) -> Any:
    """``env``, a PettingZoo Parallel or AEC environment, wrapped to set ``samplers``' values at
    every reset.

    :raises TypeError: ``env`` is neither.
    """
    if isinstance(env, ParallelEnv):
        return ParallelParameters(env, samplers)
    if isinstance(env, AECEnv):
        return AECParameters(env, samplers)
    raise TypeError(
        f"environment_parameters: {env!r} is neither a Gymnasium environment nor a PettingZoo "
        "ParallelEnv or AECEnv"
    )


class ParallelParameters(SetsParameters, BaseParallelWrapper):  # type: ignore[misc]  # untyped
    """Sets ``samplers``' values on a PettingZoo Parallel environment at every reset."""

    def __init__(self, env: Any, samplers: Mapping[str, Sampler]) -> None:
        super().__init__(env)
        self.draws = ParameterDraws(env, samplers)

    def reset(
        self, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        obs, infos = self.env.reset(seed=seed, options=self.draws.start_episode(seed, options))
        return obs, infos


class AECParameters(SetsParameters, BaseWrapper):  # type: ignore[misc]  # untyped
    """Sets ``samplers``' values on a PettingZoo AEC (turn-based) environment at every reset."""

    def __init__(self, env: Any, samplers: Mapping[str, Sampler]) -> None:
        super().__init__(env)
        self.draws = ParameterDraws(env, samplers)

    def reset(self, seed: int | None = None, options: dict[str, Any] | None = None) -> None:
        self.env.reset(seed=seed, options=self.draws.start_episode(seed, options))
