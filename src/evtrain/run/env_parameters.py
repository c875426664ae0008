"""How ``environment_parameters`` reach a Gymnasium environment: a wrapper around each
sub-environment that sets every parameter at every episode reset.

At each ``reset`` the wrapper draws each parameter's value from the current lesson's sampler (a
constant is its value) and

- sets it as an attribute of the unwrapped environment when it has one
  (``env.unwrapped.force_mag = 12.0``): what classic-control environments read at every step;
- otherwise passes it to ``reset`` in ``options`` (``options["<name>"] = value``, merged over
  the caller's options), for environments that read their reset options.

The draws come from a numpy Generator seeded with the seed the sub-environment is reset with
(the trainer's first reset; a vector environment gives sub-environment ``i`` seed ``seed + i``),
in a stream of its own: the environment's own ``np_random`` draws nothing alike.  A sampler
with a ``seed`` of its own (ML-Agents' ``sampler_parameters.seed``, not -1) draws from a
Generator seeded with that seed alone, restarted by every reset that passes a seed and when its
lesson starts: every sub-environment, in every run, draws the same values.  The runner
changes lessons with :meth:`EnvironmentParameters.set_environment_parameters`, through the
vector environment's ``call``, which reaches ``AsyncVectorEnv``'s worker processes too; the new
values apply from each sub-environment's next episode.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

import gymnasium as gym
import numpy as np

from evtrain.config.environment_parameters import Sampler

_STREAM = 0x5EED_CE55
"""Mixed into the reset seed: the parameters' draws are no copy of the environment's own."""

Target = Literal["attribute", "option"]


def _own_rng(sampler: Sampler) -> np.random.Generator:
    return np.random.default_rng([sampler.seed, _STREAM])


class EnvironmentParameters(gym.Wrapper[Any, Any, Any, Any]):
    """Sets ``samplers``' values on the wrapped environment at every reset (see the module).

    :param samplers: the current lesson's value of each parameter.
    """

    def __init__(self, env: gym.Env[Any, Any], samplers: Mapping[str, Sampler]) -> None:
        super().__init__(env)
        self.samplers: dict[str, Sampler] = dict(samplers)
        self.rng = np.random.default_rng()
        """Draws the values; reseeded by every ``reset`` that passes a seed."""
        self.own_rngs = {name: _own_rng(s) for name, s in samplers.items() if s.seed != -1}
        """The streams of the samplers that have a seed of their own, by parameter."""
        self.values: dict[str, float] = {}
        """The values the current episode started with."""

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Any, dict[str, Any]]:
        if seed is not None:
            self.rng = np.random.default_rng([seed, _STREAM])
            self.own_rngs = {name: _own_rng(s) for name, s in self.samplers.items() if s.seed != -1}
        self.values = {
            name: s.sample(self.own_rngs.get(name, self.rng)) for name, s in self.samplers.items()
        }
        base = self.env.unwrapped
        passed = dict(options or {})
        for name, value in self.values.items():
            if hasattr(base, name):
                setattr(base, name, value)
            else:
                passed[name] = value
        return self.env.reset(seed=seed, options=passed if passed else options)

    def set_environment_parameters(self, samplers: Mapping[str, Sampler]) -> None:
        """Use ``samplers`` from the next reset on (a lesson changed)."""
        self.samplers.update(samplers)
        for name, sampler in samplers.items():
            if sampler.seed == -1:
                self.own_rngs.pop(name, None)
            else:
                self.own_rngs[name] = _own_rng(sampler)

    def environment_parameter_targets(self) -> dict[str, Target]:
        """How each parameter reaches the environment: as an attribute, or in reset options."""
        base = self.env.unwrapped
        return {name: "attribute" if hasattr(base, name) else "option" for name in self.samplers}

    def environment_class(self) -> str:
        """The unwrapped environment's class name (for messages)."""
        return type(self.env.unwrapped).__name__
