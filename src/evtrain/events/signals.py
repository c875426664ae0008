"""The signals of a training run, in lifecycle order.

Each signal is a blinker :class:`~blinker.NamedSignal` in evtrain's own namespace, typed by the
payload class it carries: ``Bus.emit`` refuses any other payload with ``TypeError``.  The sender
of an event is its payload's ``category`` (the behavior name) where it has one, so
``bus.connect(stats, fn, sender="CartPole")`` hears only that behavior.

================== ========================== ===================================================
signal             payload                    emitted by / when
================== ========================== ===================================================
run_started        :class:`RunStarted`        the runner, once, before the first step
hyperparameters    :class:`PropertyEvent`     each trainer at start
stats              :class:`StatsEvent`        each trainer every ``summary_freq`` steps
lesson_changed     :class:`LessonChanged`     the curriculum, after a summary that ends a lesson
evaluation         :class:`EvaluationEvent`   the evaluator, after each evaluation's episodes
artifact           :class:`ArtifactEvent`     after a file made in the run (a video) is durable
save               :class:`SaveEvent`         after a checkpoint file is durable
export             :class:`ExportEvent`       after an exported model file is durable
run_finished       :class:`RunFinished`       the runner, once, last
subscriber_failed  :class:`SubscriberFailed`  the bus, when it isolates a subscriber's error
subscriber_stalled :class:`SubscriberStalled` the bus, when a call outlives its ``stall_timeout``
                                              or ``emit`` gives up on a full inbox
                                              (``block_timeout``)
================== ========================== ===================================================
"""

from __future__ import annotations

from typing import Any, Generic, TypeVar

import blinker

from evtrain.events.payloads import (
    ArtifactEvent,
    EvaluationEvent,
    ExportEvent,
    LessonChanged,
    PropertyEvent,
    RunFinished,
    RunStarted,
    SaveEvent,
    StatsEvent,
    SubscriberFailed,
    SubscriberStalled,
)

P = TypeVar("P")

namespace = blinker.Namespace()
"""evtrain's blinker namespace; holds every signal below by name."""


class EventSignal(blinker.NamedSignal, Generic[P]):
    """A named blinker signal that carries exactly one payload type."""

    def __init__(self, name: str, payload_type: type[P], doc: str) -> None:
        super().__init__(name, doc)
        self.payload_type: type[P] = payload_type
        """The class every payload emitted on this signal must be an instance of."""

    def sender_of(self, payload: P) -> Any:
        """The blinker sender of ``payload``: its ``category`` if it has one, else ``ANY``."""
        return getattr(payload, "category", blinker.ANY)

    def __repr__(self) -> str:
        return f"<EventSignal {self.name!r} ({self.payload_type.__name__})>"


def _define(name: str, payload_type: type[P], doc: str) -> EventSignal[P]:
    signal = EventSignal(name, payload_type, doc)
    namespace[name] = signal
    return signal


run_started: EventSignal[RunStarted] = _define(
    "run_started",
    RunStarted,
    "Emitted once by the runner before the first environment step, with the run id, the "
    "resolved options and the process's place in a distributed job.",
)
hyperparameters: EventSignal[PropertyEvent] = _define(
    "hyperparameters",
    PropertyEvent,
    "Emitted by each trainer when it starts, with its hyperparameters as a nested mapping "
    "(ML-Agents' ``add_property(HYPERPARAMETERS, ...)``).",
)
stats: EventSignal[StatsEvent] = _define(
    "stats",
    StatsEvent,
    "Emitted by a trainer's StatsReporter every ``summary_freq`` steps, one event per behavior, "
    "labelled with the interval boundary step.",
)
lesson_changed: EventSignal[LessonChanged] = _define(
    "lesson_changed",
    LessonChanged,
    "Emitted by the run's curriculum (``environment_parameters``) on every rank, right after "
    "the summary of the behavior whose completion criteria it met, once per parameter whose "
    "lesson changed; the sender is that behavior.",
)
evaluation: EventSignal[EvaluationEvent] = _define(
    "evaluation",
    EvaluationEvent,
    "Emitted once per evaluation of a behavior (``evaluation:`` settings), with each episode's "
    "return and length; writers record it as the ``Evaluation/...`` stats of its step.",
)
artifact: EventSignal[ArtifactEvent] = _define(
    "artifact",
    ArtifactEvent,
    "Emitted after a file made during the run (an evaluation episode's video) is durable on "
    "disk, on the rank that wrote it.",
)
save: EventSignal[SaveEvent] = _define(
    "save",
    SaveEvent,
    "Emitted after a checkpoint file is durable on disk (atomic write finished), on the rank "
    "that writes checkpoints.",
)
export: EventSignal[ExportEvent] = _define(
    "export",
    ExportEvent,
    "Emitted after an exported model file (ONNX) is durable on disk and loads.",
)
run_finished: EventSignal[RunFinished] = _define(
    "run_finished",
    RunFinished,
    "Emitted once by the runner, last, with how the run ended: completed, interrupted or failed.",
)
subscriber_failed: EventSignal[SubscriberFailed] = _define(
    "subscriber_failed",
    SubscriberFailed,
    "Emitted by the bus when a subscriber raised and was isolated. Failures while handling this "
    "signal are logged and counted but not emitted again.",
)
subscriber_stalled: EventSignal[SubscriberStalled] = _define(
    "subscriber_stalled",
    SubscriberStalled,
    "Emitted by the bus's watchdog, once per call, when a subscriber's call has run longer than "
    "its stall_timeout (a hung tracker); a spool subscriber's later events then wait in its "
    "journal. Stalls while handling this signal are not emitted again. Also emitted (with "
    "inbox_full=True) by emit, on the producer's thread, when it waited block_timeout on a "
    "subscriber's full block inbox: that event and later ones are dropped until the subscriber "
    "takes from its inbox again.",
)

ALL: tuple[EventSignal[Any], ...] = (
    run_started,
    hyperparameters,
    stats,
    lesson_changed,
    evaluation,
    artifact,
    save,
    export,
    run_finished,
    subscriber_failed,
    subscriber_stalled,
)
"""Every signal, in lifecycle order."""

WRITER_SIGNALS: tuple[EventSignal[Any], ...] = (
    run_started,
    hyperparameters,
    stats,
    evaluation,
    artifact,
    save,
    export,
    run_finished,
)
"""What ``Bus.add_writer`` delivers to a :class:`~evtrain.StatsWriter`: the run's lifecycle."""
