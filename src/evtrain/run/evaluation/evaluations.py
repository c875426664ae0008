"""A run's evaluations (``behaviors.<name>.evaluation``): when they start, what they emit, and
the best model they keep.

After each turn of a behavior the runner calls :meth:`Evaluations.after_turn`: an evaluation
that has finished is emitted as ``evaluation`` (an :class:`~evtrain.EvaluationEvent` labelled
with the step of its policy), and one is started when the behavior's step reaches the next
multiple of ``every``.  Starting one takes, on the training thread, a snapshot of the
deterministic policy (its observation normaliser inside, as of that step: never stale) and,
with ``best_model``, of the trainer's state; the
:class:`~evtrain.run.evaluation.evaluator.Evaluator` plays the episodes in its worker process
meanwhile.  At most one evaluation per behavior is in flight: if the next is due before the last has
finished, training waits for it (and says so once), so that every multiple of ``every`` is
evaluated; a first interrupt (Ctrl-C, SIGTERM, SIGHUP) ends that wait, and the run stops without the
evaluation.

An evaluation that fails (its worker raised, was killed, or outlasted ``evaluation.timeout``)
is logged as a warning and counted in the stat ``Evaluation/Failed Evaluations`` of the
behavior's next summary (one after the last summary is in the log only); a new worker plays
the next evaluation, and training goes on.  A video that was not written is a warning naming
its file and a count in ``Evaluation/Failed Videos``; its evaluation still counts.

When an evaluation's ``best_by`` stat (its mean return by default; a PettingZoo behavior's
``<label>/Win Rate``, ...) beats the best so far, the snapshots of its step go to the run's
background saver (:meth:`~evtrain.run.checkpoints.checkpoint.CheckpointManager.save_best`),
which writes the best model and emits ``save``/``export`` with ``best=True``.  A value that is
not finite (a NaN reward) is never the best.  ``--resume`` reads ``best.json`` back, so a
resumed run replaces the best only with a better one (of the same stat: a record of another
starts the best afresh).

A PettingZoo behavior is evaluated against ``opponents`` (required there, refused for a
Gymnasium environment), each in every seat (:mod:`evtrain.run.evaluation.matches`); the
checkpoint opponents are loaded and the ONNX ones looked for when the run starts
(:mod:`evtrain.run.evaluation.fixed_opponents`), the scripted ones imported by the worker.

Only rank 0 evaluates (the other ranks train on); an ``--inference`` run does not.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import attrs

from evtrain.errors import ConfigError
from evtrain.evaluation.opponents import MEAN_RETURN
from evtrain.evaluation.video import media_type_of
from evtrain.events import signals
from evtrain.events.payloads import ArtifactEvent, EvaluationEvent
from evtrain.events.stats import StatsAggregationMethod
from evtrain.run.checkpoints.save_schedule import SaveSchedule, example_obs
from evtrain.run.checkpoints.saver import snapshot
from evtrain.run.evaluation.best_model import (
    BestRecord,
    best_checkpoint_path,
    best_model_path,
    best_record_path,
    recover_best,
    save_best,
)
from evtrain.run.evaluation.evaluator import Episodes, EvaluationFailed, Evaluator
from evtrain.run.evaluation.fixed_opponents import fixed_opponents
from evtrain.timers import hierarchical_timer

if TYPE_CHECKING:
    import torch

    from evtrain.bus import Bus
    from evtrain.config.options import RunOptions
    from evtrain.evaluation.settings import EvaluationSettings
    from evtrain.run.checkpoints.checkpoint import CheckpointManager
    from evtrain.trainers.base import Trainer

logger = logging.getLogger("evtrain")

_WAIT_NOTED_S = 0.05
"""Training held back longer than this by an evaluation still running is logged (once)."""

FAILED_EVALUATIONS = "Evaluation/Failed Evaluations"
"""The stat counting a behavior's evaluations that failed (in its next summary)."""

FAILED_VIDEOS = "Evaluation/Failed Videos"
"""The stat counting a behavior's videos that were not written (in its next summary)."""


@attrs.define
class _Pending:
    """What an evaluation in flight was started with, kept until its result is known."""

    step: int
    policy: torch.nn.Module
    state: dict[str, Any] | None
    example: Any


