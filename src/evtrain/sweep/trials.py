"""One worker of a sweep: trials until the study has its ``--trials``, each a real run.

A trial's run folder is ``<results_dir>/<study>/trial-0007`` (its Optuna number), written as
any run's: ``configuration.yaml`` holds the trial's values.  The run is
:func:`evtrain.run.learn.learn` on a bus of the worker's, with a
:class:`~evtrain.sweep.objective.TrialReporter` connected; the writers and trackers of the
config record each trial as they record any run.

How a trial ends in the study: ``COMPLETE`` with its score; ``PRUNED`` when the pruner
stopped it before its ``max_steps`` (pruned at its last value, it ran to its end, and is
scored as one that was not); ``FAIL`` when the run raised, failed, or reported no value of
the objective's stat (the reason in the trial's ``evtrain.error``; the sweep goes on); ``FAIL`` with
``evtrain.interrupted`` when an interrupt stopped it (the worker then stops too), its values put
back in the study as a waiting trial (``evtrain.rerun_of``), which the next trial runs again.
"""

from __future__ import annotations

import logging
import os
import socket
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import attrs

from evtrain.config.sweep import SweepSettings
from evtrain.events.payloads import RunStatus
from evtrain.sweep.interrupt import SweepStop
from evtrain.sweep.objective import TrialReporter
from evtrain.sweep.space import trial_data
from evtrain.sweep.study import (
    ERROR,
    INTERRUPTED,
    RERUN_OF,
    RUN,
    STEPS,
    WORKER,
    draw,
    next_trial,
    open_study,
)

if TYPE_CHECKING:
    import optuna

    from evtrain.run.learn import LearnResult

logger = logging.getLogger("evtrain")


@attrs.frozen(kw_only=True)
class Sweep:
    """What every worker of one sweep knows."""

    data: Mapping[str, Any]
    """The config's plain data (the command line's overrides written over it)."""
    settings: SweepSettings
    behavior: str
    """The objective's behavior."""
    study: str
    """The study's name (its folder under the results folder)."""
    folder: Path
    """``<results_dir>/<study>``: the trials' run folders, ``best.yaml``."""
    storage: Path
    """The journal file."""
    trials: int
    """How many trials the study should have (``--trials``)."""
    digest: str
    """:func:`~evtrain.sweep.study.config_digest` of :attr:`data`."""


def study_of(sweep: Sweep, *, create: bool) -> optuna.Study:
    """The sweep's study.

    :param create: start the study (refused when it exists); else join or resume it.
    """
    return open_study(sweep.study, sweep.storage, sweep.settings, sweep.digest, create=create)


def run_worker(sweep: Sweep, study: optuna.Study, stop: SweepStop) -> bool:
    """Run trials of ``sweep`` until the study has enough; ``False`` if an interrupt stopped the
    worker (in a trial, or between two)."""
    while stop.requested is None and (
        (trial := next_trial(study, sweep.storage, sweep.trials)) is not None
    ):
        if not run_trial(sweep, study, trial, stop):
            return False
    return stop.requested is None


