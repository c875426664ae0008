"""The ``sweep:`` section of a config: what ``evtrain sweep`` searches, and what for.

A plain run refuses a config that has one (``evtrain learn`` points at ``evtrain sweep``);
``evtrain sweep`` takes it out, fills each parameter with a trial's value and trains that.
Plain attrs, checked as every other option is (:mod:`evtrain.config.converter`); Optuna is
imported only by :mod:`evtrain.sweep`, which turns these into its samplers and pruners.
"""

from __future__ import annotations

import math
from typing import Any, Literal

import attrs

from evtrain.events.stats import CUMULATIVE_REWARD

ParameterType = Literal["uniform", "log_uniform", "int", "choice"]


def _range_needed(instance: Parameter, attribute: attrs.Attribute[Any], value: str) -> None:
    """``uniform``, ``log_uniform`` and ``int`` need ``low`` and ``high``; ``choice`` needs
    ``choices`` (and has no range)."""
    if value == "choice":
        if instance.choices is None:
            raise ValueError("expected choices: [a, b, ...] with type choice", attribute)
        if instance.low is not None or instance.high is not None:
            raise ValueError("type choice takes choices, not low and high", attribute)
        return
    if instance.low is None or instance.high is None:
        raise ValueError(f"expected low and high with type {value}", attribute)
    if instance.choices is not None:
        raise ValueError(f"type {value} takes low and high, not choices", attribute)


def _finite(_: Any, attribute: attrs.Attribute[Any], value: float | None) -> None:
    if value is not None and not math.isfinite(value):
        raise ValueError(f"expected a finite number, got {value}", attribute)


def _log_positive(
    instance: Parameter, attribute: attrs.Attribute[Any], value: float | None
) -> None:
    if value is not None and (instance.type == "log_uniform" or instance.log) and not value > 0:
        raise ValueError(f"expected a number above 0 on a log scale, got {value}", attribute)


def _above_low(instance: Parameter, attribute: attrs.Attribute[Any], value: float | None) -> None:
    low = instance.low
    if value is None or low is None:
        return
    if not value > low:
        raise ValueError(f"expected a number above low ({low}), got {value}", attribute)
    if instance.type == "int" and not (float(low).is_integer() and float(value).is_integer()):
        raise ValueError(f"expected whole numbers with type int, got {low} and {value}", attribute)


def _scalars(_: Any, attribute: attrs.Attribute[Any], value: list[Any] | None) -> None:
    if value is None:
        return
    if not value:
        raise ValueError("expected at least one choice", attribute)
    odd = [c for c in value if not isinstance(c, (str, int, float, bool)) and c is not None]
    if odd:
        raise ValueError(
            f"expected numbers, strings, true/false or null as choices, got {odd[0]!r} "
            "(a list or mapping cannot be a choice: sweep each of its keys instead)",
            attribute,
        )
    if len(set(map(repr, value))) != len(value):
        raise ValueError(f"expected each choice once, got {value!r}", attribute)


def _positive_step(_: Any, attribute: attrs.Attribute[Any], value: float | None) -> None:
    if value is not None and not value > 0:
        raise ValueError(f"expected a step above 0, got {value}", attribute)


@attrs.define(kw_only=True)
class Parameter:
    """One option that a sweep varies, by its key path.

    ``{type: log_uniform, low: 1e-4, high: 1e-2}``, ``{type: uniform, low: 0.9, high: 0.99}``,
    ``{type: int, low: 1, high: 8}`` (``step``, ``log`` as Optuna's ``suggest_int``),
    ``{type: choice, choices: [64, 128, 256]}``.
    """

    low: float | None = attrs.field(default=None, validator=[_finite, _log_positive])
    high: float | None = attrs.field(default=None, validator=[_finite, _above_low])
    step: float | None = attrs.field(default=None, validator=_positive_step)
    """``int``: the spacing of the values (default 1); ``uniform``: a grid (default none)."""
    log: bool = False
    """``int``: draw on a log scale (``log_uniform`` is ``uniform`` with ``log: true``)."""
    choices: list[Any] | None = attrs.field(default=None, validator=_scalars)
    type: ParameterType = attrs.field(validator=_range_needed)
    """``uniform``, ``log_uniform``, ``int`` or ``choice``."""


@attrs.define(kw_only=True)
class Objective:
    """What a trial is scored by: a stat of one behavior, as its summaries or evaluations
    report it."""

    stat: str = CUMULATIVE_REWARD
    """A stats key (``Environment/Cumulative Reward``, or ``Evaluation/Mean Return`` when the
    behavior has ``evaluation:``); its mean over each summary period is one value."""
    behavior: str | None = None
    """The behavior whose stat counts; unset: the config's one behavior."""
    direction: Literal["maximize", "minimize"] = "maximize"
    aggregate: Literal["last", "best", "mean_last_k"] = "last"
    """A trial's score from its values: the last one, the best one, or the mean of the last
    ``k``."""
    k: int = attrs.field(default=5, validator=attrs.validators.ge(1))
    """How many values ``mean_last_k`` averages."""


@attrs.define(kw_only=True)
class Pruner:
    """When a trial is stopped early: Optuna's median pruner stops a trial whose value at a
    step is worse than the median of the earlier trials' values at that step."""

    type: Literal["median", "none"] = "median"
    n_startup_trials: int = attrs.field(default=5, validator=attrs.validators.ge(0))
    """Trials that run to the end before any is pruned."""
    n_warmup_steps: int = attrs.field(default=0, validator=attrs.validators.ge(0))
    """Steps of a trial before it may be pruned."""
    interval_steps: int = attrs.field(default=1, validator=attrs.validators.ge(1))
    """Steps between the checks (a check happens at each reported value)."""


def _some(_: Any, attribute: attrs.Attribute[Any], value: dict[str, Parameter]) -> None:
    if not value:
        raise ValueError(
            "expected at least one parameter, e.g. behaviors.<name>.hyperparameters."
            "learning_rate: {type: log_uniform, low: 1.0e-4, high: 1.0e-2}",
            attribute,
        )


@attrs.define(kw_only=True)
class SweepSettings:
    """The ``sweep:`` section: the parameters, the objective, the sampler and the pruner."""

    parameters: dict[str, Parameter] = attrs.field(validator=_some)
    """By key path into the config: ``behaviors.Pendulum.hyperparameters.learning_rate``."""
    objective: Objective = attrs.field(factory=Objective)
    sampler: Literal["tpe", "random"] = "tpe"
    """Optuna's TPE (the default) or random search."""
    seed: int = attrs.field(default=0, validator=attrs.validators.ge(0))
    """The sampler's seed; trial ``n`` draws with a seed made of ``seed`` and ``n`` (each trial
    its own stream, whichever process runs it)."""
    pruner: Pruner | None = attrs.field(factory=Pruner)
    """``null`` or ``{type: none}``: every trial runs to its end."""