class Evaluations:
    """The evaluations of a run's behaviors (those with ``evaluation`` settings)."""

    def __init__(
        self,
        options: RunOptions,
        trainers: Mapping[str, Trainer],
        managers: Mapping[str, CheckpointManager],
        saves: SaveSchedule,
        bus: Bus,
    ) -> None:
        self.options = options
        self.trainers = trainers
        self.managers = managers
        self.saves = saves
        self.bus = bus
        self.evaluators: dict[str, Evaluator] = {}
        self.next_due: dict[str, int] = {}
        self.pending: dict[str, _Pending] = {}
        self.best: dict[str, BestRecord | None] = {}
        """The best evaluation so far per behavior (read from ``best.json`` on ``--resume``)."""
        self.fixed: dict[str, dict[str, torch.nn.Module]] = {}
        """Per behavior: its checkpoint opponents' policies, by label."""
        self.waited: dict[str, float] = {}
        """Seconds training waited for an evaluation still running, per behavior."""
        self.begun: dict[str, int] = {}
        """Evaluations begun per behavior (which are recorded: ``video.every``)."""
        self.stop_requested: Callable[[], bool] = lambda: False
        """Whether an interrupt asked the run to stop: it ends a wait for an evaluation."""

    def start(self, *, rank: int) -> None:
        """Build each evaluated behavior's evaluator (rank 0, training only): its first
        evaluation is due at the next multiple of ``every`` after the step it starts at."""
        cs = self.options.checkpoint_settings
        if rank != 0 or cs.inference:
            return
        for name, trainer in self.trainers.items():
            settings = trainer.settings.evaluation
            if settings is None:
                continue
            _check_opponents(name, trainer, settings, self.options.env_settings.env_id)
            self.fixed[name] = fixed_opponents(name, trainer, settings.opponent_list())
            self.evaluators[name] = self._evaluator(name, settings)
            self.begun[name] = 0
            self.next_due[name] = (trainer.step // settings.every + 1) * settings.every
            recover_best(self.managers[name])  # a best model's unit a killed save left
            record = best_record_path(self.managers[name])
            self.best[name] = _same_stat(BestRecord.read(record), settings) if cs.resume else None

    def after_turn(self, name: str, trainer: Trainer) -> None:
        """After a turn of ``name``: emit an evaluation that has finished; start one if due."""
        evaluator = self.evaluators.get(name)
        if evaluator is None:
            return
        self._collect(name, wait=False)
        if trainer.step < self.next_due[name]:
            return
        if evaluator.running is not None:
            started = time.monotonic()
            self._collect(name, wait=True)
            self._note_wait(name, trainer.step, time.monotonic() - started)
            if self.evaluators[name].running is not None:  # a signal asked the run to stop
                return
        every = self._begin(name, trainer)
        self.next_due[name] = (trainer.step // every + 1) * every

    def finish(self) -> None:
        """Training is over: wait for each evaluation in flight and emit it (before the final
        save, so its best model is written too)."""
        for name in self.evaluators:
            self._collect(name, wait=True)

    def close(self) -> None:
        """Drop the evaluations still in flight (an interrupted run), close the evaluators."""
        for evaluator in self.evaluators.values():
            evaluator.close()
        self.pending.clear()

    def _begin(self, name: str, trainer: Trainer) -> int:
        """Start an evaluation of ``name`` at its step; returns its ``every``."""
        settings = trainer.settings.evaluation
        assert settings is not None
        trainer.wait_for_update()  # threaded: the policy of every update of the steps so far
        with hierarchical_timer("evaluation_snapshot"):
            policy = snapshot(trainer.policy_module())
            state = snapshot(trainer.state_dict()) if settings.best_model else None
            example = example_obs(trainer.envs.single_observation_space, trainer.next_obs)
            self.pending[name] = _Pending(trainer.step, policy, state, example)
            evaluation, self.begun[name] = self.begun[name], self.begun[name] + 1
            try:
                self.evaluators[name].start(trainer.step, policy, evaluation)
            except EvaluationFailed as error:  # the worker ended since the last evaluation
                self._failed(name, trainer.step, error)
        return settings.every

    def _evaluator(self, name: str, settings: EvaluationSettings) -> Evaluator:
        return Evaluator(
            name,
            settings,
            self.options.env_settings,
            self.options.behaviors,
            videos=self.managers[name].folder / "videos",
            fixed=self.fixed.get(name),
        )

    def _failed(self, name: str, step: int, error: EvaluationFailed) -> None:
        """The evaluation of ``name`` at ``step`` failed: say so, count it, and replace the
        worker for the next one."""
        self.pending.pop(name, None)
        logger.warning(
            "%s: the evaluation at step %d failed and is skipped (%s); training goes on, and a "
            "new evaluation worker plays the next one",
            name,
            step,
            error,
        )
        trainer = self.trainers[name]
        trainer.reporter.add_stat(FAILED_EVALUATIONS, 1.0, StatsAggregationMethod.SUM)
        self.evaluators[name].close()
        settings = trainer.settings.evaluation
        assert settings is not None
        self.evaluators[name] = self._evaluator(name, settings)

    def _collect(self, name: str, *, wait: bool) -> None:
        try:
            episodes = self.evaluators[name].result(wait=wait, stop=self.stop_requested)
        except EvaluationFailed as error:
            self._failed(name, self.pending[name].step, error)
            return
        if episodes is None:
            return
        pending = self.pending.pop(name)
        event = EvaluationEvent(
            category=name,
            step=episodes.step,
            returns=episodes.returns,
            lengths=episodes.lengths,
            opponent_stats=episodes.opponent_stats,
        )
        self.bus.emit(signals.evaluation, event)
        for number, path in episodes.videos:
            artifact = ArtifactEvent(
                category=name,
                step=episodes.step,
                path=path,
                kind="video",
                media_type=media_type_of(path),
                description=f"evaluation episode {number} at step {episodes.step}",
            )
            self.bus.emit(signals.artifact, artifact)
        for failure in episodes.video_failures:
            logger.warning(
                "%s: a video of the evaluation at step %d was not written: %s; the evaluation "
                "counts, and the run goes on",
                name,
                episodes.step,
                failure,
            )
            reporter = self.trainers[name].reporter
            reporter.add_stat(FAILED_VIDEOS, 1.0, StatsAggregationMethod.SUM)
        settings = self.trainers[name].settings.evaluation
        assert settings is not None
        value = _followed(event, settings.best_by)
        if pending.state is not None and value is not None:
            best = self.best.get(name)
            lower = settings.lower_is_better
            if best is None or (value < best.value if lower else value > best.value):
                self._save_best(name, pending, episodes, event.mean_return, value)

    def _save_best(
        self, name: str, pending: _Pending, episodes: Episodes, mean: float, value: float
    ) -> None:
        manager = self.managers[name]
        settings = self.trainers[name].settings.evaluation
        assert settings is not None
        record = BestRecord(
            step=pending.step,
            mean_return=mean,
            episodes=len(episodes.returns),
            checkpoint=str(best_checkpoint_path(manager)),
            model=str(best_model_path(manager)),
            best_by=settings.best_by,
            value=value,
        )
        self.best[name] = record
        state, policy, example = pending.state, pending.policy, pending.example
        assert state is not None
        self.saves.saver.submit(
            f"best model of {name} at {record.step}",
            lambda: save_best(manager, record, state, policy, example),
        )

    def _note_wait(self, name: str, step: int, waited: float) -> None:
        noted = self.waited.get(name, 0.0) > _WAIT_NOTED_S
        self.waited[name] = self.waited.get(name, 0.0) + waited
        if not noted and self.waited[name] > _WAIT_NOTED_S:
            logger.warning(
                "%s: the evaluation before step %d was still running when the next was due; "
                "training waited %.2f s for it (raise behaviors.%s.evaluation.every or lower "
                "its episodes to avoid waiting)",
                name,
                step,
                waited,
                name,
            )


def _followed(event: EvaluationEvent, best_by: str) -> float | None:
    """The value of ``best_by`` in ``event``, if it has a finite one (a NaN reward's is not:
    never the best)."""
    value = event.mean_return if best_by == MEAN_RETURN else event.opponent_stats.get(best_by)
    return value if value is not None and math.isfinite(value) else None


def _same_stat(record: BestRecord | None, settings: EvaluationSettings) -> BestRecord | None:
    """A resumed run's best, if it followed the stat ``best_by`` names (else the best starts
    afresh, and says so)."""
    if record is None or record.best_by == settings.best_by:
        return record
    logger.warning(
        "The best model so far followed %r, and evaluation.best_by is now %r: the best model "
        "starts afresh",
        record.best_by,
        settings.best_by,
    )
    return None


def _check_opponents(
    name: str, trainer: Trainer, settings: EvaluationSettings, env_id: str
) -> None:
    """A PettingZoo behavior is evaluated against ``opponents`` (without videos), a Gymnasium
    one without them (a :class:`ConfigError` otherwise)."""
    from evtrain.multiagent.slots import AgentSlots

    where = f"behaviors.{name}.evaluation.opponents"
    if isinstance(trainer.envs, AgentSlots) and not settings.opponents:
        raise ConfigError(
            [
                f"{where}: required for a PettingZoo environment ({env_id!r}): list who the "
                "behavior plays against, e.g. opponents: [random, latest] (random, latest, "
                "module:function, a .onnx file or a checkpoint; docs/evaluation.md)"
            ]
        )
    if isinstance(trainer.envs, AgentSlots) and settings.video is not None:
        raise ConfigError(
            [
                f"behaviors.{name}.evaluation.video: not supported for a PettingZoo environment "
                f"({env_id!r}) yet; remove video"
            ]
        )
    if not isinstance(trainer.envs, AgentSlots) and settings.opponents:
        raise ConfigError(
            [
                f"{where}: {env_id!r} is a Gymnasium environment, with one agent: there is no "
                "seat for an opponent; remove opponents"
            ]
        )
