"""``PrometheusWriter``: the run's latest figures on an HTTP ``/metrics`` page for Prometheus.

``writers: {prometheus: {port: 9464}}`` (or ``--writer prometheus:port=9464``) serves, on
``127.0.0.1`` unless ``host`` says otherwise, from a registry of its own (never
prometheus_client's global one, so two runs in one process do not collide), under Prometheus'
naming rules (base units spelled out, counters ending in ``_total``; ``promtool check metrics``
passes):

- ``evtrain_stat{behavior, key}``: the aggregated value of each stat key's latest period;
- ``evtrain_step{behavior}`` (a gauge: it goes back on ``--resume`` and restarts at 0 under
  ``--inference``, which a counter must not), ``evtrain_steps_per_second{behavior}`` (between
  the last two periods) and ``evtrain_last_step_timestamp_seconds{behavior}``, the unix time
  the last period arrived (the alert rule on it is in docs/trackers.md);
- ``evtrain_bus_*{subscriber}``: ``bus.metrics()`` of every subscriber, read at each scrape:
  counters ``_delivered_total`` ... ``_stalled_seconds_total``, gauges ``_queued`` ...
  ``_journaled``, and the summary ``evtrain_bus_latency_seconds{quantile}``;
- ``evtrain_run_info{run_id}`` (1) and ``evtrain_run_finished{status}`` once the run ended.

The server starts when the writer is connected (on rank 0 only, so ranks on one host do not
fight over the port) and the INFO line ``Prometheus metrics on http://HOST:PORT/metrics`` names
the port (the one taken, with ``port: 0``).  At close it keeps serving the final values for
``linger`` seconds, so that a scrape sees ``evtrain_run_finished``: on a daemon thread, which
stops it then; if the process ends sooner, its exit waits for the rest of the linger (an
``atexit`` hook, announced on one INFO line; Ctrl-C ends the wait at once).
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import threading
import time
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any, ClassVar

import attrs

from evtrain.bus.writers import StatsWriter
from evtrain.errors import ConfigError
from evtrain.events.payloads import EvaluationEvent, RunFinished, RunStarted
from evtrain.events.stats import StatsSummary
from evtrain_writers._options import writer_options
from evtrain_writers._tracker import require

if TYPE_CHECKING:
    from wsgiref.simple_server import WSGIServer

    from prometheus_client.core import Metric

    from evtrain.bus.writers import BusMetrics
    from evtrain.config.options import RunOptions

# Under "evtrain", whose INFO lines the command line shows (the root logger says WARNING only).
logger = logging.getLogger("evtrain.writers.prometheus")

BUS_COUNTERS = (
    ("delivered", "delivered", "Events handed to the subscriber"),
    ("dropped", "dropped", "Events discarded (overflow, disabled, undeliverable at close)"),
    ("failed", "failed", "Calls that raised"),
    ("retries", "retries", "Spool: deliveries of an event that had raised, tried again"),
    ("replayed", "replayed", "Spool: events delivered from the journal on disk"),
    ("dead_lettered", "dead_lettered", "Spool: events the sink rejected for good (dead letter)"),
    ("stalls", "stalls", "Calls that outlived the subscriber's stall_timeout"),
    ("stalled_seconds", "stalled_s", "Seconds spent in stalled calls, the running one included"),
)
"""``(name, bus.metrics() field, help)``; exported as ``evtrain_bus_<name>_total``."""
BUS_GAUGES = (
    ("queued", "queued", "Events waiting in the subscriber's inbox"),
    ("high_water", "high_water", "Largest inbox length seen"),
    ("disabled", "disabled", "1 once the subscriber is disabled"),
    ("journaled", "journaled", "Spool: events in the journal not yet delivered"),
)
LATENCY_QUANTILES = (("0.5", "latency_p50_s"), ("0.99", "latency_p99_s"))
"""The bus keeps recent latencies, not a running sum: the summary has quantiles only."""

_lingering: set[PrometheusWriter] = set()
"""Writers whose page still lingers after close; the process's exit waits for them."""


@atexit.register
def _wait_for_lingering() -> None:
    # One hook for every writer, registered once: a hook per writer would have to be
    # unregistered by the linger thread, possibly while the exit runs it.
    for writer in list(_lingering):
        writer.wait_at_exit()


def _port(_: Any, attribute: attrs.Attribute[int], value: int) -> None:
    if not 0 <= value <= 65535:
        raise ValueError(
            f"expected a TCP port 0..65535 (0: any free port), got {value!r}", attribute
        )


