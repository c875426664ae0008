"""The Prometheus writer's ``/metrics`` page, scraped over real HTTP on 127.0.0.1 while a
real bus (or a real ``evtrain learn``) feeds it, read with prometheus_client's own parser and
checked with Prometheus' own ``promtool`` where it is on PATH (``.ci/run`` puts it there)."""

from __future__ import annotations

import re
import shutil
import signal
import subprocess
import threading
import urllib.request
from pathlib import Path
from typing import Any

import pytest
import yaml

from evtrain import Bus, ConfigError, RunFinished, RunOptions, RunStarted, RunStatus, signals
from tests.helpers import ROOT, config, isolated_python, stats_event

pytest.importorskip("prometheus_client")

from prometheus_client.parser import text_string_to_metric_families

from evtrain_writers.prometheus_writer import (
    PrometheusOptions,
    PrometheusWriter,
    get_prometheus_writers,
)

PROMTOOL = shutil.which("promtool")
needs_promtool = pytest.mark.skipif(
    PROMTOOL is None,
    reason="promtool is not on PATH (Debian's prometheus package has it; .ci/run extracts it)",
)
Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def page(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        return str(response.read().decode())


def samples(text: str) -> Samples:
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def scrape(port: int) -> Samples:
    return samples(page(port))


def promtool(*args: str, text: str = "") -> subprocess.CompletedProcess[str]:
    assert PROMTOOL is not None
    return subprocess.run(
        [PROMTOOL, *args], input=text, capture_output=True, text=True, timeout=60, check=False
    )


def test_metrics_are_served_and_advance_between_two_scrapes() -> None:
    writer = PrometheusWriter(PrometheusOptions(port=0, linger=0))
    with Bus() as bus:
        bus.add_writer(writer, name="prometheus")
        bus.emit(signals.run_started, RunStarted(run_id="r"))
        bus.emit(signals.stats, stats_event(100, category="C", reward=1.5))
        bus.flush(timeout=10)
        port = writer.port
        assert port is not None
        first = scrape(port)
        bus.emit(signals.stats, stats_event(200, category="C", reward=2.5))
        bus.flush(timeout=10)
        second = scrape(port)
        bus.emit(signals.run_finished, RunFinished(run_id="r", status=RunStatus.COMPLETED))
        bus.flush(timeout=10)
    step = ("evtrain_step", (("behavior", "C"),))
    assert (first[step], second[step]) == (100.0, 200.0)
    rewards = [v for (name, labels), v in second.items() if name == "evtrain_stat"]
    assert 2.5 in rewards and 1.5 not in rewards  # the latest value of the stat
    assert any(name == "evtrain_last_step_timestamp_seconds" for name, _ in second)
    assert second["evtrain_bus_delivered_total", (("subscriber", "prometheus"),)] >= 2
    assert any(name == "evtrain_bus_journaled" for name, _ in second)
    with pytest.raises(OSError):
        scrape(port)  # linger 0: closed with the bus


def test_the_bus_families_follow_prometheus_naming() -> None:
    """Units spelled out, counters ``_total``, the latencies one summary with quantiles, the
    cumulative stalled time a counter."""
    writer = PrometheusWriter(PrometheusOptions(port=0, linger=0))
    with Bus() as bus:
        bus.add_writer(writer, name="prometheus")
        bus.emit(signals.stats, stats_event(100, category="C", reward=1.5))
        bus.flush(timeout=10)
        assert writer.port is not None
        text = page(writer.port)
    families = {f.name: f for f in text_string_to_metric_families(text)}
    bus_families = {name: f.type for name, f in families.items() if name.startswith("evtrain_bus")}
    assert bus_families == {
        "evtrain_bus_delivered": "counter",
        "evtrain_bus_dropped": "counter",
        "evtrain_bus_failed": "counter",
        "evtrain_bus_retries": "counter",
        "evtrain_bus_replayed": "counter",
        "evtrain_bus_dead_lettered": "counter",
        "evtrain_bus_stalls": "counter",
        "evtrain_bus_stalled_seconds": "counter",
        "evtrain_bus_queued": "gauge",
        "evtrain_bus_high_water": "gauge",
        "evtrain_bus_disabled": "gauge",
        "evtrain_bus_journaled": "gauge",
        "evtrain_bus_latency_seconds": "summary",
    }
    assert '\nevtrain_bus_stalled_seconds_total{subscriber="prometheus"} 0.0\n' in text
    latency = families["evtrain_bus_latency_seconds"].samples
    assert [(s.name, s.labels) for s in latency] == [
        ("evtrain_bus_latency_seconds", {"subscriber": "prometheus", "quantile": "0.5"}),
        ("evtrain_bus_latency_seconds", {"subscriber": "prometheus", "quantile": "0.99"}),
    ]
    assert 0 < latency[0].value <= latency[1].value


@needs_promtool
def test_the_page_during_a_run_passes_promtool_check_metrics(tmp_path: Path) -> None:
    writer = PrometheusWriter(PrometheusOptions(port=0, linger=0))
    with Bus() as bus:
        bus.add_writer(writer, name="prometheus")
        bus.connect(
            signals.stats, lambda event: None, name="other", overflow="spool", journal_dir=tmp_path
        )
        bus.emit(signals.run_started, RunStarted(run_id="r"))
        for step in (100, 200):
            bus.emit(signals.stats, stats_event(step, category="C", reward=1.5))
        bus.flush(timeout=10)
        assert writer.port is not None
        text = page(writer.port)
    assert 'evtrain_bus_journaled{subscriber="other"}' in text
    checked = promtool("check", "metrics", text=text)
    assert (checked.returncode, checked.stdout, checked.stderr) == (0, "", "")


def test_the_final_values_linger_after_close_then_stop() -> None:
    writer = PrometheusWriter(PrometheusOptions(port=0, linger=600))
    try:
        with Bus() as bus:
            bus.add_writer(writer, name="prometheus")
            bus.emit(signals.run_finished, RunFinished(run_id="r", status=RunStatus.FAILED))
        port = writer.port
        assert port is not None and writer.lingering is not None
        assert writer.lingering.is_alive()
        assert scrape(port)["evtrain_run_finished", (("status", "failed"),)] == 1.0
    finally:
        writer.stop()  # what the end of the linger, or the process's exit, does
    assert not writer.lingering.is_alive()
    with pytest.raises(OSError):
        scrape(port)

    short = PrometheusWriter(PrometheusOptions(port=0, linger=0.2))
    try:
        with Bus() as bus:
            bus.add_writer(short, name="prometheus")
        port = short.port
        assert port is not None and short.lingering is not None
        short.lingering.join(timeout=60)  # it stops by itself
        assert not short.lingering.is_alive() and short.port is None
    finally:
        short.stop()
    with pytest.raises(OSError):
        scrape(port)


def test_a_cli_run_logs_its_port_and_lingers_until_ctrl_c(tmp_path: Path) -> None:
    """``port: 0`` names the port taken on one INFO line; after training the page still serves
    the final values (and passes promtool), the process waiting for the linger; Ctrl-C then
    ends it at once, exit code 0 and no traceback."""
    options = config(tmp_path, max_steps=256, summary_freq=128, checkpoint_interval=256)
    options["writers"] = {"prometheus": {"port": 0, "linger": 600}}
    (tmp_path / "run.yaml").write_text(yaml.safe_dump(options))
    proc = subprocess.Popen(
        [isolated_python(), "-m", "evtrain", "learn", "run.yaml"],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    watchdog = threading.Timer(300, proc.kill)  # a hung run fails the test, not the suite
    watchdog.start()
    try:
        assert proc.stderr is not None
        seen = []
        for line in proc.stderr:  # ends at the lingering line, or when the process does
            seen.append(line)
            if "Prometheus: serving the final values" in line:
                break
        served = [re.fullmatch(r"\[INFO\] Prometheus metrics on (\S+)\n", s) for s in seen]
        (url,) = [m.group(1) for m in served if m]
        port = int(re.fullmatch(r"http://127\.0\.0\.1:(\d+)/metrics", url).group(1))  # type: ignore[union-attr]
        assert port > 0
        assert seen[-1].startswith(f"[INFO] Prometheus: serving the final values on {url} ")
        assert seen[-1].endswith(
            " s more before exiting (writers.prometheus.linger); Ctrl-C stops now\n"
        )
        text = page(port)
        final = samples(text)
        assert final["evtrain_run_finished", (("status", "completed"),)] == 1.0
        assert final["evtrain_step", (("behavior", "CartPole"),)] == 256.0
        if PROMTOOL is not None:
            assert promtool("check", "metrics", text=text).returncode == 0
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    finally:
        watchdog.cancel()
        proc.kill()
    assert proc.returncode == 0, err
    assert err == ""  # no traceback, nothing else after the lingering line
    with pytest.raises(OSError):
        page(port)


@needs_promtool
def test_the_alert_rule_fires_after_ten_minutes_without_a_summary(tmp_path: Path) -> None:
    """The rule docs/trackers.md gives, run by ``promtool test rules`` on series whose last
    summary arrived at unix time 0: silent at 9 minutes, firing at 11, silent once finished."""
    doc = (ROOT / "docs" / "trackers.md").read_text()
    (rules,) = [b for b in re.findall(r"```yaml\n(.*?)```", doc, re.DOTALL) if "alert:" in b]
    (tmp_path / "rules.yml").write_text(rules)
    stuck = 'evtrain_last_step_timestamp_seconds{behavior="CartPole", instance="a", job="j"}'
    firing = {
        "exp_labels": {"severity": "warning", "behavior": "CartPole", "instance": "a", "job": "j"},
        "exp_annotations": {"summary": "CartPole: no summary for 10 minutes"},
    }
    cases: dict[str, tuple[list[dict[str, str]], list[list[dict[str, Any]]]]] = {
        "stuck": ([{"series": stuck, "values": "0x15"}], [[], [firing]]),
        "finished": (
            [
                {"series": stuck, "values": "0x15"},
                {
                    "series": 'evtrain_run_finished{status="completed", instance="a", job="j"}',
                    "values": "1x15",
                },
            ],
            [[], []],
        ),
    }
    tests = [
        {
            "name": name,
            "interval": "1m",
            "input_series": series,
            "alert_rule_test": [
                {"eval_time": when, "alertname": "EvtrainTrainerStuck", "exp_alerts": alerts}
                for when, alerts in zip(("9m", "11m"), expected, strict=True)
            ],
        }
        for name, (series, expected) in cases.items()
    ]
    unit = {"rule_files": ["rules.yml"], "evaluation_interval": "1m", "tests": tests}
    (tmp_path / "unit.yml").write_text(yaml.safe_dump(unit))
    checked = promtool("check", "rules", str(tmp_path / "rules.yml"))
    assert checked.returncode == 0, checked.stdout + checked.stderr
    tested = promtool("test", "rules", str(tmp_path / "unit.yml"))
    assert tested.returncode == 0, tested.stdout + tested.stderr
    assert "SUCCESS" in tested.stdout


@pytest.mark.parametrize(
    ("options", "problem"),
    [
        ({"port": 70000}, "port: expected a TCP port 0..65535 (0: any free port), got 70000"),
        (
            {"linger": -1},
            "linger: expected a number of seconds of at least 0 (0: stop with the run), got -1.0",
        ),
    ],
)
def test_bad_options_name_the_key(options: dict[str, Any], problem: str) -> None:
    run = RunOptions.from_dict({"writers": {"prometheus": options}})
    with pytest.raises(ConfigError) as info:
        get_prometheus_writers(run)
    assert info.value.problems == (f"writers.prometheus.{problem}",)
