"""A path the docs named before ``evtrain.run`` had rooms; the module is now
:mod:`evtrain.run.parameters.pettingzoo_parameters`."""

from __future__ import annotations

from evtrain.run.parameters.pettingzoo_parameters import (
    AECParameters,
    ParallelParameters,
    pettingzoo_parameters,
)

__all__ = ["AECParameters", "ParallelParameters", "pettingzoo_parameters"]