def _seconds(_: Any, attribute: attrs.Attribute[float], value: float) -> None:
    if not value >= 0:  # NaN too
        raise ValueError(
            f"expected a number of seconds of at least 0 (0: stop with the run), got {value!r}",
            attribute,
        )


@attrs.define(kw_only=True)
class PrometheusOptions:
    """``writers.prometheus``."""

    port: int = attrs.field(default=9464, validator=_port)
    """TCP port of ``/metrics``; 0 takes any free port (logged)."""
    host: str = "127.0.0.1"
    """Address to listen on; ``0.0.0.0`` exposes the page to the network."""
    hidden_keys: list[str] = attrs.field(factory=list)
    """Stat keys not exported."""
    linger: float = attrs.field(default=60.0, validator=_seconds)
    """Seconds the page keeps serving the final values after the run: Prometheus' default
    ``scrape_interval`` (1 min), so that one scrape sees ``evtrain_run_finished``."""


class _BusCollector:
    """Reads ``bus.metrics()`` at each scrape, so the page is never older than the scrape."""

    def __init__(self, writer: PrometheusWriter) -> None:
        self.writer = writer

    def collect(self) -> Iterator[Metric]:
        from prometheus_client.core import (
            CounterMetricFamily,
            GaugeMetricFamily,
            SummaryMetricFamily,
        )
        from prometheus_client.samples import Sample

        bus = self.writer.bus
        metrics = {k: v.as_dict() for k, v in sorted((bus.metrics() if bus else {}).items())}
        labels = ["subscriber"]
        for name, field, text in BUS_COUNTERS:
            counter = CounterMetricFamily(f"evtrain_bus_{name}", f"Bus: {text}", labels=labels)
            for subscriber, values in metrics.items():
                counter.add_metric([subscriber], float(values[field]))
            yield counter
        for name, field, text in BUS_GAUGES:
            gauge = GaugeMetricFamily(f"evtrain_bus_{name}", f"Bus: {text}", labels=labels)
            for subscriber, values in metrics.items():
                gauge.add_metric([subscriber], float(values[field]))
            yield gauge
        latency = SummaryMetricFamily(
            "evtrain_bus_latency_seconds",
            "Bus: seconds from emit to the end of handling, over the last 2048 events",
            labels=labels,
        )
        for subscriber, values in metrics.items():
            latency.samples += [
                Sample(latency.name, {"subscriber": subscriber, "quantile": q}, values[field])
                for q, field in LATENCY_QUANTILES
            ]
        yield latency


