"""The values of a run's ``environment_parameters`` for one environment, episode by episode:
what the wrappers of :mod:`evtrain.run.parameters.env_parameters` (a Gymnasium sub-environment) and
:mod:`evtrain.run.parameters.pettingzoo_parameters` (a copy of a PettingZoo environment) share.

At each reset :meth:`ParameterDraws.start_episode` draws each parameter's value from the
current lesson's sampler, sets it as an attribute of the unwrapped environment when it has one,
and returns the reset options that carry the others.  The draws come from a numpy Generator
seeded with the seed the environment is reset with, in a stream of its own; a sampler with a
``seed`` of its own draws from a Generator seeded with that seed alone (the module docs of
:mod:`evtrain.run.parameters.env_parameters` say more).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

import numpy as np

from evtrain.config.environment_parameters import Sampler

_STREAM = 0x5EED_CE55
"""Mixed into the reset seed: the parameters' draws are no copy of the environment's own."""

Target = Literal["attribute", "option"]


def _own_rng(sampler: Sampler) -> np.random.Generator:
    return np.random.default_rng([sampler.seed, _STREAM])


class ParameterDraws:
    """Each episode's values of ``samplers`` for environment ``env`` (see the module).

    :param env: the environment the values are for; its ``unwrapped`` (the environment itself
        when it has none) gets the attributes.
    :param samplers: the current lesson's value of each parameter.
    """

    def __init__(self, env: Any, samplers: Mapping[str, Sampler]) -> None:
        self.env = env
        self.samplers: dict[str, Sampler] = dict(samplers)
        self.rng = np.random.default_rng()
        """Draws the values; reseeded by every reset that passes a seed."""
        self.own_rngs = {name: _own_rng(s) for name, s in samplers.items() if s.seed != -1}
        """The streams of the samplers that have a seed of their own, by parameter."""
        self.values: dict[str, float] = {}
        """The values the current episode started with."""

    @property
    def base(self) -> Any:
        """The unwrapped environment, whose attributes are set."""
        return getattr(self.env, "unwrapped", self.env)

    def start_episode(
        self, seed: int | None, options: dict[str, Any] | None
    ) -> dict[str, Any] | None:
        """Draw the values of an episode that starts with ``reset(seed=seed, options=options)``,
        set those the environment has an attribute for, and return the options to reset it
        with: the others merged over ``options``."""
        if seed is not None:
            self.rng = np.random.default_rng([seed, _STREAM])
            self.own_rngs = {name: _own_rng(s) for name, s in self.samplers.items() if s.seed != -1}
        self.values = {
            name: s.sample(self.own_rngs.get(name, self.rng)) for name, s in self.samplers.items()
        }
        base = self.base
        passed = dict(options or {})
        for name, value in self.values.items():
            if hasattr(base, name):
                setattr(base, name, value)
            else:
                passed[name] = value
        return passed if passed else options

    def use(self, samplers: Mapping[str, Sampler]) -> None:
        """Draw from ``samplers`` from the next episode on (a lesson changed)."""
        self.samplers.update(samplers)
        for name, sampler in samplers.items():
            if sampler.seed == -1:
                self.own_rngs.pop(name, None)
            else:
                self.own_rngs[name] = _own_rng(sampler)

    def targets(self) -> dict[str, Target]:
        """How each parameter reaches the environment: as an attribute, or in reset options."""
        base = self.base
        return {name: "attribute" if hasattr(base, name) else "option" for name in self.samplers}


class SetsParameters:
    """What the runner calls on every wrapper of ``environment_parameters``, through the vector
    environment's ``call`` (the wrapper's :attr:`draws` does the work)."""

    draws: ParameterDraws

    @property
    def values(self) -> dict[str, float]:
        """The values the current episode started with."""
        return self.draws.values

    def set_environment_parameters(self, samplers: Mapping[str, Sampler]) -> None:
        """Use ``samplers`` from the next reset on (a lesson changed)."""
        self.draws.use(samplers)

    def environment_parameter_targets(self) -> dict[str, Target]:
        """How each parameter reaches the environment: as an attribute, or in reset options."""
        return self.draws.targets()

    def environment_class(self) -> str:
        """The unwrapped environment's class name (for messages)."""
        return type(self.draws.base).__name__
