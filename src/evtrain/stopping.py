"""Subscribers that stop a run early: :class:`StopOnReward` (a stat reached a threshold, like
Stable-Baselines3's ``StopTrainingOnRewardThreshold``) and :class:`StopOnPlateau` (a stat
stopped improving, e.g. over the evaluations).  ``behaviors.<name>.stop`` in the YAML connects
them (:mod:`evtrain.run.stops`); in Python, ``StopOnReward(475.0).connect(bus)``.

Both watch ``stats`` events (the value of a summary period: the stat's aggregated value, for
``Environment/Cumulative Reward`` the mean return of the episodes the period finished) and
``evaluation`` events (``Evaluation/Mean Return``, ``Evaluation/Mean Episode Length``), and
stop the run the way any subscriber may: by returning :class:`~evtrain.events.payloads.StopRun`
from their handler, which the bus turns into ``Bus.request_stop(reason, by=<subscriber's
name>)``.  The run then stops at the end of the update under way, saves and exports as at
``max_steps``, and finishes with status ``stopped`` and the reason, which names the behavior,
the stat, its value and the step.
"""

from __future__ import annotations

import abc
import math

import attrs

from evtrain.bus import ANY, Bus
from evtrain.bus.subscription import SubscriptionHandle
from evtrain.events import signals
from evtrain.events.payloads import EVALUATION_MEAN_RETURN, EvaluationEvent, StatsEvent, StopRun
from evtrain.events.stats import CUMULATIVE_REWARD


def _observed(event: StatsEvent | EvaluationEvent, stat: str) -> float | None:
    """The value of ``stat`` an event carries (its summary's aggregated value), if any."""
    values = event.values if isinstance(event, StatsEvent) else event.stats()
    summary = values.get(stat)
    if summary is None or summary.num == 0:
        return None
    value = summary.aggregated_value
    return value if math.isfinite(value) else None


def _what(event: StatsEvent | EvaluationEvent) -> str:
    return "summaries" if isinstance(event, StatsEvent) else "evaluations"


class _Watcher(abc.ABC):
    """A subscriber of one stat of one behavior (or of every behavior)."""

    kind = ""
    """Names the subscriber: ``evtrain.stop.<kind>``."""

    def __init__(self, stat: str, behavior: str | None) -> None:
        self.stat = stat
        self.behavior = behavior

    @property
    def name(self) -> str:
        """The subscriber's name on the bus (and the ``by`` of its stop request)."""
        suffix = "" if self.behavior is None else f"[{self.behavior}]"
        return f"evtrain.stop.{self.kind}{suffix}"

    def connect(self, bus: Bus) -> SubscriptionHandle:
        """Subscribe to ``bus``'s ``stats`` and ``evaluation`` events (of :attr:`behavior`
        only, when set); returns the handle (``disconnect()`` ends it)."""
        sender = ANY if self.behavior is None else self.behavior
        return bus.connect((signals.stats, signals.evaluation), self, sender=sender, name=self.name)

    def __call__(self, event: StatsEvent | EvaluationEvent) -> StopRun | None:
        value = _observed(event, self.stat)
        return None if value is None else self.observe(event, value)

    @abc.abstractmethod
    def observe(self, event: StatsEvent | EvaluationEvent, value: float) -> StopRun | None:
        """``value`` of :attr:`stat` arrived with ``event``: the stop request, if it stops."""


class StopOnReward(_Watcher):
    """Stop once ``stat`` reaches ``threshold``.

    :param threshold: the value that stops the run (reached: ``>=``).
    :param stat: what is compared: a stats key (``Environment/Cumulative Reward``, a summary's
        mean return, by default) or ``Evaluation/Mean Return``.
    :param behavior: watch this behavior only; ``None``: any behavior reaching it stops the run.
    """

    kind = "reward"

    def __init__(
        self, threshold: float, stat: str = CUMULATIVE_REWARD, behavior: str | None = None
    ) -> None:
        super().__init__(stat, behavior)
        self.threshold = threshold

    def observe(self, event: StatsEvent | EvaluationEvent, value: float) -> StopRun | None:
        if value < self.threshold:
            return None
        return StopRun(
            f"{event.category}: {self.stat} reached {value:g} (stop.reward {self.threshold:g}) "
            f"at step {event.step}"
        )


@attrs.define
class _Best:
    """One behavior's best value so far, and the values since that did not beat it."""

    value: float
    step: int
    since: int = 0


class StopOnPlateau(_Watcher):
    """Stop after ``patience`` values of ``stat`` in a row that do not beat the best so far by
    more than ``min_delta``.

    :param patience: values in a row without improvement that stop the run (at least 1).
    :param min_delta: how much better than the best so far a value must be to count.
    :param behavior: watch this behavior only; ``None``: each behavior on its own, the first
        on a plateau stops the run.
    :param stat: ``Evaluation/Mean Return`` (one value per evaluation, the default) or a stats
        key (one value per summary period).
    :raises ValueError: ``patience`` below 1, or ``min_delta`` negative.
    """

    kind = "plateau"

    def __init__(
        self,
        patience: int,
        min_delta: float = 0.0,
        behavior: str | None = None,
        stat: str = EVALUATION_MEAN_RETURN,
    ) -> None:
        if patience < 1:
            raise ValueError(f"StopOnPlateau: patience must be at least 1, got {patience}")
        if not min_delta >= 0.0:
            raise ValueError(f"StopOnPlateau: min_delta must be 0 or more, got {min_delta}")
        super().__init__(stat, behavior)
        self.patience = patience
        self.min_delta = min_delta
        self._best: dict[str, _Best] = {}

    def observe(self, event: StatsEvent | EvaluationEvent, value: float) -> StopRun | None:
        best = self._best.get(event.category)
        if best is None or value > best.value + self.min_delta:
            self._best[event.category] = _Best(value, event.step)
            return None
        best.since += 1
        if best.since < self.patience:
            return None
        return StopRun(
            f"{event.category}: {self.stat} did not improve on its best {best.value:g} (step "
            f"{best.step}) by more than {self.min_delta:g} in {best.since} {_what(event)} "
            f"(stop.plateau patience {self.patience}); the last was {value:g} at step "
            f"{event.step}"
        )
