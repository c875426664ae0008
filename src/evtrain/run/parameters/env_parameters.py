"""How ``environment_parameters`` reach an environment: a wrapper around each Gymnasium
sub-environment, or each copy of a PettingZoo environment, that sets every parameter at every
episode reset.

At each ``reset`` the wrapper draws each parameter's value from the current lesson's sampler (a
constant is its value) and

- sets it as an attribute of the unwrapped environment when it has one
  (``env.unwrapped.force_mag = 12.0``): what classic-control environments read at every step;
- otherwise passes it to ``reset`` in ``options`` (``options["<name>"] = value``, merged over
  the caller's options), for environments that read their reset options.

The draws come from a numpy Generator seeded with the seed the environment is reset with
(the trainer's first reset; a vector environment gives sub-environment ``i`` seed ``seed + i``,
a behavior's :class:`~evtrain.multiagent.slots.AgentSlots` copy ``k`` seed ``seed + k``), in a
stream of its own: the environment's own ``np_random`` draws nothing alike.  A sampler with a
``seed`` of its own (ML-Agents' ``sampler_parameters.seed``, not -1) draws from a Generator
seeded with that seed alone, restarted by every reset that passes a seed and when its lesson
starts: every environment, in every run, draws the same values.  The runner changes lessons
with ``set_environment_parameters``, through the vector environment's ``call``, which reaches
``AsyncVectorEnv``'s worker processes and the copies behind ``AgentSlots`` too; the new values
apply from each environment's next episode.

:class:`EnvironmentParameters` wraps a Gymnasium environment;
:mod:`evtrain.run.parameters.pettingzoo_parameters` wraps a PettingZoo one (the copies of an
``AgentSlots``), with the same draws
(:class:`~evtrain.run.parameters.parameter_draws.ParameterDraws`).
:func:`with_parameters` picks the wrapper.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import gymnasium as gym

from evtrain.config.environment_parameters import Sampler
from evtrain.run.parameters.parameter_draws import ParameterDraws, SetsParameters, Target

__all__ = ["EnvironmentParameters", "Target", "with_parameters"]


def with_parameters(env: Any, samplers: Mapping[str, Sampler]) -> Any:
    """``env`` wrapped to set ``samplers``' values at every reset: a Gymnasium environment in
    :class:`EnvironmentParameters`, a PettingZoo one in the wrapper of its API
    (:func:`evtrain.run.parameters.pettingzoo_parameters.pettingzoo_parameters`; PettingZoo is
    imported only then)."""
    if isinstance(env, gym.Env):
        return EnvironmentParameters(env, samplers)
    from evtrain.run.parameters.pettingzoo_parameters import pettingzoo_parameters

    return pettingzoo_parameters(env, samplers)


class EnvironmentParameters(SetsParameters, gym.Wrapper[Any, Any, Any, Any]):
    """Sets ``samplers``' values on the wrapped environment at every reset (see the module).

    :param samplers: the current lesson's value of each parameter.
    """

    def __init__(self, env: gym.Env[Any, Any], samplers: Mapping[str, Sampler]) -> None:
        super().__init__(env)
        self.draws = ParameterDraws(env, samplers)

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Any, dict[str, Any]]:
        return self.env.reset(seed=seed, options=self.draws.start_episode(seed, options))
