"""``behaviors.<name>.evaluation``: evtrain's own key (ML-Agents has none), declared and
range-checked here; what it does is :mod:`evtrain.run.evaluation.evaluations`'.

Every ``every`` steps the behavior's deterministic policy as of that step (observation
normaliser included) plays ``episodes`` episodes on environments of its own, off the training
thread; episode ``i`` of every evaluation starts from ``reset(seed=seed + i)``, so evaluations
are comparable with each other and can be repeated outside the run.
"""

from __future__ import annotations

from typing import Any

import attrs
from attrs import validators as v

from evtrain.evaluation.opponents import (
    LOWER_IS_BETTER,
    MEAN_RETURN,
    Opponent,
    best_by_choices,
    opponent_problems,
    opponents_of,
)
from evtrain.evaluation.video import VideoSettings

_positive_int = [v.instance_of(int), v.gt(0)]
_MAX_DEFAULT_ENVS = 8


def _check_opponents(_: Any, __: Any, value: Any) -> None:
    problems = opponent_problems(value)
    if problems:  # one at a time: a validator raises once
        raise ValueError(problems[0])


def _check_best_by(instance: Any, _: Any, value: Any) -> None:
    if not isinstance(value, str):
        raise ValueError(f"best_by: expected a stat's name, got {value!r}")
    opponents: list[Any] = instance.opponents
    choices = best_by_choices(opponents_of(opponents) if not opponent_problems(opponents) else [])
    if value not in choices:
        raise ValueError(
            f"best_by: expected one of {', '.join(repr(c) for c in choices)} (Mean Return, or "
            f"an opponent's <label>/<stat>), got {value!r}"
        )


def _default_num_envs(instance: Any) -> int:
    return min(int(instance.episodes), _MAX_DEFAULT_ENVS)


@attrs.define(kw_only=True)
class EvaluationSettings:
    """When and how a behavior's policy is evaluated, and whether its best is kept."""

    every: int = attrs.field(validator=_positive_int)
    """Environment steps (global, as ``max_steps``) between two evaluations; required.  An
    evaluation is due at the end of the update that reaches the next multiple of it (the
    last update included); an update that passes several multiples starts one."""
    episodes: int = attrs.field(default=10, validator=_positive_int)
    """Episodes per evaluation."""
    num_envs: int = attrs.field(
        default=attrs.Factory(_default_num_envs, takes_self=True), validator=_positive_int
    )
    """Environments the episodes are played on side by side (one batch through the policy
    per step); default ``min(episodes, 8)``.  Not used against ``opponents``: their episodes
    are played one after another on one copy."""
    seed: int = attrs.field(default=0, validator=[v.instance_of(int), v.ge(0)])
    """Episode ``i`` of every evaluation starts from ``reset(seed=seed + i)``."""
    best_model: bool = attrs.field(default=True, validator=v.instance_of(bool))
    """Keep the checkpoint and ONNX of the evaluation with the best :attr:`best_by` so far
    (``<Behavior>-best.onnx`` beside ``<Behavior>.onnx``, ``<Behavior>/best.pt``)."""
    opponents: list[Any] = attrs.field(factory=list, validator=_check_opponents)
    """PettingZoo behaviors only, and required there: who the behavior plays against, each
    in every seat (:mod:`evtrain.evaluation.opponents`; read them with :meth:`opponent_list`).
    ``episodes`` is then per opponent and seat."""
    best_by: str = attrs.field(default=MEAN_RETURN, validator=_check_best_by)
    """The stat ``best_model`` follows: ``Mean Return`` (every episode's), or an opponent's
    ``<label>/Win Rate``, ``<label>/Draw Rate``, ``<label>/Mean Return`` (highest best) or
    ``<label>/Loss Rate`` (lowest best)."""
    env_kwargs: dict[str, Any] = attrs.field(factory=dict)
    """Keyword arguments of the evaluation environments over ``env_settings.env_kwargs``
    (a key given here replaces the training one; e.g. another ``render_mode``)."""
    timeout: float = attrs.field(default=600.0, validator=v.gt(0.0))
    """Seconds an evaluation may take, counted from when it is sent to the worker (the worker's
    restart included): past it the worker is killed, the evaluation is reported failed and a
    new worker plays the next one; so an environment that hangs costs one evaluation, never
    the run."""
    video: VideoSettings | None = attrs.field(default=None, metadata={"absent_when_none": True})
    """Record some episodes as videos (:mod:`evtrain.evaluation.video`): the environments are
    built with ``render_mode="rgb_array"`` unless ``env_kwargs`` says otherwise."""

    def opponent_list(self) -> list[Opponent]:
        """:attr:`opponents` with their labels."""
        return opponents_of(self.opponents)

    @property
    def lower_is_better(self) -> bool:
        """Whether :attr:`best_by`'s best is its lowest value."""
        return self.best_by.rpartition("/")[2] in LOWER_IS_BETTER
