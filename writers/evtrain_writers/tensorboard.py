"""``TensorboardWriter``: ML-Agents' TensorBoard writer, without a flush per key.

Behaviour kept from ML-Agents: one folder per category (``base_dir/<category>/``), scalars of
each key's ``aggregated_value``, a ``<key>_hist`` histogram for HISTOGRAM stats, hidden keys,
hyperparameters as a text summary named ``Hyperparameters``, and ``clear_past_data`` deleting
earlier event files (with a warning per file) when a category's file is first opened.

Added: the hyperparameters also open a session of TensorBoard's HParams dashboard in the
category's own file, and the run's end closes it (:mod:`evtrain_writers._hparams`), so runs can
be compared by hyperparameters against their final stats, as Lightning and SB3 users expect.
An evaluation's video (``artifact`` event) is a text summary ``Evaluation/Video`` at the
evaluation's step naming its file: the video is stored once, as that file, not copied into the
event file too (an event file keeps every image written to it, and grew without bound).

What differs: every scalar of one ``write_stats`` call goes into one Event (one Summary with a
value per key), encoded by hand (:mod:`evtrain_writers.tfrecord`); files stay open and are
flushed by a timer thread every ``flush_secs`` when something is waiting, and on ``flush()`` and
``close()`` — never once per event; ``flush()`` also makes the files durable (``fsync``).

A resumed run's first summary of a category (step ``s``) is preceded by a ``SessionLog.START``
event at ``s``: TensorBoard's reader (``purge_orphaned_data``) then drops every earlier event
of step ``s`` or later, i.e. what a killed run wrote past the checkpoint the run resumed from,
so each step is shown once.  On a full disk, events wait in memory, in order, and are written
once space returns (the timer thread retries and says so once per outage).
"""

from __future__ import annotations

import logging
import os
import threading
import time
import weakref
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar

from evtrain.atomic import DISK_FULL
from evtrain.bus.writers import StatsWriter
from evtrain.events.payloads import ArtifactEvent, RunFinished
from evtrain.events.stats import StatsAggregationMethod, StatsPropertyType, StatsSummary
from evtrain_writers._format import render_nested
from evtrain_writers._hparams import session_end_event, session_start_event
from evtrain_writers.tfrecord import EventFileWriter, ScalarEventEncoder

logger = logging.getLogger(__name__)

_HISTOGRAM = StatsAggregationMethod.HISTOGRAM
_MAX_PLANS = 1024
HISTOGRAM_BUCKETS = 30
"""Equal-width buckets per histogram (TensorBoard's own default count)."""
HYPERPARAMETERS_TAG = "Hyperparameters"
VIDEO_TAG = "Evaluation/Video"
"""The tag of evaluation videos, in the category's (behavior's) own event file."""
_PAST_DATA_PREFIX = "events.out"
"""ML-Agents' test for files to clear: any TensorBoard output, not only ``.tfevents`` files."""


class _Plan:
    """What to do with one tuple of keys: which are shown, and their encoder."""

    __slots__ = ("encoder", "shown")

    def __init__(self, keys: tuple[str, ...], hidden: frozenset[str]) -> None:
        self.shown = tuple(key for key in keys if key not in hidden)
        self.encoder = ScalarEventEncoder(self.shown) if self.shown else None


