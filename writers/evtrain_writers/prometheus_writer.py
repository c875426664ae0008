"""``PrometheusWriter``: the run's latest figures on an HTTP ``/metrics`` page for Prometheus.

``writers: {prometheus: {port: 9464}}`` (or ``--writer prometheus:port=9464``) serves, on
``127.0.0.1`` unless ``host`` says otherwise, from a registry of its own (never
prometheus_client's global one, so two runs in one process do not collide):

- ``evtrain_stat{behavior, key}``: the aggregated value of each stat key's latest period;
- ``evtrain_step{behavior}``, ``evtrain_steps_per_second{behavior}`` (between the last two
  periods) and ``evtrain_last_step_timestamp_seconds{behavior}``, the unix time the last period
  arrived: alert on ``time() - evtrain_last_step_timestamp_seconds > 600`` for a stuck trainer;
- ``evtrain_bus_*{subscriber}``: ``bus.metrics()`` of every subscriber, read at each scrape
  (delivered, dropped, failed, queued, high water, disabled, p50/p99 latency);
- ``evtrain_run_info{run_id}`` (1) and ``evtrain_run_finished{status}`` once the run ended.

The server starts when the writer is connected (on rank 0 only, so ranks on one host do not
fight over the port) and stops at close.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any, ClassVar

import attrs

from evtrain.bus.writers import StatsWriter
from evtrain.errors import ConfigError
from evtrain.events.payloads import RunFinished, RunStarted
from evtrain.events.stats import StatsSummary
from evtrain_writers._options import writer_options
from evtrain_writers._tracker import require

if TYPE_CHECKING:
    from wsgiref.simple_server import WSGIServer

    from prometheus_client.core import Metric

    from evtrain.bus.writers import BusMetrics
    from evtrain.config.options import RunOptions

logger = logging.getLogger(__name__)

BUS_COUNTERS = ("delivered", "dropped", "failed", "retries", "replayed", "stalls")
BUS_GAUGES = (
    "queued",
    "high_water",
    "disabled",
    "latency_p50_s",
    "latency_p99_s",
    "journaled",
    "stalled_s",
)


def _port(_: Any, attribute: attrs.Attribute[int], value: int) -> None:
    if not 0 <= value <= 65535:
        raise ValueError(f"expected a TCP port 0..65535 (0: any free port), got {value!r}")


@attrs.define(kw_only=True)
class PrometheusOptions:
    """``writers.prometheus``."""

    port: int = attrs.field(default=9464, validator=_port)
    """TCP port of ``/metrics``; 0 takes any free port (logged)."""
    host: str = "127.0.0.1"
    """Address to listen on; ``0.0.0.0`` exposes the page to the network."""
    hidden_keys: list[str] = attrs.field(factory=list)
    """Stat keys not exported."""


class _BusCollector:
    """Reads ``bus.metrics()`` at each scrape, so the page is never older than the scrape."""

    def __init__(self, writer: PrometheusWriter) -> None:
        self.writer = writer

    def collect(self) -> Iterator[Metric]:
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        bus = self.writer.bus
        metrics = bus.metrics() if bus is not None else {}
        families: list[Any] = [
            CounterMetricFamily(
                f"evtrain_bus_{name}", f"Bus: events {name} per subscriber", labels=["subscriber"]
            )
            for name in BUS_COUNTERS
        ]
        families += [
            GaugeMetricFamily(
                f"evtrain_bus_{name}", f"Bus: {name} per subscriber", labels=["subscriber"]
            )
            for name in BUS_GAUGES
        ]
        for subscriber, entry in sorted(metrics.items()):
            values = entry.as_dict()
            for family, name in zip(families, (*BUS_COUNTERS, *BUS_GAUGES), strict=True):
                family.add_metric([subscriber], float(values[name]))
        yield from families


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
        logger.info("Prometheus metrics on http://%s:%d/metrics", host, self.port)

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

    def on_run_finished(self, event: RunFinished) -> None:
        self.finished.labels(event.status.value).set(1)

    def close(self) -> None:
        server, self.server = self.server, None
        if server is not None:
            server.shutdown()
            server.server_close()
        if self.thread is not None:
            self.thread.join(timeout=5)
            self.thread = None


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
