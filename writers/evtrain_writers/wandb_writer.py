"""``WandbWriter``: a run's statistics, hyperparameters, checkpoints and models in one Weights &
Biases run, online or offline.

``writers: {wandb: {project: cartpole, mode: offline}}`` (or ``--writer wandb:mode=offline``;
``WANDB_MODE`` works too) writes the wandb run under ``results/<run_id>/wandb/``:

- each summary period as one ``run.log({...}, step=step)``: ``<Behavior>/<key>`` holds the
  aggregated value; a ``HISTOGRAM`` key with values also logs ``<Behavior>/<key>/histogram``
  as a ``wandb.Histogram`` of every value of the period;
- the hyperparameters into ``run.config`` under the behavior's name;
- each checkpoint and export as the summary values ``<Behavior>/checkpoint`` and
  ``<Behavior>/<format>`` (the latest path; ``best_checkpoint``, ``best_<format>`` for the best
  evaluation's), and as a ``model`` artifact only with ``upload_artifacts: true``;
- each evaluation as ``<Behavior>/Evaluation/...`` against its own step: wandb's step only
  grows, and an evaluation ends after later training periods were logged, so its row is logged
  at wandb's current step with ``<Behavior>/Evaluation/step``, the x-axis wandb plots
  ``<Behavior>/Evaluation/*`` against (``define_metric``); an evaluation video the same way, as
  ``<Behavior>/Evaluation/Video`` (a ``wandb.Video``) only with ``upload_videos: true``, its path
  in the summary as ``<Behavior>/video`` anyway.  Only a file evtrain wrote in the run folder
  is uploaded (:func:`~evtrain_writers._tracker.run_file`): an event naming another file is
  dead-lettered, neither logged nor uploaded;
- the end of the run as ``run.finish(exit_code=...)``: 0 completed or stopped by a subscriber,
  130 interrupted, 1 failed; the summary's ``evtrain.status`` says which, and
  ``evtrain.stop_reason`` why a subscriber stopped it.

The wandb run starts on the first event of any kind; its id is kept in ``run_logs/wandb.json``
with the last step logged, and ``--resume`` continues that run (``resume="allow"``).  wandb's
step only grows, so a re-delivered period, or one at a step below the last (a resumed run
replaying steps past its checkpoint), is skipped rather than sent to be dropped.

wandb logs through its own service process: ``run.log`` only queues, and uploads (online) are
retried by that process; ``init_timeout`` bounds the start.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Literal

import attrs

from evtrain.bus.writers import StatsWriter
from evtrain.events.payloads import (
    ArtifactEvent,
    EvaluationEvent,
    ExportEvent,
    RunFinished,
    RunStarted,
    RunStatus,
    SaveEvent,
    StatsEvent,
)
from evtrain.events.stats import StatsAggregationMethod, StatsPropertyType, StatsSummary
from evtrain_writers._options import writer_options
from evtrain_writers._tracker import TrackerRecord, remote_overflow, require, run_file

if TYPE_CHECKING:
    from wandb.sdk.wandb_run import Run

    from evtrain.config.options import RunOptions

logger = logging.getLogger(__name__)

RECORD = "wandb"
"""``run_logs/wandb.json``: the wandb run this evtrain run writes to, and its last step."""

EXIT_CODES = {
    RunStatus.COMPLETED: 0,
    RunStatus.STOPPED: 0,
    RunStatus.INTERRUPTED: 130,
    RunStatus.FAILED: 1,
}
"""An evtrain run's end as the exit code wandb records (130: ended by Ctrl-C; a run a
subscriber stopped early ended normally)."""


def _positive(_: Any, attribute: attrs.Attribute[float], value: float) -> None:
    if value <= 0:
        raise ValueError(f"expected a number of seconds > 0, got {value!r}")


@attrs.define(kw_only=True)
class WandbOptions:
    """``writers.wandb``."""

    project: str = "evtrain"
    """The wandb project."""
    entity: str | None = None
    """Team or user; ``None`` is wandb's default entity."""
    name: str | None = None
    """The wandb run's display name; ``None`` is the evtrain run id."""
    group: str | None = None
    """wandb run group."""
    tags: list[str] = attrs.field(factory=list)
    """Tags of the wandb run."""
    mode: Literal["online", "offline", "disabled"] | None = None
    """``None`` is wandb's own choice (``WANDB_MODE``, else online)."""
    dir: str | None = None
    """Folder wandb writes its ``wandb/`` folder in; ``None`` is the run folder."""
    upload_artifacts: bool = False
    """Log checkpoints and exported models as ``model`` artifacts (their paths are in the
    summary anyway)."""
    upload_videos: bool = False
    """Log evaluation videos as ``wandb.Video`` (their paths are in the summary anyway)."""
    hidden_keys: list[str] = attrs.field(factory=list)
    """Stat keys not logged."""
    init_timeout: float = attrs.field(default=90.0, validator=_positive)
    """Seconds ``wandb.init`` may take (wandb's own default)."""
    console: Literal["off", "auto", "wrap", "redirect"] = "off"
    """wandb's capture of the process's console output; off by default, since the console line
    and progress display are evtrain's."""


