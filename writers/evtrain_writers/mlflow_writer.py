"""``MlflowWriter``: a run's statistics, hyperparameters, checkpoints and models in one MLflow run.

``writers: {mlflow: {tracking_uri: http://127.0.0.1:5000}}`` (or ``--writer mlflow``, with
``MLFLOW_TRACKING_URI``) logs, through an explicit :class:`mlflow.MlflowClient` and run id
(never mlflow's process-wide active run):

- each summary period as one ``log_batch`` request: metric ``<Behavior>/<key>`` holds the
  aggregated value at the period's step.  MLflow has no histogram, so a ``HISTOGRAM`` key also
  logs ``<key>/std``, ``<key>/min`` and ``<key>/max`` (the last two when it has values);
- the hyperparameters as params ``<Behavior>/<section>/<key>``, cut to MLflow's length limit;
- each checkpoint and export as the tags ``<Behavior>/checkpoint`` and ``<Behavior>/<format>``
  (the latest path; ``best_checkpoint``, ``best_<format>`` for the best evaluation's), uploaded
  as artifacts only with ``upload_artifacts: true``; an evaluation video as ``<Behavior>/video``,
  uploaded to ``<Behavior>/videos/`` only with ``upload_videos: true``; one naming a file
  evtrain did not write in the run folder is dead-lettered (``_tracker.run_file``);
- the end of the run as the run's status: FINISHED (also when a subscriber stopped it), KILLED
  (interrupted) or FAILED, with the tags ``evtrain.status`` and ``evtrain.stop_reason``.

The MLflow run opens on the first event of any kind (a journal replay can deliver events
before ``run_started``); its id is kept in ``run_logs/mlflow.json``, and ``--resume`` continues
that run.  A re-delivered event is logged once: the writer skips each ``(key, step)`` the run
already has, and a resumed run first reads the last step of every metric from the tracker.

Each point's timestamp is its event's own time (``StatsEvent.time``), also when it is
delivered after an outage or by ``evtrain sync``.  While the server is down the bus calls
:meth:`MlflowWriter.probe` (the experiment's lookup) every ``bus.retry_backoff_s``.  A
rejection (4xx-class MLflow codes, a key over MLflow's length limit) raises
:class:`~evtrain.errors.PermanentDeliveryError` and is dead-lettered — only the refused keys
when the rest of a period could be logged; anything else is transient and retried
(:mod:`evtrain_writers._mlflow_checks`, which also refuses bad settings at start).

Every request is bounded: mlflow's own HTTP client retries for minutes by default
(``MLFLOW_HTTP_REQUEST_MAX_RETRIES``, ``MLFLOW_HTTP_REQUEST_TIMEOUT``), and a writer that hangs
holds its events hostage.  The writer's requests fail after ``request_timeout`` seconds and
``request_retries`` retries, so the bus decides about retrying.  It does so without touching
the environment: mlflow's ``http_request`` is wrapped once, and the wrapper adds the writer's
limits only inside the writer's own calls (a context variable); every other call, on any
thread, passes through unchanged.  Artifact uploads keep mlflow's own settings (a large file
needs its time).
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, ParamSpec, TypeVar

from evtrain.bus.writers import StatsWriter
from evtrain.errors import PermanentDeliveryError
from evtrain.events.payloads import (
    ArtifactEvent,
    ExportEvent,
    RunFinished,
    RunStarted,
    RunStatus,
    SaveEvent,
    StatsEvent,
)
from evtrain.events.stats import StatsPropertyType, StatsSummary
from evtrain_writers._mlflow_batches import (
    MAX_KEY,
    MAX_METRICS_PER_BATCH,
    MAX_PARAMS_PER_BATCH,
    chunks,
    metric_values,
    ms,
)
from evtrain_writers._mlflow_batches import MAX_PARAM_VALUE as MAX_PARAM_VALUE
from evtrain_writers._mlflow_checks import check_at_start, permanent
from evtrain_writers._mlflow_options import (
    MlflowOptions as MlflowOptions,  # re-exported: part of this module's API
)
from evtrain_writers._mlflow_requests import _bound_mlflow_requests, _limits
from evtrain_writers._mlflow_requests import (
    request_limits as request_limits,  # re-exported: part of this module's API
)
from evtrain_writers._options import writer_options
from evtrain_writers._tracker import (
    LoggedSteps,
    TrackerRecord,
    flatten,
    remote_overflow,
    require,
    run_file,
)

if TYPE_CHECKING:
    from mlflow import MlflowClient

    from evtrain.config.options import RunOptions

logger = logging.getLogger(__name__)

T = TypeVar("T")
P = ParamSpec("P")

RECORD = "mlflow"
"""``run_logs/mlflow.json``: the MLflow run this evtrain run writes to."""

STATUS = {
    RunStatus.COMPLETED: "FINISHED",
    RunStatus.INTERRUPTED: "KILLED",
    RunStatus.FAILED: "FAILED",
    RunStatus.STOPPED: "FINISHED",
}
"""An evtrain run's end as an MLflow run status."""