class PrometheusWriter(StatsWriter):
    """Keeps the latest value of every stat in gauges served on ``/metrics``.

    :param options: ``writers.prometheus``.
    """

    ranks: ClassVar[frozenset[int] | None] = frozenset({0})

    def __init__(self, options: PrometheusOptions) -> None:
        from prometheus_client import CollectorRegistry, Gauge

        self.options = options
        self.hidden_keys = frozenset(options.hidden_keys)
        self.registry = CollectorRegistry(auto_describe=True)
        """The writer's own registry (``/metrics`` serves this one only)."""
        self.bus: BusMetrics | None = None
        labels = ["behavior"]
        self.stat = Gauge(
            "evtrain_stat",
            "Aggregated value of a stat key's latest summary period",
            ["behavior", "key"],
            registry=self.registry,
        )
        self.step = Gauge(
            "evtrain_step", "Step of the latest period", labels, registry=self.registry
        )
        self.steps_per_second = Gauge(
            "evtrain_steps_per_second",
            "Steps per second between the last two periods",
            labels,
            registry=self.registry,
        )
        self.last_step_time = Gauge(
            "evtrain_last_step_timestamp_seconds",
            "Unix time the latest period arrived",
            labels,
            registry=self.registry,
        )
        self.run_info = Gauge("evtrain_run_info", "The run", ["run_id"], registry=self.registry)
        self.finished = Gauge(
            "evtrain_run_finished",
            "1 once the run ended, by status",
            ["status"],
            registry=self.registry,
        )
        self.registry.register(_BusCollector(self))
        self._last: dict[str, tuple[int, float]] = {}
        self.server: WSGIServer | None = None
        self.thread: threading.Thread | None = None
        self.lingering: threading.Thread | None = None
        """The thread that stops the server ``linger`` seconds after close, once closed."""
        self._stopped = threading.Event()
        self._stop_lock = threading.Lock()
        self._linger_ends = 0.0
        self.url = ""
        """``http://HOST:PORT/metrics`` once serving (the port taken, with ``port: 0``)."""

    @property
    def port(self) -> int | None:
        """The port ``/metrics`` is served on, once serving."""
        return None if self.server is None else int(self.server.server_port)

    def on_connect(self, bus: BusMetrics) -> None:
        """Keep the bus (its metrics are read at each scrape) and start serving.

        :raises ConfigError: the port cannot be listened on.
        """
        from prometheus_client import start_http_server

        self.bus = bus
        host, port = self.options.host, self.options.port
        try:
            self.server, self.thread = start_http_server(port, host, registry=self.registry)
        except OSError as error:
            raise ConfigError(
                [
                    f"writers.prometheus.port: cannot serve /metrics on {host}:{port} ({error}); "
                    "choose another port, or 0 for any free one"
                ]
            ) from error
        self.url = f"http://{host}:{self.port}/metrics"
        logger.info("Prometheus metrics on %s", self.url)

    def on_run_started(self, event: RunStarted) -> None:
        self.run_info.labels(event.run_id).set(1)

    def write_stats(self, category: str, values: Mapping[str, StatsSummary], step: int) -> None:
        now = time.time()
        for key, summary in values.items():
            if key not in self.hidden_keys:
                self.stat.labels(category, key).set(summary.aggregated_value)
        previous = self._last.get(category)
        if previous is not None and now > previous[1] and step > previous[0]:
            self.steps_per_second.labels(category).set((step - previous[0]) / (now - previous[1]))
        self._last[category] = (step, now)
        self.step.labels(category).set(step)
        self.last_step_time.labels(category).set(now)

    def on_evaluation(self, event: EvaluationEvent) -> None:
        """Only the ``Evaluation/...`` stats: an evaluation's step lags the trainer's, and the
        step gauges follow the trainer."""
        for key, summary in event.stats().items():
            if key not in self.hidden_keys:
                self.stat.labels(event.category, key).set(summary.aggregated_value)

    def on_run_finished(self, event: RunFinished) -> None:
        self.finished.labels(event.status.value).set(1)

    def close(self) -> None:
        """Serve the final values ``linger`` seconds more, on a daemon thread (returns at once:
        the bus's close does not wait), then stop; with no linger, stop now."""
        linger = self.options.linger
        if self.server is None or self.lingering is not None:
            return
        if linger <= 0:
            self.stop()
            return
        self._linger_ends = time.monotonic() + linger
        _lingering.add(self)
        self.lingering = threading.Thread(
            target=self._linger, args=(linger,), name="evtrain-prometheus-linger", daemon=True
        )
        self.lingering.start()

    def stop(self) -> None:
        """Stop serving now, linger or not (idempotent, from any thread)."""
        with self._stop_lock:
            server, self.server = self.server, None
            if server is not None:
                server.shutdown()
                server.server_close()
            thread, self.thread = self.thread, None
            self._stopped.set()
            _lingering.discard(self)
        for ended in (thread, self.lingering):
            if ended is not None and ended is not threading.current_thread():
                ended.join(timeout=5)

    def _linger(self, seconds: float) -> None:
        self._stopped.wait(seconds)
        self.stop()

    def wait_at_exit(self) -> None:
        """At the process's exit (``atexit``) while the page lingers: serve the rest of the
        linger, then stop; Ctrl-C ends the wait."""
        left = self._linger_ends - time.monotonic()
        if left > 0 and not self._stopped.is_set():
            logger.info(
                "Prometheus: serving the final values on %s %.0f s more before exiting "
                "(writers.prometheus.linger); Ctrl-C stops now",
                self.url,
                left,
            )
            # Ctrl-C is the user's way to end the wait, not an error of the run.
            with contextlib.suppress(KeyboardInterrupt):
                self._stopped.wait(left)
        self.stop()


def get_prometheus_writers(run_options: RunOptions) -> list[StatsWriter]:
    """Registration function of the ``evtrain.stats_writer`` entry point ``prometheus``: a
    :class:`PrometheusWriter` when the run's ``writers:`` asks for ``prometheus``.

    :raises ConfigError: bad options, or prometheus_client is not installed.
    """
    options = writer_options(run_options, "prometheus", PrometheusOptions)
    if options is None:
        return []
    require("prometheus_client", "prometheus")
    return [PrometheusWriter(options)]
