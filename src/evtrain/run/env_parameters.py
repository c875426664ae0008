"""A path the docs named before ``evtrain.run`` had rooms; the module is now
:mod:`evtrain.run.parameters.env_parameters`."""

from __future__ import annotations

from evtrain.run.parameters.env_parameters import EnvironmentParameters, Target, with_parameters

__all__ = ["EnvironmentParameters", "Target", "with_parameters"]
