"""What a Unity run's side channels carry between the builds and the run, as ML-Agents'
``mlagents-learn`` carries it.

- **Statistics** a build records (``Academy.Instance.StatsRecorder.Add(key, value,
  aggregation)``) arrive on each instance's stats side channel; after every step of the shared
  environment they go into the statistics of every behavior still learning, with their
  aggregation method, through each behavior's stats reporter and so through the bus like every
  stat (ML-Agents' ``AgentManager.record_environment_stats``): ``AVERAGE``, ``SUM`` and
  ``HISTOGRAM`` values of every instance are added; a ``MOST_RECENT`` value is taken from
  instance 0 only, as ML-Agents takes it from worker 0 only, so that instances do not
  overwrite each other's.
- **Environment parameters** (``environment_parameters``): the current lesson's value of every
  parameter is sent to every instance on its environment parameters side channel, as
  ML-Agents' ``ParameterRandomizationSettings.apply`` sends it (a constant as a float; a
  ``uniform``, ``gaussian`` or ``multirangeuniform`` sampler with its seed, drawn from by the
  build), before the first reset, and again, all of them, after any lesson change
  (ML-Agents' ``set_env_parameters``), with the next step.  A sampler's ``seed`` of -1 becomes
  ``env_settings.seed`` + its index among the lessons of every parameter whose seed is -1, in
  the order the config gives them (ML-Agents' ``EnvironmentParameterManager``): every instance
  gets the same seed.  The lessons move as the :class:`~evtrain.run.parameters.curriculum.
  Curriculum` moves them for any run.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING

import attrs

from evtrain.config.environment_parameters import (
    Constant,
    EnvironmentParameter,
    Gaussian,
    MultiRangeUniform,
    Sampler,
    Uniform,
)
from evtrain.events.stats import StatsAggregationMethod
from evtrain.unity.side_channels import EnvironmentParametersChannel, SideChannel, StatsSideChannel

if TYPE_CHECKING:
    from evtrain.bus.reporter import StatsReporter
    from evtrain.config.options import RunOptions
    from evtrain.run.environments.unity_builds import UnityBuilds
    from evtrain.run.parameters.curriculum import Curriculum


def queue_samplers(channel: EnvironmentParametersChannel, samplers: Mapping[str, Sampler]) -> None:
    """Queue each parameter's sampler on ``channel``, as ML-Agents' ``apply`` sends it."""
    for key, sampler in samplers.items():
        if isinstance(sampler, Constant):
            channel.set_float_parameter(key, sampler.value)
        elif isinstance(sampler, Uniform):
            channel.set_uniform_sampler_parameters(
                key, sampler.min_value, sampler.max_value, sampler.seed
            )
        elif isinstance(sampler, Gaussian):
            channel.set_gaussian_sampler_parameters(key, sampler.mean, sampler.st_dev, sampler.seed)
        elif isinstance(sampler, MultiRangeUniform):
            intervals = [(low, high) for low, high in sampler.intervals]
            channel.set_multirangeuniform_sampler_parameters(key, intervals, sampler.seed)
        else:
            raise TypeError(f"environment_parameters.{key}: no Unity message for {sampler!r}")


def seeded(
    parameters: Mapping[str, EnvironmentParameter], run_seed: int
) -> dict[str, list[Sampler]]:
    """Each parameter's lesson values, a seed of -1 replaced as ML-Agents replaces it (see
    the module)."""
    offset = 0
    values: dict[str, list[Sampler]] = {}
    for name, parameter in parameters.items():
        values[name] = []
        for lesson in parameter.curriculum:
            value = lesson.value
            if value.seed == -1:
                value = attrs.evolve(value, seed=run_seed + offset)
                offset += 1
            values[name].append(value)
    return values


def record_environment_stats(
    channels: Sequence[Mapping[str, SideChannel]], reporters: Iterable[StatsReporter]
) -> None:
    """Empty every instance's stats side channel into every reporter (see the module)."""
    received = []
    for worker_id, instance in enumerate(channels):
        stats = instance["stats"]
        assert isinstance(stats, StatsSideChannel)  # side_channels() puts it there
        for key, values in stats.get_and_reset_stats().items():
            for value, method in values:
                aggregation = StatsAggregationMethod(method.value)
                if aggregation is not StatsAggregationMethod.MOST_RECENT or worker_id == 0:
                    received.append((key, value, aggregation))
    if not received:
        return
    for reporter in reporters:
        for key, value, aggregation in received:
            reporter.add_stat(key, value, aggregation)


class BuildChannels:
    """A Unity run's environment, made by :meth:`make`, and what its side channels carry (see
    the module).

    :param curriculum: the run's ``environment_parameters``, if any.
    :param interrupted: the interrupt that asked the run to stop, if any.
    """

    def __init__(
        self,
        options: RunOptions,
        curriculum: Curriculum | None,
        interrupted: Callable[[], str | None],
    ) -> None:
        self.options = options
        self.curriculum = curriculum
        self.interrupted = interrupted
        self.env: UnityBuilds | None = None
        """The builds, once made."""
        parameters = {} if curriculum is None else curriculum.parameters
        self._values = seeded(parameters, options.env_settings.seed)

    def samplers(self) -> dict[str, Sampler]:
        """Each parameter's value in its current lesson, seeded."""
        if self.curriculum is None:
            return {}
        return {name: self._values[name][n] for name, n in self.curriculum.lessons.items()}

    def make(self) -> UnityBuilds:
        """Start and connect the builds, every parameter sent before the first reset."""
        from evtrain.run.environments.unity_builds import make_unity_env

        options = self.options
        self.env = make_unity_env(
            options.env_settings,
            options.engine_settings,
            options.behaviors,
            options.checkpoint_settings.run_logs_dir,
            self.interrupted,
            parameters=self.queue_parameters,
        )
        if self.curriculum is not None:
            self.curriculum.follow(self.lessons_changed)
        return self.env

    def queue_parameters(self, channel: EnvironmentParametersChannel) -> None:
        """Queue every parameter's current value on one instance's ``channel`` (an instance
        started again needs them too, as ML-Agents resends them to a restarted worker)."""
        queue_samplers(channel, self.samplers())

    def lessons_changed(self) -> None:
        """Send every parameter's current value to every instance, with the next step."""
        assert self.env is not None  # followed once made
        for instance in self.env.channels:
            channel = instance["parameters"]
            assert isinstance(channel, EnvironmentParametersChannel)
            self.queue_parameters(channel)

    def record_stats(self, reporters: Iterable[StatsReporter]) -> None:
        """After a step: the statistics the builds sent, into every behavior's ``reporters``."""
        if self.env is not None:
            record_environment_stats(self.env.channels, reporters)
