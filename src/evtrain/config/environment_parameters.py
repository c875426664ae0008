"""``environment_parameters``: ML-Agents' curricula and samplers, as options.

Every parameter is structured as a curriculum (ML-Agents does the same): a constant or a sampler
becomes one lesson named after the parameter, without completion criteria.  A value is a
:class:`Sampler`: :class:`Constant`, :class:`Uniform`, :class:`Gaussian` or
:class:`MultiRangeUniform`, written in YAML as a number or as ``{sampler_type: uniform,
sampler_parameters: {min_value: 0, max_value: 1}}``.  What reaches the environments, and when
lessons change, is :mod:`evtrain.run.parameters.curriculum`'s business.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar, Literal

import attrs
import numpy as np

# Validators raise (message, attribute), as attrs' own do: the attribute is the key in the path.


def _at_least_zero(_: Any, attribute: attrs.Attribute[Any], value: float) -> None:
    if value < 0:
        raise ValueError(f"expected a number of at least 0, got {value}", attribute)


@attrs.frozen(kw_only=True)
class Sampler:
    """What a parameter is set to at each episode reset: a constant, or a fresh draw."""

    sampler_type: ClassVar[str] = ""
    """The ``sampler_type`` of the YAML (``constant`` for a plain number)."""
    seed: int = attrs.field(default=-1, repr=False, validator=attrs.validators.instance_of(int))
    """ML-Agents' ``sampler_parameters.seed``: -1 (its default) draws from the stream of the
    sub-environment, seeded from ``env_settings.seed``; another value gives the sampler a
    stream of its own from that seed, the same in every sub-environment and run (ML-Agents
    seeds the sampler of every Unity instance alike).  Left out of the repr: lesson-change
    messages show the values."""

    def sample(self, rng: np.random.Generator) -> float:
        """One value, drawn from ``rng``."""
        raise NotImplementedError


@attrs.frozen(kw_only=True)
class Constant(Sampler):
    """The same value every episode (a plain number in the YAML)."""

    sampler_type: ClassVar[str] = "constant"
    value: float = 0.0

    def sample(self, rng: np.random.Generator) -> float:
        return self.value


@attrs.frozen(kw_only=True)
class Uniform(Sampler):
    """Uniform on ``[min_value, max_value)``."""

    sampler_type: ClassVar[str] = "uniform"
    min_value: float = 0.0
    max_value: float = attrs.field(default=1.0)

    @max_value.validator
    def _check(self, attribute: attrs.Attribute[Any], value: float) -> None:
        if self.min_value > value:
            raise ValueError(
                f"expected at least min_value ({self.min_value}), got {value}", attribute
            )

    def sample(self, rng: np.random.Generator) -> float:
        return float(rng.uniform(self.min_value, self.max_value))


@attrs.frozen(kw_only=True)
class Gaussian(Sampler):
    """Normal with mean ``mean`` and standard deviation ``st_dev``."""

    sampler_type: ClassVar[str] = "gaussian"
    mean: float = 1.0
    st_dev: float = attrs.field(default=1.0, validator=_at_least_zero)

    def sample(self, rng: np.random.Generator) -> float:
        return float(rng.normal(self.mean, self.st_dev))


def _intervals(value: Any) -> tuple[tuple[float, float], ...]:
    return tuple((float(a), float(b)) for a, b in value)


@attrs.frozen(kw_only=True)
class MultiRangeUniform(Sampler):
    """Uniform on the union of ``intervals``: an interval is picked with a probability
    proportional to its width (as ML-Agents' sampler does), then a value uniformly in it."""

    sampler_type: ClassVar[str] = "multirangeuniform"
    intervals: list[list[float]] = attrs.field(factory=lambda: [[0.0, 1.0]])

    @intervals.validator
    def _check(self, attribute: attrs.Attribute[Any], value: list[list[float]]) -> None:
        if not value:
            raise ValueError("expected at least one interval [min, max], got none", attribute)
        for index, interval in enumerate(value):
            if len(interval) != 2 or interval[0] > interval[1]:
                raise ValueError(
                    f"interval {index}: expected [min, max] with min <= max, got {interval}",
                    attribute,
                )

    def sample(self, rng: np.random.Generator) -> float:
        widths = np.array([b - a for a, b in self.intervals], dtype=np.float64)
        total = widths.sum()
        index = (
            int(rng.choice(len(widths), p=widths / total))
            if total > 0
            else int(rng.integers(len(widths)))
        )
        low, high = self.intervals[index]
        return float(rng.uniform(low, high))


SAMPLERS: Mapping[str, type[Sampler]] = {
    cls.sampler_type: cls for cls in (Constant, Uniform, Gaussian, MultiRangeUniform)
}
"""The sampler class of each ``sampler_type``."""


@attrs.define(kw_only=True)
class SamplerSpec:
    """A sampler as the YAML writes it, before ``sampler_parameters`` is structured as the
    class of ``sampler_type``."""

    sampler_type: Literal["constant", "uniform", "gaussian", "multirangeuniform"]
    sampler_parameters: dict[str, Any]


@attrs.define(kw_only=True)
class CompletionCriteria:
    """When a lesson is over (ML-Agents' ``CompletionCriteriaSettings``)."""

    behavior: str
    """The behavior whose summaries are measured."""
    measure: Literal["reward", "progress", "Elo"] = "reward"
    """``reward``: the mean return of the lesson's last ``min_lesson_length`` episodes;
    ``progress``: step / max_steps of ``behavior``; ``Elo``: the ELO rating of ``behavior``'s
    self-play (``Self-play/ELO``) after its latest episode."""
    threshold: float = attrs.field(default=0.0)
    """The lesson ends once the measure exceeds it (``progress``: between 0 and 1)."""
    min_lesson_length: int = attrs.field(default=0, validator=_at_least_zero)
    """Episodes of ``behavior`` the lesson lasts at least."""
    signal_smoothing: bool = True
    """``reward``: measure 0.25 x the previous measure + 0.75 x the new mean."""
    require_reset: bool = False
    """Accepted for ML-Agents configs; evtrain never cuts episodes short (see the docs)."""

    @threshold.validator
    def _check(self, attribute: attrs.Attribute[Any], value: float) -> None:
        if self.measure == "progress" and not 0.0 <= value <= 1.0:
            raise ValueError(
                f"expected a number between 0 and 1 for measure progress, got {value}",
                attribute,
            )


@attrs.define(kw_only=True)
class Lesson:
    """One lesson of a curriculum: the parameter's value while it lasts."""

    name: str
    value: Sampler
    completion_criteria: CompletionCriteria | None = None
    """``None`` for the last lesson only."""


@attrs.define(kw_only=True)
class EnvironmentParameter:
    """One parameter's lessons, in order (a constant or a sampler: one lesson)."""

    curriculum: list[Lesson]


def sampler_data(sampler: Sampler) -> Any:
    """``sampler`` as the YAML writes it: a number for a constant."""
    if isinstance(sampler, Constant) and sampler.seed == -1:
        return sampler.value
    parameters = attrs.asdict(sampler)
    if sampler.seed == -1:  # ML-Agents' default: written configurations read as before
        del parameters["seed"]
    if isinstance(sampler, MultiRangeUniform):
        parameters["intervals"] = [list(i) for i in sampler.intervals]
    return {"sampler_type": sampler.sampler_type, "sampler_parameters": parameters}


def parameter_problems(
    parameters: Mapping[str, EnvironmentParameter], behaviors: Mapping[str, Any]
) -> list[str]:
    """What structuring cannot see: every lesson but the last needs completion criteria (the
    last one's are ignored, as in ML-Agents), and they must name a behavior of the run (one
    with ``self_play`` for ``measure: Elo``)."""
    found = []
    for name, parameter in parameters.items():
        where = f"environment_parameters.{name}"
        if name == "metadata":
            found.append(
                f"{where}: a parameter cannot be named 'metadata' (training_status.json keeps "
                "its versions under that key); rename it"
            )
        if not parameter.curriculum:
            found.append(f"{where}.curriculum: expected at least one lesson, got none")
        last = len(parameter.curriculum) - 1
        for index, lesson in enumerate(parameter.curriculum):
            criteria = lesson.completion_criteria
            if criteria is None:
                if index < last:
                    following = parameter.curriculum[index + 1].name
                    found.append(
                        f"{where}.curriculum.{index}.completion_criteria: required for every "
                        f"lesson but the last (lesson {lesson.name!r} is followed by "
                        f"{following!r})"
                    )
            elif index < last and criteria.behavior not in behaviors:
                found.append(
                    f"{where}.curriculum.{index}.completion_criteria.behavior: "
                    f"{criteria.behavior!r} is not a behavior of this run (behaviors: "
                    f"{', '.join(behaviors)})"
                )
            elif index < last and criteria.measure == "Elo":
                found.extend(_elo_problems(f"{where}.curriculum.{index}", criteria, behaviors))
    return found


def _elo_problems(
    where: str, criteria: CompletionCriteria, behaviors: Mapping[str, Any]
) -> list[str]:
    if getattr(behaviors[criteria.behavior], "self_play", None) is not None:
        return []
    return [
        f"{where}.completion_criteria.measure: Elo is the rating of self-play, and behavior "
        f"{criteria.behavior!r} has no self_play; add behaviors.{criteria.behavior}.self_play "
        "or measure reward or progress"
    ]
