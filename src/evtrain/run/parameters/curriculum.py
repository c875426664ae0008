"""A run's ``environment_parameters``: which lesson each parameter is in, when it moves on, and
how the environments learn of it (ML-Agents' ``EnvironmentParameterManager``).

Lessons move as in ML-Agents.  After each summary of a behavior, every parameter whose current
lesson's completion criteria name that behavior is checked, once at least
``min_lesson_length`` of its episodes ended since the last lesson change (ML-Agents clears
every behavior's episode buffer at any lesson change, so does evtrain):

- ``progress``: the behavior's step / ``max_steps`` exceeds ``threshold``;
- ``reward``: the mean return of its last ``max(1, min_lesson_length)`` episodes, smoothed as
  0.25 x the previous measure + 0.75 x the new one when ``signal_smoothing``, exceeds
  ``threshold``;
- ``Elo``: the behavior's self-play ELO rating (``Self-play/ELO``, reported at each episode's
  end) exceeds ``threshold`` (ML-Agents #5623; no smoothing: a rating is an average already).

A change moves one lesson, emits ``lesson_changed``, logs one line, and reaches every
sub-environment through its :class:`~evtrain.run.parameters.env_parameters.EnvironmentParameters`
wrapper, from its next episode on (a Unity build through its environment parameters side
channel, with the next step: :mod:`evtrain.run.environments.build_channels`).  Every summary
of every behavior reports ``Environment/Lesson Number/<parameter>``: the lesson its period was
played in.  The lesson is recorded in ``training_status.json`` (``{"<parameter>":
{"lesson_num": N}}``, ML-Agents' key) with each checkpoint and read back on ``--resume`` (and
``--inference``, whose lessons stay where they are).  In a distributed run rank 0's episodes
decide, and the ranks follow.
"""

from __future__ import annotations

import functools
import logging
from collections import deque
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from evtrain.bus.reporter import StatsReporter
from evtrain.config.environment_parameters import CompletionCriteria, EnvironmentParameter
from evtrain.events import signals
from evtrain.events.payloads import LessonChanged, StatsEvent
from evtrain.events.stats import CUMULATIVE_REWARD, StatsAggregationMethod, StatsSummary
from evtrain.run.parameters.env_parameters import with_parameters
from evtrain.trainers.ghost import ELO

if TYPE_CHECKING:
    from evtrain.bus import Bus
    from evtrain.config.environment_parameters import Sampler
    from evtrain.config.options import RunOptions
    from evtrain.run.checkpoints.training_status import TrainingStatus
    from evtrain.world import World

logger = logging.getLogger("evtrain")

LESSON_NUMBER = "Environment/Lesson Number/"
"""Stat key prefix (ML-Agents'): the parameter's lesson, 0-based, in every summary."""


