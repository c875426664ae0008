"""A trial's values, from the bus: the subscriber that reports them to Optuna and stops the run
when the pruner says so.

Each ``stats`` event of the objective's behavior that holds the objective's stat is one value
(its mean over the summary period) at the event's step; so is each ``evaluation`` event whose
stats hold it (``Evaluation/Mean Return`` with ``evaluation:`` settings).  At each value,
``trial.report`` gets the objective's aggregate so far (the mean of the last ``k`` values for
``mean_last_k``, the best so far for ``best``): the pruner compares trials by what they are
scored by, and a noisy summary (Pendulum's 5 episodes a period) prunes no trial on its own
when the score smooths it.  When ``trial.should_prune()`` says so, the subscriber calls
:meth:`~evtrain.Bus.request_stop`, and the run ends at its next turn boundary with its normal
final save and export (status ``stopped``).  It runs on the bus's delivery thread, never on
the training thread: the run does not wait for Optuna's storage.
"""

from __future__ import annotations

import logging
import math
import statistics
import threading
from collections.abc import Mapping
from typing import TYPE_CHECKING

from evtrain.bus import Bus
from evtrain.bus.subscription import SubscriptionHandle
from evtrain.config.sweep import Objective
from evtrain.events import signals
from evtrain.events.payloads import EvaluationEvent, StatsEvent
from evtrain.events.stats import StatsSummary

if TYPE_CHECKING:
    import optuna

logger = logging.getLogger("evtrain")

SUBSCRIBER = "evtrain.sweep"
"""The subscriber's name on the bus (and who asks to stop, in the log)."""


class TrialReporter:
    """Reports one trial's values to Optuna; asks the run to stop once the pruner prunes it.

    :param pruner: the pruner's name for the stop reason (``median``), or ``None`` (no
        pruner: every trial runs to its end).
    """

    def __init__(
        self, trial: optuna.Trial, objective: Objective, behavior: str, pruner: str | None
    ) -> None:
        self.trial = trial
        self.objective = objective
        self.behavior = behavior
        self.pruner = pruner
        self.values: list[tuple[int, float]] = []
        """(step, value) of each value reported, in step order."""
        self.pruned_at: int | None = None
        """The step at which the pruner pruned the trial, if it did."""
        self._bus: Bus | None = None
        self._lock = threading.Lock()  # the stats and evaluation subscribers' threads

    def connect(self, bus: Bus) -> list[SubscriptionHandle]:
        """Subscribe to ``bus``'s ``stats`` and ``evaluation`` events; the handles."""
        self._bus = bus
        return [
            bus.connect(signals.stats, self.on_stats, name=SUBSCRIBER),
            bus.connect(signals.evaluation, self.on_evaluation, name=SUBSCRIBER + ".evaluation"),
        ]

    def on_stats(self, event: StatsEvent) -> None:
        if event.category == self.behavior:
            self._take(event.step, event.values)

    def on_evaluation(self, event: EvaluationEvent) -> None:
        if event.category == self.behavior:
            self._take(event.step, event.stats())

    def _take(self, step: int, values: Mapping[str, StatsSummary]) -> None:
        summary = values.get(self.objective.stat)
        if summary is None or not summary.num or not math.isfinite(summary.mean):
            return
        with self._lock:
            if self.values and step <= self.values[-1][0]:
                return  # one value per step: Optuna keeps the first and warns about the rest
            self.values.append((step, summary.mean))
            reported = self.score()
            assert reported is not None  # a value was just added
            self.trial.report(reported, step)
            if self.pruner is None or self.pruned_at is not None:
                return
            if self.trial.should_prune():
                self.pruned_at = step
                self._stop(step, reported)

    def _stop(self, step: int, value: float) -> None:
        reason = (
            f"pruned by optuna's {self.pruner} pruner at step {step:,} "
            f"({self.objective.stat} {value:.4g})"
        )
        assert self._bus is not None
        self._bus.request_stop(reason, by=SUBSCRIBER)

    def score(self) -> float | None:
        """The trial's value by the objective's ``aggregate``; ``None`` when none was seen."""
        if not self.values:
            return None
        values = [value for _, value in self.values]
        if self.objective.aggregate == "best":
            return max(values) if self.objective.direction == "maximize" else min(values)
        if self.objective.aggregate == "mean_last_k":
            return statistics.fmean(values[-self.objective.k :])
        return values[-1]