class MlflowWriter(StatsWriter):
    """Logs a run to one MLflow run, opened (or resumed) on the first event.

    :param options: ``writers.mlflow``.
    :param run_id: the evtrain run id (the default MLflow run name).
    :param run_logs: ``results/<run_id>/run_logs``, where ``mlflow.json`` is kept.
    :param resume: continue the MLflow run ``mlflow.json`` names, if any.
    """

    ranks: ClassVar[frozenset[int] | None] = frozenset({0})
    overflow: ClassVar[str | None] = remote_overflow()

    def __init__(
        self, options: MlflowOptions, *, run_id: str, run_logs: Path, resume: bool = False
    ) -> None:
        self.options = options
        self.evtrain_run_id = run_id
        self.record = TrackerRecord(run_logs, RECORD)
        self.run_folder = run_logs.parent  # results/<run_id>: uploads come only from inside it
        self.resume = resume
        self.hidden_keys = frozenset(options.hidden_keys)
        self.bounded = _bound_mlflow_requests()
        if not self.bounded:
            logger.warning(
                "mlflow has no rest_utils.http_request to bound; the MLflow writer's requests "
                "use MLFLOW_HTTP_REQUEST_TIMEOUT and MLFLOW_HTTP_REQUEST_MAX_RETRIES"
            )
        self.client: MlflowClient | None = None
        self.run_id: str | None = None
        """The MLflow run id, once the run is open."""
        self.logged = LoggedSteps()
        self.params: dict[str, str] = {}
        """Params the MLflow run has: they cannot change once logged."""
        self._token = uuid.uuid4().hex
        self._create_tried = False
        self._finished = False
        self.stall_timeout = options.request_timeout / 2
        """Below the request timeout, so a hung request is reported as a stall before it
        fails (``Bus.add_writer`` takes it)."""

    # -- the MLflow run ----------------------------------------------------------------------

    def _call(self, request: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
        """``request(*args, **kwargs)`` (tracking calls) within the writer's time limits; a
        rejection (4xx-class) raises :class:`~evtrain.errors.PermanentDeliveryError`."""
        with _limits(self.options.request_timeout, self.options.request_retries):
            try:
                return request(*args, **kwargs)
            except Exception as error:
                reason = permanent(error)
                if reason is None:
                    raise
                raise PermanentDeliveryError(reason) from error

    def probe(self) -> None:
        """A cheap request (the experiment's lookup): returns once the server answers."""
        from mlflow import MlflowClient

        client = self.client or MlflowClient(self.options.tracking_uri)
        self._call(client.get_experiment_by_name, self.options.experiment)

    def _open(self, start: float | None = None) -> tuple[MlflowClient, str]:
        if self.client is not None and self.run_id is not None:
            return self.client, self.run_id
        from mlflow import MlflowClient

        client = self.client = self.client or self._call(MlflowClient, self.options.tracking_uri)
        record = self.record.read() if self.resume else {}
        if record.get("run_id") and record.get("tracking_uri") == client.tracking_uri:
            self._call(self._reopen, client, str(record["run_id"]))
            self.run_id = str(record["run_id"])
        else:
            if record.get("run_id"):
                logger.warning(
                    "%s names MLflow run %s on %s; this run logs to %s, so it starts a new "
                    "MLflow run",
                    self.record.path,
                    record["run_id"],
                    record.get("tracking_uri"),
                    client.tracking_uri,
                )
            self.run_id = self._call(self._create, client, start)
            self.record.write(
                {
                    "run_id": self.run_id,
                    "tracking_uri": client.tracking_uri,
                    "experiment": self.options.experiment,
                }
            )
        return client, self.run_id

    def _create(self, client: MlflowClient, start: float | None) -> str:
        experiment = client.get_experiment_by_name(self.options.experiment)
        if experiment is None:
            experiment_id = client.create_experiment(self.options.experiment)
        else:
            experiment_id = experiment.experiment_id
        if self._create_tried:  # an earlier try may have created the run before it failed
            found = client.search_runs(
                [experiment_id], f"tags.`evtrain.token` = '{self._token}'", max_results=1
            )
            if found:
                return str(found[0].info.run_id)
        self._create_tried = True
        tags = {
            **self.options.tags,
            "evtrain.run_id": self.evtrain_run_id,
            "evtrain.token": self._token,
        }
        run = client.create_run(
            experiment_id,
            start_time=ms(start) if start is not None else None,
            tags=tags,
            run_name=self.options.run_name or self.evtrain_run_id,
        )
        return str(run.info.run_id)

    def _reopen(self, client: MlflowClient, run_id: str) -> None:
        """Continue ``run_id``: mark it running, and learn what it already has."""
        run = client.get_run(run_id)
        client.update_run(run_id, status="RUNNING")
        last = {}
        for key in run.data.metrics:
            history = client.get_metric_history(run_id, key)
            if history:
                last[key] = max(metric.step for metric in history)
        self.logged = LoggedSteps(last)
        self.params = dict(run.data.params)

    # -- events ------------------------------------------------------------------------------

    def on_run_started(self, event: RunStarted) -> None:
        self._open(event.time)

    def write_stats_event(self, event: StatsEvent) -> None:
        """Each point carries the event's own time, also when delivered late."""
        self._write(event.category, event.values, event.step, ms(event.time))

    def write_stats(self, category: str, values: Mapping[str, StatsSummary], step: int) -> None:
        self._write(category, values, step, None)

    def _write(
        self, category: str, values: Mapping[str, StatsSummary], step: int, at: int | None
    ) -> None:
        from mlflow.entities import Metric

        client, run_id = self._open()
        points = dict(
            point
            for key, summary in values.items()
            if key not in self.hidden_keys
            for point in metric_values(f"{category}/{key}", summary)
        )
        timestamp = ms(self.logged.timestamp(category, step)) if at is None else at
        missing = self.logged.missing(points, step)
        refused = [key for key in missing if len(key) > MAX_KEY]
        metrics = [
            Metric(key, points[key], timestamp, step) for key in missing if key not in refused
        ]
        reasons = [f"metric key {key!r} is longer than MLflow's {MAX_KEY}" for key in refused]
        for chunk in chunks(metrics, MAX_METRICS_PER_BATCH):
            try:
                self._call(client.log_batch, run_id, metrics=list(chunk))
            except PermanentDeliveryError as error:
                if len(chunk) == 1:
                    raise
                # One key of the batch is refused: log them one by one to find which.
                for metric in chunk:
                    try:
                        self._call(client.log_batch, run_id, metrics=[metric])
                    except PermanentDeliveryError as alone:
                        refused.append(metric.key)
                        reasons.append(alone.reason)
                    else:
                        self.logged.mark(category, [metric.key], step)
                del error
                continue
            self.logged.mark(category, [m.key for m in chunk], step)
        self.logged.mark(category, (), step)
        if refused:
            raise PermanentDeliveryError("; ".join(reasons), keys=tuple(refused))

    def add_property(self, category: str, property_type: StatsPropertyType, value: Any) -> None:
        from mlflow.entities import Param

        client, run_id = self._open()
        prefix = (
            category
            if property_type is StatsPropertyType.HYPERPARAMETERS
            else (f"{category}/{property_type.value}")
        )
        params: dict[str, str] = {}
        for key, leaf in flatten(value, prefix):
            if len(key) > MAX_KEY:
                logger.warning(
                    "MLflow param %r is longer than %d characters: not logged", key, MAX_KEY
                )
                continue
            text = str(leaf)[:MAX_PARAM_VALUE]
            if key in self.params:
                if self.params[key] != text:
                    logger.warning(
                        "MLflow param %r is %r in run %s and cannot change to %r: kept",
                        key,
                        self.params[key],
                        run_id,
                        text,
                    )
                continue
            params[key] = text
        batch = [Param(key, text) for key, text in params.items()]
        for chunk in chunks(batch, MAX_PARAMS_PER_BATCH):
            self._call(client.log_batch, run_id, params=list(chunk))
            self.params.update((p.key, p.value) for p in chunk)

    def _log_file(
        self, category: str, name: str, step: int, path: Path, folder: str, upload: bool
    ) -> None:
        from mlflow.entities import RunTag

        if upload:
            run_file(path, self.run_folder)
        client, run_id = self._open()
        tags = [
            RunTag(f"{category}/{name}", str(path)),
            RunTag(f"{category}/{name}_step", str(step)),
        ]
        self._call(client.log_batch, run_id, tags=tags)
        if upload:
            client.log_artifact(run_id, str(path), artifact_path=f"{category}/{folder}")

    def on_save(self, event: SaveEvent) -> None:
        name, folder = ("best_checkpoint", "best") if event.best else ("checkpoint", "checkpoints")
        upload = self.options.upload_artifacts
        self._log_file(event.category, name, event.step, event.path, folder, upload)

    def on_export(self, event: ExportEvent) -> None:
        name, folder = (f"best_{event.format}", "best") if event.best else (event.format, "models")
        upload = self.options.upload_artifacts
        self._log_file(event.category, name, event.step, event.path, folder, upload)

    def on_artifact(self, event: ArtifactEvent) -> None:
        video = event.kind == "video"
        upload = self.options.upload_videos if video else self.options.upload_artifacts
        self._log_file(event.category, event.kind, event.step, event.path, f"{event.kind}s", upload)

    def on_run_finished(self, event: RunFinished) -> None:
        from mlflow.entities import RunTag

        client, run_id = self._open()
        tags = [RunTag("evtrain.status", event.status.value)]
        if event.reason:
            tags.append(RunTag("evtrain.stop_reason", event.reason[:MAX_PARAM_VALUE]))
        self._call(client.log_batch, run_id, tags=tags)
        status, end = STATUS[event.status], ms(event.time)
        self._call(client.set_terminated, run_id, status, end_time=end)
        self._finished = True

    def close(self) -> None:
        """An MLflow run this writer continued (``evtrain sync`` of a run that was killed, so
        its journal has no ``run_finished``) and left RUNNING is ended as KILLED."""
        if self._finished or not self.resume or self.client is None or self.run_id is None:
            return
        run = self._call(self.client.get_run, self.run_id)
        if run.info.status == "RUNNING":
            # update_run, not set_terminated: that one prints the run's URL to stdout (sync's
            # report), and a killed run has no known end time anyway.
            self._call(self.client.update_run, self.run_id, status="KILLED")


def get_mlflow_writers(run_options: RunOptions) -> list[StatsWriter]:
    """Registration function of the ``evtrain.stats_writer`` entry point ``mlflow``: an
    :class:`MlflowWriter` when the run's ``writers:`` asks for ``mlflow``.

    :raises ConfigError: bad options, or mlflow is not installed.
    """
    options = writer_options(run_options, "mlflow", MlflowOptions)
    if options is None:
        return []
    require("mlflow", "mlflow")
    check_at_start(options)
    settings = run_options.checkpoint_settings
    return [
        MlflowWriter(
            options,
            run_id=settings.run_id,
            run_logs=settings.run_logs_dir,
            resume=settings.resume,
        )
    ]