class Curriculum:
    """The lessons of a run's ``environment_parameters`` (see the module).

    :param restore: start each parameter at the lesson ``status`` recorded (``--resume``).
    :param frozen: lessons never change (``--inference``).
    """

    def __init__(
        self,
        parameters: Mapping[str, EnvironmentParameter],
        *,
        bus: Bus,
        status: TrainingStatus,
        world: World,
        restore: bool,
        frozen: bool = False,
    ) -> None:
        self.parameters = dict(parameters)
        self.bus = bus
        self.status = status
        self.world = world
        self.frozen = frozen
        self.lessons: dict[str, int] = {}
        """Each parameter's current lesson (0-based)."""
        self._smoothed = dict.fromkeys(self.parameters, 0.0)
        self._elo: dict[str, float] = {}
        """Each self-playing behavior's latest ELO rating."""
        self._envs: list[Any] = []
        self._followers: list[Callable[[], None]] = []
        sizes: dict[str, int] = {}
        for name, parameter in self.parameters.items():
            self.lessons[name] = self._first_lesson(name, parameter, restore)
            status.set_lesson_number(name, self.lessons[name])
            for criteria in _criteria(parameter):
                size = max(1, criteria.min_lesson_length)
                sizes[criteria.behavior] = max(sizes.get(criteria.behavior, 1), size)
            if any(criteria.require_reset for criteria in _criteria(parameter)):
                logger.warning(
                    "environment_parameters.%s: require_reset is accepted but evtrain does "
                    "not cut episodes short: a new lesson applies from each environment's "
                    "next episode",
                    name,
                )
            last = parameter.curriculum[-1]
            if last.completion_criteria is not None:
                logger.warning(
                    "environment_parameters.%s: the completion_criteria of the last lesson "
                    "(%r) are ignored",
                    name,
                    last.name,
                )
        self._episodes = {behavior: deque[float](maxlen=n) for behavior, n in sizes.items()}

    @classmethod
    def of_run(
        cls, options: RunOptions, bus: Bus, status: TrainingStatus, world: World
    ) -> Curriculum | None:
        """The run's curriculum; ``None`` without ``environment_parameters``."""
        if not options.environment_parameters:
            return None
        cs = options.checkpoint_settings
        return cls(
            options.environment_parameters,
            bus=bus,
            status=status,
            world=world,
            restore=cs.resume or cs.inference,
            frozen=cs.inference,
        )

    def _first_lesson(self, name: str, parameter: EnvironmentParameter, restore: bool) -> int:
        recorded = self.status.lesson_number(name) if restore else None
        if recorded is None:
            return 0
        last = len(parameter.curriculum) - 1
        if not 0 <= recorded <= last:
            logger.warning(
                "environment_parameters.%s: training_status.json records lesson %d, but the "
                "curriculum has lessons 0 to %d: resuming in lesson %d",
                name,
                recorded,
                last,
                min(max(recorded, 0), last),
            )
        number = min(max(recorded, 0), last)
        logger.info("%s resumes in lesson %d (%r)", name, number, parameter.curriculum[number].name)
        return number

    # -- what the run builds with it -----------------------------------------------------------

    def samplers(self) -> dict[str, Sampler]:
        """The current lesson's value of each parameter."""
        return {
            name: parameter.curriculum[self.lessons[name]].value
            for name, parameter in self.parameters.items()
        }

    def wrapper(self) -> Callable[[Any], Any]:
        """Wraps one sub-environment, or one copy of a PettingZoo environment (picklable: async
        workers build their own)."""
        return functools.partial(with_parameters, samplers=self.samplers())

    def attach(self, envs: Any, env_id: str) -> None:
        """Follow ``envs`` (built with :meth:`wrapper`): lesson changes reach them.  A parameter
        the environment has no attribute for is warned about once: it is passed to ``reset``
        in ``options`` only, which most environments ignore."""
        self._envs.append(envs)
        if len(self._envs) > 1:
            return
        targets = envs.call("environment_parameter_targets")[0]
        env_class = envs.call("environment_class")[0]
        for name, target in targets.items():
            if target == "option":
                logger.warning(
                    "environment_parameters.%s: %s (%s) has no attribute %r: its value is "
                    "passed to reset() as options[%r] only (ignored unless the environment "
                    "reads it)",
                    name,
                    env_id,
                    env_class,
                    name,
                    name,
                )

    def follow(self, changed: Callable[[], None]) -> None:
        """Call ``changed`` after the lessons changed (once for all that changed together):
        a Unity run's builds get every parameter's new value then."""
        self._followers.append(changed)

    def reporter(self, bus: Bus, behavior: str, max_steps: int) -> StatsReporter:
        """The stats reporter of ``behavior``'s trainer: it feeds this curriculum."""
        return _CurriculumReporter(bus, behavior, self, max_steps)

    # -- lesson progression --------------------------------------------------------------------

    def episode_ended(self, behavior: str, reward: float) -> None:
        """``behavior`` finished an episode with return ``reward``."""
        episodes = self._episodes.get(behavior)
        if episodes is not None:
            episodes.appendleft(reward)

    def elo_changed(self, behavior: str, elo: float) -> None:
        """``behavior``'s self-play ELO rating is now ``elo``."""
        self._elo[behavior] = elo

    def summarised(self, behavior: str, step: int, max_steps: int) -> None:
        """``behavior`` wrote a summary at step ``step``: move the lessons that are done."""
        if self.frozen:
            return
        due = [
            name
            for name, parameter in self.parameters.items()
            if (criteria := self._criteria_now(name, parameter)) is not None
            and criteria.behavior == behavior
        ]
        if not due:
            return
        moving = [name for name in due if self._done(name, behavior, step / max_steps)]
        if self.world.size > 1:  # rank 0's episodes decide; the ranks follow
            moving = self.world.broadcast_object(moving)
            self._smoothed = self.world.broadcast_object(self._smoothed)
        for name in moving:
            self._advance(name, behavior, step)
        if moving:
            for episodes in self._episodes.values():
                episodes.clear()
            for changed in self._followers:
                changed()

    def _criteria_now(
        self, name: str, parameter: EnvironmentParameter
    ) -> CompletionCriteria | None:
        number = self.lessons[name]
        if number == len(parameter.curriculum) - 1:
            return None
        return parameter.curriculum[number].completion_criteria

    def _done(self, name: str, behavior: str, progress: float) -> bool:
        criteria = self._criteria_now(name, self.parameters[name])
        assert criteria is not None  # only due parameters get here
        episodes = self._episodes[behavior]
        if len(episodes) < criteria.min_lesson_length:
            return False
        if criteria.measure == "progress":
            return progress > criteria.threshold
        if criteria.measure == "Elo":
            elo = self._elo.get(behavior)
            return elo is not None and elo > criteria.threshold
        if not episodes:
            return False
        measure = sum(episodes) / len(episodes)
        if criteria.signal_smoothing:
            measure = 0.25 * self._smoothed[name] + 0.75 * measure
            self._smoothed[name] = measure
        return measure > criteria.threshold

    def _advance(self, name: str, behavior: str, step: int) -> None:
        number = self.lessons[name] + 1
        self.lessons[name] = number
        self.status.set_lesson_number(name, number)
        lesson = self.parameters[name].curriculum[number]
        sampler = {name: lesson.value}
        for envs in self._envs:
            envs.call("set_environment_parameters", sampler)
        logger.info(
            "Parameter %r is now in lesson %d (%r) after %s's step %d: %s",
            name,
            number,
            lesson.name,
            behavior,
            step,
            lesson.value,
        )
        if self.bus.has_receivers(signals.lesson_changed, behavior):
            self.bus.emit(
                signals.lesson_changed,
                LessonChanged(
                    category=behavior,
                    parameter=name,
                    lesson_number=number,
                    lesson_name=lesson.name,
                    step=step,
                ),
            )