def run_trial(sweep: Sweep, study: optuna.Study, trial: optuna.Trial, stop: SweepStop) -> bool:
    """Train one trial and tell the study how it ended; ``False`` if an interrupt cut it short."""
    run_id = f"trial-{trial.number:04d}"
    trial.set_user_attr(RUN, str(sweep.folder / run_id))
    trial.set_user_attr(WORKER, f"{socket.gethostname()}:{os.getpid()}")
    if stop.requested is not None:  # came while the study gave this process the trial
        return _interrupted(study, trial, None)
    values = draw(study, sweep.settings, trial)
    data = trial_data(sweep.data, values)
    checkpoints = data.setdefault("checkpoint_settings", {})
    checkpoints.update(results_dir=str(sweep.folder), run_id=run_id, resume=False, force=False)
    pruner = sweep.settings.pruner
    reporter = TrialReporter(
        trial,
        sweep.settings.objective,
        sweep.behavior,
        None if pruner is None or pruner.type == "none" else pruner.type,
    )
    rerun = trial.user_attrs.get(RERUN_OF)
    again = "" if rerun is None else f" (trial {rerun} again, which an interrupt cut short)"
    logger.info("Trial %d (%s)%s: %s", trial.number, run_id, again, _shown(values))
    try:
        result = _learn(data, reporter, stop)
    except KeyboardInterrupt:
        _interrupted(study, trial, values)
        raise
    except Exception as error:  # a failed trial is recorded, and the sweep goes on
        logger.warning(
            "Trial %d failed: %s", trial.number, error, exc_info=logger.isEnabledFor(logging.DEBUG)
        )
        return _fail(study, trial, f"{type(error).__name__}: {error}")
    trial.set_user_attr(STEPS, result.steps.get(sweep.behavior, 0))
    stopped_by_sweep = result.status is RunStatus.STOPPED and reporter.pruned_at is None
    if result.status is RunStatus.INTERRUPTED:
        stop.run_stopped()
    if stop.requested is not None and (result.status is RunStatus.INTERRUPTED or stopped_by_sweep):
        return _interrupted(study, trial, values)
    return _tell(study, trial, result, reporter)


def _learn(data: dict[str, Any], reporter: TrialReporter, stop: SweepStop) -> LearnResult:
    from evtrain.run.learn import learn
    from evtrain.run.options import options_and_types
    from evtrain.run.wiring import make_bus
    from evtrain.trainers.registry import use_trainer_types

    options, types = options_and_types(data)
    with use_trainer_types(types), make_bus(options) as bus:
        handles = reporter.connect(bus)
        try:
            stop.watch(bus)
            return learn(options, bus)
        finally:
            stop.bus = None
            for handle in handles:
                handle.disconnect()


def _interrupted(
    study: optuna.Study, trial: optuna.Trial, values: Mapping[str, Any] | None
) -> bool:
    """Record ``trial`` ``FAIL`` and interrupted (it does not count), its values first put
    back in the study as a waiting trial: the next trial any worker takes runs them again."""
    import optuna

    if values is not None:
        study.enqueue_trial(dict(values), user_attrs={RERUN_OF: trial.number})
    trial.set_user_attr(INTERRUPTED, True)
    study.tell(trial, state=optuna.trial.TrialState.FAIL)
    logger.info(
        "Trial %d interrupted; it does not count, and the next trial (--resume) runs %s",
        trial.number,
        "its values again" if values is not None else "in its place",
    )
    return False


def _tell(
    study: optuna.Study, trial: optuna.Trial, result: LearnResult, reporter: TrialReporter
) -> bool:
    import optuna

    state = optuna.trial.TrialState
    if result.status is RunStatus.FAILED:
        return _fail(study, trial, "the run failed (see its log)")
    if result.status is RunStatus.STOPPED and reporter.pruned_at is not None:
        study.tell(trial, state=state.PRUNED)
        logger.info("Trial %d pruned at step %d", trial.number, reporter.pruned_at)
        return True
    score = reporter.score()
    if score is None:
        stat = reporter.objective.stat
        return _fail(
            study,
            trial,
            f"no value of {stat} for {reporter.behavior} was reported: no summary held it (did "
            "an episode end before max_steps? is sweep.objective.stat a stat of the run?)",
        )
    study.tell(trial, score)
    logger.info("Trial %d finished: %s %.6g", trial.number, reporter.objective.stat, score)
    return True


def _fail(study: optuna.Study, trial: optuna.Trial, reason: str) -> bool:
    import optuna

    trial.set_user_attr(ERROR, reason)
    study.tell(trial, state=optuna.trial.TrialState.FAIL)
    return True


def _shown(values: Mapping[str, Any]) -> str:
    return ", ".join(f"{path.rsplit('.', 1)[-1]}={value!r}" for path, value in values.items())
