"""``stop``: end a behavior's run early, at the next update boundary, with the normal final
save and export (evtrain's key; ML-Agents has none).  Declared and checked here; the runner
connects the subscribers of :mod:`evtrain.stopping` that do it (:mod:`evtrain.run.stops`).

In YAML::

    stop:
      reward: 475.0                        # the summary's mean return reached 475
      plateau: {patience: 5, min_delta: 0}  # 5 evaluations without a better mean return
"""

from __future__ import annotations

import math
from typing import Any

import attrs
from attrs import validators as v

from evtrain.events.payloads import EVALUATION_MEAN_RETURN
from evtrain.events.stats import CUMULATIVE_REWARD


def _finite(_: object, attribute: attrs.Attribute[Any], value: float | None) -> None:
    if value is not None and not math.isfinite(value):
        raise ValueError(f"{attribute.name}: expected a finite number, got {value!r}")


@attrs.define(kw_only=True)
class PlateauSettings:
    """``stop.plateau``: stop after ``patience`` values of ``stat`` in a row that do not beat
    the best so far by more than ``min_delta``."""

    patience: int = attrs.field(validator=[v.instance_of(int), v.gt(0)])
    """Values in a row without improvement that stop the run."""
    min_delta: float = attrs.field(default=0.0, validator=[v.ge(0.0), _finite])
    """How much a value must beat the best so far to count as an improvement."""
    stat: str = attrs.field(default=EVALUATION_MEAN_RETURN, validator=v.instance_of(str))
    """What is watched: the evaluations' mean return (one value per evaluation, the
    behavior's ``evaluation`` settings), or a stats key (one value per summary)."""


@attrs.define(kw_only=True)
class StopSettings:
    """``behaviors.<name>.stop``: the conditions that stop the run early (any one does)."""

    reward: float | None = attrs.field(default=None, validator=_finite)
    """Stop once ``reward_stat`` reaches this (SB3's ``StopTrainingOnRewardThreshold``)."""
    reward_stat: str = attrs.field(default=CUMULATIVE_REWARD, validator=v.instance_of(str))
    """The stat ``reward`` is compared with: a summary's mean of it (the mean return of the
    episodes the summary period finished), or ``Evaluation/Mean Return``."""
    plateau: PlateauSettings | None = attrs.field(default=None)
    """Stop when ``plateau.stat`` stops improving."""