def _criteria(parameter: EnvironmentParameter) -> list[CompletionCriteria]:
    """The completion criteria that can end a lesson (the last lesson's never do)."""
    return [
        lesson.completion_criteria
        for lesson in parameter.curriculum[:-1]
        if lesson.completion_criteria is not None
    ]


class _CurriculumReporter(StatsReporter):
    """A behavior's reporter that tells the curriculum of its episodes and summaries, and
    reports the lessons in every summary."""

    def __init__(self, bus: Bus, category: str, curriculum: Curriculum, max_steps: int) -> None:
        super().__init__(bus, category)
        self.curriculum = curriculum
        self.max_steps = max_steps

    def add_stat(
        self,
        key: str,
        value: float,
        aggregation: StatsAggregationMethod = StatsAggregationMethod.AVERAGE,
    ) -> None:
        super().add_stat(key, value, aggregation)
        if key == CUMULATIVE_REWARD:
            self.curriculum.episode_ended(self.category, value)
        elif key == ELO:
            self.curriculum.elo_changed(self.category, value)

    def write_stats(
        self,
        step: int,
        *,
        merge: Callable[[Mapping[str, StatsSummary]], Mapping[str, StatsSummary]] | None = None,
    ) -> StatsEvent | None:
        for name, number in self.curriculum.lessons.items():
            self.set_stat(LESSON_NUMBER + name, float(number))
        # the trainer's step (the label is the last summary_freq multiple it crossed)
        steps = self.get_stats_summaries("Step")
        now = int(steps.mean) if steps.num else step
        event = super().write_stats(step, merge=merge)
        self.curriculum.summarised(self.category, now, self.max_steps)
        return event