def histogram_values(summary: StatsSummary) -> list[float] | None:
    """The values a ``HISTOGRAM`` summary contributes as a ``wandb.Histogram`` (none if empty)."""
    if summary.aggregation_method is StatsAggregationMethod.HISTOGRAM and summary.full_dist:
        return list(summary.full_dist)
    return None


class WandbWriter(StatsWriter):
    """Logs a run to one wandb run, started (or resumed) on the first event.

    :param options: ``writers.wandb``.
    :param run_id: the evtrain run id (the default display name).
    :param run_folder: ``results/<run_id>``, where wandb writes unless ``options.dir``.
    :param run_logs: ``results/<run_id>/run_logs``, where ``wandb.json`` is kept.
    :param resume: continue the wandb run ``wandb.json`` names, if any.
    """

    ranks: ClassVar[frozenset[int] | None] = frozenset({0})
    overflow: ClassVar[str | None] = remote_overflow()

    def __init__(
        self,
        options: WandbOptions,
        *,
        run_id: str,
        run_folder: Path,
        run_logs: Path,
        resume: bool = False,
    ) -> None:
        self.options = options
        self.evtrain_run_id = run_id
        self.folder = Path(options.dir) if options.dir is not None else run_folder
        self.run_folder = run_folder
        """``results/<run_id>``: files are uploaded only from inside it."""
        self.record = TrackerRecord(run_logs, RECORD)
        self.resume = resume
        self.hidden_keys = frozenset(options.hidden_keys)
        self.run: Run | None = None
        self.step = -1
        """The last step logged."""
        self.at_step: set[str] | None = set()
        """Keys logged at :attr:`step`; ``None``: all of them (a resumed run's last step)."""
        self.finished = False
        self.evaluated: dict[str, int] = {}
        """The step of each behavior's last evaluation logged (a re-delivered one is not)."""
        self.axes: set[tuple[str, str]] = set()
        """``(wandb run id, x-axis)`` of each ``define_metric`` made."""
        self.videos: set[Path] = set()
        """Videos logged (a re-delivered one is not logged again)."""

    def _open(self) -> Run:
        if self.run is not None:
            return self.run
        import wandb

        record = self.record.read() if self.resume else {}
        run_id = str(record.get("run_id") or uuid.uuid4().hex[:8])
        if record.get("run_id"):
            self.step = int(record.get("step", -1))
            self.at_step = None
        self.folder.mkdir(parents=True, exist_ok=True)
        self.run = wandb.init(
            project=self.options.project,
            entity=self.options.entity,
            name=self.options.name or self.evtrain_run_id,
            group=self.options.group,
            tags=self.options.tags or None,
            mode=self.options.mode,
            dir=self.folder,
            id=run_id,
            resume="allow",
            reinit="create_new",  # never finish a wandb run the user has open in this process
            settings=wandb.Settings(
                init_timeout=self.options.init_timeout, console=self.options.console
            ),
        )
        self.finished = False
        self._write_record()
        return self.run

    def _write_record(self) -> None:
        if self.run is not None:
            self.record.write({"run_id": self.run.id, "step": self.step})

    def on_run_started(self, event: RunStarted) -> None:
        self._open()

    def write_stats_event(self, event: StatsEvent) -> None:
        """The row carries the event's own time (``_timestamp``), also when delivered late."""
        self._write(event.category, event.values, event.step, event.time)

    def write_stats(self, category: str, values: Mapping[str, StatsSummary], step: int) -> None:
        self._write(category, values, step, None)

    def _write(
        self, category: str, values: Mapping[str, StatsSummary], step: int, at: float | None
    ) -> None:
        import wandb

        run = self._open()
        if step < self.step:
            logger.warning(
                "wandb run %s has step %d; the period of %s at step %d is not logged again",
                run.id,
                self.step,
                category,
                step,
            )
            return
        data: dict[str, Any] = {}
        for key, summary in values.items():
            if key in self.hidden_keys:
                continue
            name = f"{category}/{key}"
            data[name] = summary.aggregated_value
            histogram = histogram_values(summary)
            if histogram is not None:
                data[f"{name}/histogram"] = wandb.Histogram(histogram)
        self._log_row(run, data, step, at)

    def _log_row(self, run: Run, data: dict[str, Any], step: int, at: float | None) -> None:
        """``run.log(data, step=step)`` but for the keys already logged at ``step``."""
        if step == self.step:
            done = self.at_step
            data = {} if done is None else {k: v for k, v in data.items() if k not in done}
        if not data:
            return
        keys = list(data)
        if at is not None:
            data["_timestamp"] = at
        run.log(data, step=step)
        if step > self.step:
            self.step, self.at_step = step, set()
        if self.at_step is not None:
            self.at_step.update(keys)
        self._write_record()

    def add_property(self, category: str, property_type: StatsPropertyType, value: Any) -> None:
        run = self._open()
        key = category
        if property_type is not StatsPropertyType.HYPERPARAMETERS:
            key = f"{category}/{property_type.value}"
        # wandb's Config.update carries no annotations
        run.config.update({key: value}, allow_val_change=True)  # type: ignore[no-untyped-call]

    def _log_file(self, category: str, name: str, step: int, path: Path) -> None:
        import wandb

        if self.options.upload_artifacts:
            run_file(path, self.run_folder)
        run = self._open()
        run.summary[f"{category}/{name}"] = str(path)
        run.summary[f"{category}/{name}_step"] = step
        if self.options.upload_artifacts:
            artifact = wandb.Artifact(f"{category}-{name}", type="model", metadata={"step": step})
            artifact.add_file(str(path))
            run.log_artifact(artifact)

    def on_save(self, event: SaveEvent) -> None:
        name = "best_checkpoint" if event.best else "checkpoint"
        self._log_file(event.category, name, event.step, event.path)

    def on_export(self, event: ExportEvent) -> None:
        name = f"best_{event.format}" if event.best else event.format
        self._log_file(event.category, name, event.step, event.path)

    def _evaluation_row(self, run: Run, category: str, step: int) -> dict[str, Any]:
        """The start of a row of ``category``'s evaluation at ``step``: its x-axis value."""
        axis = f"{category}/Evaluation/step"
        if (run.id, axis) not in self.axes:
            run.define_metric(f"{category}/Evaluation/*", step_metric=axis)
            self.axes.add((run.id, axis))
        return {axis: step}

    def on_evaluation(self, event: EvaluationEvent) -> None:
        """The ``Evaluation/...`` stats, against the evaluation's own step (module doc)."""
        import wandb

        run = self._open()
        if self.evaluated.get(event.category, -1) >= event.step:
            return
        data = self._evaluation_row(run, event.category, event.step)
        for key, summary in event.stats().items():
            if key not in self.hidden_keys:
                name = f"{event.category}/{key}"
                data[name] = summary.aggregated_value
                histogram = histogram_values(summary)
                if histogram is not None:
                    data[f"{name}/histogram"] = wandb.Histogram(histogram)
        self._log_row(run, data, max(self.step, event.step), event.time)
        self.evaluated[event.category] = event.step

    def on_artifact(self, event: ArtifactEvent) -> None:
        """An evaluation video: its path in the summary; a ``wandb.Video`` when asked."""
        import wandb

        if event.kind == "video" and self.options.upload_videos:
            run_file(event.path, self.run_folder)
        run = self._open()
        run.summary[f"{event.category}/{event.kind}"] = str(event.path)
        run.summary[f"{event.category}/{event.kind}_step"] = event.step
        if event.kind != "video" or not self.options.upload_videos or event.path in self.videos:
            return
        data = self._evaluation_row(run, event.category, event.step)
        video_format: Literal["gif", "mp4"] = "mp4" if event.path.suffix == ".mp4" else "gif"
        video = wandb.Video(str(event.path), format=video_format)
        data[f"{event.category}/Evaluation/Video"] = video
        self._log_row(run, data, max(self.step, event.step), None)
        self.videos.add(event.path)

    def on_run_finished(self, event: RunFinished) -> None:
        run = self._open()
        run.summary["evtrain.status"] = event.status.value
        if event.reason:
            run.summary["evtrain.stop_reason"] = event.reason
        run.finish(exit_code=EXIT_CODES[event.status])
        self.run = None
        self.finished = True

    def close(self) -> None:
        """A run that never saw ``run_finished`` is finished as failed: left open, wandb's
        service would wait for it at the process's exit."""
        if self.run is not None and not self.finished:
            run, self.run = self.run, None
            run.finish(exit_code=1)


def get_wandb_writers(run_options: RunOptions) -> list[StatsWriter]:
    """Registration function of the ``evtrain.stats_writer`` entry point ``wandb``: a
    :class:`WandbWriter` when the run's ``writers:`` asks for ``wandb``.

    :raises ConfigError: bad options, or wandb is not installed.
    """
    options = writer_options(run_options, "wandb", WandbOptions)
    if options is None:
        return []
    require("wandb", "wandb")
    settings = run_options.checkpoint_settings
    return [
        WandbWriter(
            options,
            run_id=settings.run_id,
            run_folder=settings.write_path,
            run_logs=settings.run_logs_dir,
            resume=settings.resume,
        )
    ]