class TensorboardWriter(StatsWriter):
    """Writes each category's statistics to TensorBoard event files under ``base_dir/<category>``.

    :param base_dir: the run folder; each category (behavior) gets a subfolder.
    :param clear_past_data: delete event files left in a category's folder when its file is
        first opened (a new run, not a resumed one).
    :param hidden_keys: stat keys never written (e.g. ``"Is Training"``, ``"Step"``).
    :param flush_secs: how often the timer thread writes buffered events to disk.
    :param hparams: also write each category's hyperparameters as a session of TensorBoard's
        HParams dashboard, ended by :meth:`on_run_finished`; ``False`` writes only the text.
    """

    ranks: ClassVar[frozenset[int] | None] = frozenset({0})

    def __init__(
        self,
        base_dir: str | os.PathLike[str],
        *,
        clear_past_data: bool = False,
        hidden_keys: Iterable[str] | None = None,
        flush_secs: float = 1.0,
        hparams: bool = True,
    ) -> None:
        if flush_secs <= 0:
            raise ValueError(f"flush_secs must be positive, got {flush_secs}")
        self.base_dir = Path(base_dir)
        self.clear_past_data = clear_past_data
        self.hidden_keys = frozenset(hidden_keys or ())
        self.flush_secs = flush_secs
        self.hparams = hparams
        self._sessions: set[str] = set()
        """Categories whose HParams session was started."""
        self._sessions_ended = False
        self._started: set[str] = set()
        """Categories whose restart marker (``SessionLog.START``) is written."""
        self._files: dict[str, EventFileWriter] = {}
        # The timer thread reads this snapshot; replacing a tuple is atomic, a dict is not.
        self._file_list: tuple[EventFileWriter, ...] = ()
        self._plans: dict[tuple[str, ...], _Plan] = {}
        self._stop = threading.Event()
        self._flusher: threading.Thread | None = None
        self._closed = False

    # -- writing ------------------------------------------------------------------------------

    def write_stats(self, category: str, values: Mapping[str, StatsSummary], step: int) -> None:
        """Write one Event with a scalar per shown key, plus a histogram per HISTOGRAM key."""
        file = self._files.get(category)
        if file is None:
            file = self._open(category)
        keys = tuple(values)
        plan = self._plans.get(keys)
        if plan is None:
            plan = self._plan(keys)
        if plan.encoder is None:
            return
        scalars: list[float] = []
        append = scalars.append
        histograms: list[str] | None = None
        for key in plan.shown:
            summary = values[key]
            dist = summary.full_dist
            # One value is its own sum, mean and most recent value; skipping the property
            # (fsum, division, three calls) saves about a third of a typical event's cost.
            append(dist[0] if len(dist) == 1 else summary.aggregated_value)
            if summary.aggregation_method is _HISTOGRAM:
                if histograms is None:
                    histograms = []
                histograms.append(key)
        wall_time = time.time()
        self._start(file, category, wall_time, step)
        file.write_event(plan.encoder.encode(wall_time, step, scalars))
        for key in histograms or ():
            event = _histogram_event(wall_time, step, f"{key}_hist", values[key].full_dist)
            if event is not None:
                file.write_event(event)

    def _start(self, file: EventFileWriter, category: str, wall_time: float, step: int) -> None:
        if category not in self._started:
            # A resumed run's first summary: TensorBoard's reader drops what earlier files
            # hold from this step on (a killed run's summaries past its checkpoint).
            self._started.add(category)
            file.write_event(_session_start_event(wall_time, step))

    def on_artifact(self, event: ArtifactEvent) -> None:
        """Name an evaluation video's file at its step, in a text summary (its bytes stay in
        the file alone); other artifacts are not shown."""
        if event.kind != "video" or event.media_type not in ("image/gif", "video/mp4"):
            return
        file = self._files.get(event.category) or self._open(event.category)
        wall_time = time.time()
        self._start(file, event.category, wall_time, event.step)
        if event.media_type == "image/gif":
            text = f"`{event.path}` (GIF: open the file)"
        else:
            text = f"`{event.path}` (MP4: TensorBoard cannot play it; open the file)"
        file.write_event(_text_event(wall_time, event.step, VIDEO_TAG, text))

    def add_property(self, category: str, property_type: StatsPropertyType, value: Any) -> None:
        """Write hyperparameters (a nested mapping) as a text summary and, the first time for a
        category, as the start of its HParams session; ignore other properties.

        :raises TypeError: hyperparameters that are not a mapping.
        """
        if property_type is not StatsPropertyType.HYPERPARAMETERS:
            return
        if not isinstance(value, Mapping):
            raise TypeError(
                f"hyperparameters of {category!r} must be a mapping, got {type(value).__name__}"
            )
        file = self._files.get(category)
        if file is None:
            file = self._open(category)
        wall_time = time.time()
        file.write_event(_text_event(wall_time, 0, HYPERPARAMETERS_TAG, render_nested(value)))
        # TensorBoard keeps a run's first session start only: later ones would be dead weight.
        if self.hparams and category not in self._sessions:
            file.write_event(session_start_event(value, wall_time))
            self._sessions.add(category)

    def on_run_finished(self, event: RunFinished) -> None:
        """End every open HParams session with the run's status (none for an interrupted run,
        so that a resumed run can still record how it ends)."""
        if self._sessions_ended or not self._sessions:
            return
        self._sessions_ended = True
        end = session_end_event(event.status, event.time)
        if end is not None:
            for category in sorted(self._sessions):
                self._files[category].write_event(end)

    def _plan(self, keys: tuple[str, ...]) -> _Plan:
        if len(self._plans) >= _MAX_PLANS:  # key sets are normally few; bound them anyway
            self._plans.clear()
        plan = self._plans[keys] = _Plan(keys, self.hidden_keys)
        return plan

    def _open(self, category: str) -> EventFileWriter:
        if self._closed:
            raise ValueError("TensorboardWriter is closed")
        directory = self.base_dir / category
        directory.mkdir(parents=True, exist_ok=True)
        if self.clear_past_data:
            _delete_event_files(directory)
        file = self._files[category] = EventFileWriter(directory)
        self._file_list = (*self._file_list, file)
        if self._flusher is None:
            self._flusher = threading.Thread(
                target=_flush_periodically,
                args=(weakref.ref(self), self._stop, self.flush_secs),
                name=f"evtrain-tensorboard-flush {self.base_dir}",
                daemon=True,
            )
            self._flusher.start()
        return file

    # -- flushing and closing -----------------------------------------------------------------

    @property
    def event_files(self) -> dict[str, Path]:
        """The event file written for each category so far."""
        return {category: file.path for category, file in self._files.items()}

    def flush(self) -> None:
        """Write every buffered event to its file and make it durable (``fsync``)."""
        for file in self._file_list:
            file.sync()

    def close(self) -> None:
        """Stop the timer thread, write what is buffered, close every file.  Idempotent.

        An HParams session still open gets no end here: only ``run_finished`` says how the run
        went, and TensorBoard shows a session without one as of unknown status."""
        if self._closed:
            return
        self._closed = True
        self._stop.set()
        if self._flusher is not None and self._flusher is not threading.current_thread():
            self._flusher.join()
        errors = []
        for file in self._file_list:
            try:
                file.close()
            except OSError as error:  # close the others before reporting
                errors.append(error)
        if errors:
            raise errors[0]


def _flush_periodically(
    writer_ref: weakref.ref[TensorboardWriter], stop: threading.Event, interval: float
) -> None:
    # A weak reference: a writer dropped without close() is collected (its files are closed by
    # their finalizers) and this thread ends.
    full: set[EventFileWriter] = set()
    while not stop.wait(interval):
        writer = writer_ref()
        if writer is None:
            return
        for file in writer._file_list:
            try:
                file.flush()
            except OSError as error:  # the owner's flush()/close() reports it
                if error.errno not in DISK_FULL:
                    logger.exception("Periodic flush of %s failed", file.path)
                elif file not in full:  # one line per outage; the events wait in memory
                    logger.warning("%s: %s; retrying", file.path, error.strerror)
                full.add(file)
            except ValueError:
                logger.exception("Periodic flush of %s failed", file.path)
            else:
                full.discard(file)
        del writer


def _delete_event_files(directory: Path) -> None:
    for path in sorted(directory.iterdir()):
        if path.name.startswith(_PAST_DATA_PREFIX) and path.is_file():
            logger.warning(
                "Deleting TensorBoard data %s that was left over from a previous run.", path
            )
            try:
                path.unlink()
            except OSError:
                logger.exception("Could not delete TensorBoard data %s; continuing.", path)


# -- rare records, built with tensorboard's protobufs (imported here only when needed) --------


def _histogram_event(
    wall_time: float, step: int, tag: str, values: Sequence[float]
) -> bytes | None:
    import numpy as np
    from tensorboard.compat.proto.event_pb2 import Event
    from tensorboard.compat.proto.summary_pb2 import HistogramProto, Summary

    data = np.asarray(values, dtype=np.float64)
    data = data[np.isfinite(data)]  # bucket edges need a finite range
    if data.size == 0:
        return None
    counts, edges = np.histogram(data, bins=min(HISTOGRAM_BUCKETS, data.size))
    histogram = HistogramProto(
        min=float(data.min()),
        max=float(data.max()),
        num=float(data.size),
        sum=float(data.sum()),
        sum_squares=float(np.dot(data, data)),
        bucket_limit=edges[1:].tolist(),  # right edge of each bucket
        bucket=counts.astype(np.float64).tolist(),
    )
    summary = Summary(value=[Summary.Value(tag=tag, histo=histogram)])
    data_bytes: bytes = Event(wall_time=wall_time, step=step, summary=summary).SerializeToString()
    return data_bytes


def _session_start_event(wall_time: float, step: int) -> bytes:
    from tensorboard.compat.proto.event_pb2 import Event, SessionLog

    start = SessionLog(status=SessionLog.START)
    data_bytes: bytes = Event(wall_time=wall_time, step=step, session_log=start).SerializeToString()
    return data_bytes


def _text_event(wall_time: float, step: int, tag: str, text: str) -> bytes:
    from tensorboard.compat.proto.event_pb2 import Event
    from tensorboard.compat.proto.summary_pb2 import Summary
    from tensorboard.compat.proto.tensor_pb2 import TensorProto
    from tensorboard.compat.proto.tensor_shape_pb2 import TensorShapeProto
    from tensorboard.compat.proto.types_pb2 import DT_STRING
    from tensorboard.plugins.text.metadata import create_summary_metadata

    # A scalar string tensor: the text plugin renders it as markdown, not as a one-cell table.
    tensor = TensorProto(
        dtype=DT_STRING, tensor_shape=TensorShapeProto(), string_val=[text.encode()]
    )
    metadata = create_summary_metadata(display_name=tag, description="")
    summary = Summary(value=[Summary.Value(tag=tag, metadata=metadata, tensor=tensor)])
    data_bytes: bytes = Event(wall_time=wall_time, step=step, summary=summary).SerializeToString()
    return data_bytes
