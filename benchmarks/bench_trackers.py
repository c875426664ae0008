"""Logging to an MLflow server: what it costs training, and what a server outage does.

One ``mlflow server`` (sqlite store, 127.0.0.1) serves every run.  PPO CartPole (rl-zoo config,
``--steps`` steps, default writers on), each run its own process with one torch thread, the
variants alternating ``--repeats`` times:

* ``none`` — no tracker;
* ``evtrain`` — evtrain's ``mlflow`` writer (``writers: {mlflow: ...}``, the ``spool`` policy);
* ``evtrain-process`` — the same writer process-isolated
  (``bus.subscribers.<writer>.isolation: process``, docs/delivery.md);
* ``sync`` — what users write, and what Lightning's ``MLFlowLogger`` does: ``mlflow.log_metric``
  for every stat, called synchronously from the training loop (here: from ``Bus.emit``, on the
  trainer's thread, before the event is queued);
* ``evtrain-hung`` — evtrain's writer with the server ``SIGSTOP``-ed for the middle third of
  the run's steps and ``SIGCONT``-ed after;
* ``evtrain-killed`` — evtrain's writer with its own server (own store) ``SIGKILL``-ed at a
  third of the steps and started again (same store, same port) at two thirds;
* ``evtrain-dead`` — evtrain's writer with nothing listening at its URI for the whole run.

Per run: trainer steps/s (the steps between the first and the last summary over the time
between them: training itself; the start, imports and a tracker's check at start included, is
``first_summary_s``, and the final save and the writers' drain after the last summary are in
``wall_s``), the longest ``emit`` on the
training thread, the catch-up time (from the server answering again to the writer's journal
being empty), the exit delay (from the final summary to ``learn()`` returning: with a dead
tracker, how long the run waits for it), and for the MLflow variants the metric points read
back with ``MlflowClient.get_metric_history``: expected (every key of every ``stats`` event),
missing, duplicated (``evtrain-dead``: the events left in the journal instead).  Prints a
table and writes ``benchmarks/out/trackers.json``::

    python benchmarks/bench_trackers.py --steps 100000 --repeats 3
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

from common import CONFIGS, add_run_args, log_to_file, make_parser, run_child, write_json

CONFIG = CONFIGS / "cartpole_ppo.yaml"
VARIANTS = (
    "none",
    "evtrain",
    "evtrain-process",
    "sync",
    "evtrain-hung",
    "evtrain-killed",
    "evtrain-dead",
)
EXPERIMENT = "bench-trackers"
WRITER = "evtrain_writers.mlflow_writer.MlflowWriter"
CATCH_UP_WITHIN_S = 600.0


def child(variant: str, steps: int, uri: str, server_pid: int, out: Path) -> None:
    from evtrain import Bus, StatsEvent, signals
    from evtrain.run.learn import learn

    own = tempfile.TemporaryDirectory() if variant == "evtrain-killed" else None
    server: Server | None = None
    if own is not None:
        server = Server(Path(own.name))
        uri = server.start()
    elif variant == "evtrain-dead":
        uri = f"http://127.0.0.1:{_free_port()}"  # nothing listens there
    options: dict[str, Any] = yaml.safe_load(CONFIG.read_text())
    behavior = options["behaviors"]["CartPole"]
    behavior["max_steps"] = steps
    behavior["checkpoint_interval"] = steps * 10  # one final save in every variant
    if variant.startswith("evtrain"):
        options["writers"] = {"mlflow": {"tracking_uri": uri, "experiment": EXPERIMENT}}
    if variant == "evtrain-process":
        options["bus"] = {"subscribers": {WRITER: {"isolation": "process"}}}
    emits: list[float] = []
    last_stats: list[float] = []
    summary_steps: list[int] = []
    sent: list[StatsEvent] = []
    log_metric: Any = None
    if variant == "sync":
        import mlflow

        mlflow.set_tracking_uri(uri)
        mlflow.set_experiment(EXPERIMENT)
        mlflow.start_run(run_name=f"sync-{os.getpid()}")
        log_metric = mlflow.log_metric

    class TimedBus(Bus):
        """Times every emit on the trainer's thread; ``sync`` logs stats inside it."""

        def emit(self, sig: Any, payload: Any) -> None:
            start = time.perf_counter()
            if log_metric is not None and type(payload) is StatsEvent:
                for key, summary in payload.values.items():
                    log_metric(
                        f"{payload.category}/{key}", summary.aggregated_value, step=payload.step
                    )
            super().emit(sig, payload)
            end = time.perf_counter()
            emits.append(end - start)
            if type(payload) is StatsEvent:
                last_stats.append(end)
                summary_steps.append(payload.step)

    with tempfile.TemporaryDirectory() as tmp:
        options["checkpoint_settings"] = {"run_id": "bench", "results_dir": tmp}
        log_to_file(Path(tmp) / "console.log")
        stopped: list[float] = []
        caught_up: list[float] = []
        with TimedBus() as bus:

            def recovered() -> None:
                """The server answers again: time until the writer's journal is empty."""
                stopped.append(time.monotonic())
                deadline = stopped[-1] + CATCH_UP_WITHIN_S
                while time.monotonic() < deadline:
                    metrics = bus.metrics().get(WRITER)
                    if metrics is not None and metrics.journaled == 0:
                        caught_up.append(time.monotonic())
                        return
                    time.sleep(0.02)

            def restart() -> None:
                assert server is not None
                server.start()
                recovered()

            bus.connect(signals.stats, sent.append, name="bench.sent")
            if variant == "evtrain-hung":
                # The outage follows the training's own progress: stopped at a third of the
                # steps, continued at two thirds (a subscriber, so the trainer is not involved).
                def outage(event: StatsEvent) -> None:
                    if not stopped and event.step >= steps // 3:
                        os.killpg(server_pid, signal.SIGSTOP)
                        stopped.append(time.monotonic())
                    elif len(stopped) == 1 and event.step >= 2 * steps // 3:
                        os.killpg(server_pid, signal.SIGCONT)
                        threading.Thread(target=recovered, daemon=True).start()

                bus.connect(signals.stats, outage, name="bench.outage")
            elif variant == "evtrain-killed":

                def kill(event: StatsEvent) -> None:
                    assert server is not None
                    if not stopped and event.step >= steps // 3:
                        server.kill()
                        stopped.append(time.monotonic())
                    elif len(stopped) == 1 and event.step >= 2 * steps // 3:
                        stopped.append(0.0)  # restarting (it takes seconds: off this thread)
                        threading.Thread(target=restart, daemon=True).start()

                bus.connect(signals.stats, kill, name="bench.outage")
            start = time.perf_counter()
            try:
                result = learn(options, bus)
            finally:
                if len(stopped) == 1 and variant == "evtrain-hung":
                    os.killpg(server_pid, signal.SIGCONT)
            wall = time.perf_counter() - start
            exit_delay = time.perf_counter() - last_stats[-1]
            train = last_stats[-1] - start  # the final summary: training is over
            close_start = time.perf_counter()
        close_s = time.perf_counter() - close_start
        run_id = None
        record = Path(tmp) / "bench" / "run_logs" / "mlflow.json"
        if record.exists():
            run_id = json.loads(record.read_text()).get("run_id")
        metrics = {name: m.as_dict() for name, m in bus.metrics().items()}
    if variant == "evtrain-killed":  # the restart may still be under way: wait for it
        deadline = time.monotonic() + CATCH_UP_WITHIN_S
        while len(stopped) == 2 and time.monotonic() < deadline:
            time.sleep(0.1)
    if variant == "evtrain-dead":
        run_id = None  # nothing to read back: what is left is in the journal
    if variant == "sync":
        import mlflow

        active = mlflow.active_run()
        run_id = active.info.run_id if active is not None else None
        mlflow.end_run()
    expected = Counter((f"{e.category}/{key}", e.step) for e in sent for key in e.values)
    points = _read_back(uri, run_id, {key for key, _ in expected}) if run_id else None
    total_steps = sum(result.steps.values())
    out.write_text(
        json.dumps(
            {
                "variant": variant,
                "wall_s": wall,
                "train_s": train,
                "steps": total_steps,
                # trainer steps/s: from the first summary to the last, i.e. while training
                # (the start -- imports, the trackers' checks -- is in first_summary_s; the
                # final save and the drain of the writers come after it and are in wall_s)
                # (with a single summary, a run too short for that: the whole-run rate)
                "steps_per_s": (summary_steps[-1] - summary_steps[0])
                / (last_stats[-1] - last_stats[0])
                if len(summary_steps) > 1
                else total_steps / train,
                "first_summary_s": last_stats[0] - start,
                "steps_per_s_whole": total_steps / train,
                "emit_max_ms": max(emits) * 1000.0,
                "emit_p99_us": sorted(emits)[int(0.99 * (len(emits) - 1))] * 1e6,
                "emits": len(emits),
                "outage_s": stopped[-1] - stopped[0] if len(stopped) >= 2 else None,
                "catch_up_s": caught_up[0] - stopped[-1] if caught_up else None,
                "exit_delay_s": exit_delay,
                "journaled_at_exit": metrics.get(WRITER, {}).get("journaled"),
                "close_after_learn_s": close_s,
                "expected_points": sum(expected.values()),
                "missing_points": None
                if points is None
                else sum(1 for k in expected if points[k] == 0),
                "duplicated_points": None
                if points is None
                else sum(n - 1 for n in points.values() if n > 1),
                "mlflow_run_id": run_id,
                "bus": metrics,
            }
        )
    )
    if server is not None:
        server.stop()
    if own is not None:
        own.cleanup()


def _read_back(uri: str, run_id: str, keys: set[str]) -> Counter[tuple[str, int]]:
    from mlflow import MlflowClient

    client = MlflowClient(tracking_uri=uri)
    points: Counter[tuple[str, int]] = Counter()
    for key in keys:
        for metric in client.get_metric_history(run_id, key):
            points[(key, metric.step)] += 1
    return points


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Server:
    """A real ``mlflow server`` on 127.0.0.1 with a sqlite store under ``folder``; it can be
    killed and started again on the same store and port."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.port = _free_port()
        self.uri = f"http://127.0.0.1:{self.port}"
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> str:
        mlflow = Path(sys.executable).parent / "mlflow"
        self.process = subprocess.Popen(
            [
                str(mlflow),
                "server",
                "--backend-store-uri",
                f"sqlite:///{self.folder / 'mlflow.db'}",
                "--default-artifact-root",
                str(self.folder / "artifacts"),
                "--host",
                "127.0.0.1",
                "--port",
                str(self.port),
                "--workers",
                "1",
            ],
            stdout=subprocess.DEVNULL,
            stderr=(self.folder / "server.log").open("a"),
            start_new_session=True,  # its workers go with it
        )
        for _ in range(240):  # bounded: 60 s
            try:
                with urllib.request.urlopen(f"{self.uri}/health", timeout=1) as answer:
                    if answer.status == 200:
                        return self.uri
            except OSError:
                time.sleep(0.25)
        raise RuntimeError(f"mlflow server did not answer; see {self.folder / 'server.log'}")

    def kill(self) -> None:
        if self.process is not None:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(10)
            self.process = None

    def stop(self) -> None:
        if self.process is None:
            return
        os.killpg(self.process.pid, signal.SIGCONT)
        os.killpg(self.process.pid, signal.SIGTERM)
        try:
            self.process.wait(10)
        except subprocess.TimeoutExpired:
            self.kill()
        self.process = None


@contextlib.contextmanager
def mlflow_server(folder: Path) -> Iterator[tuple[str, int]]:
    """The shared server of the run: ``(uri, pid)``; ``SIGSTOP`` to its process group hangs
    it."""
    server = Server(folder)
    uri = server.start()
    try:
        assert server.process is not None
        yield uri, server.process.pid  # its process group: os.killpg hangs it whole
    finally:
        server.stop()


def main() -> None:
    parser = make_parser(__doc__)
    add_run_args(parser, steps=100_000, repeats=3)
    parser.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=VARIANTS)
    parser.add_argument("--variant", help=argparse.SUPPRESS)
    parser.add_argument("--uri", help=argparse.SUPPRESS)
    parser.add_argument("--server-pid", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--out", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.variant:
        child(args.variant, args.steps, args.uri, args.server_pid, args.out)
        return
    runs: dict[str, list[dict[str, Any]]] = {v: [] for v in args.variants}
    with tempfile.TemporaryDirectory() as folder, mlflow_server(Path(folder)) as (uri, pid):
        for repeat in range(args.repeats):
            for variant in runs:
                print(f"repeat {repeat + 1}: {variant}...", file=sys.stderr, flush=True)
                command = [sys.executable, __file__, "--variant", variant]
                command += ["--steps", str(args.steps), "--uri", uri, "--server-pid", str(pid)]
                runs[variant].append(run_child(command))
    report(runs)


def report(runs: dict[str, list[dict[str, Any]]]) -> None:
    rate = {v: statistics.median(r["steps_per_s"] for r in rs) for v, rs in runs.items()}
    base = rate.get("none")
    print(
        f"{'variant':<14}{'steps/s (each run)':>28}{'median':>9}{'vs none':>9}"
        f"{'max emit ms':>13}{'points':>9}{'missing':>9}{'dup':>5}{'catch-up s':>12}"
        f"{'exit delay s':>14}{'journaled':>11}{'1st summary s':>15}"
    )
    for variant, rs in runs.items():
        each = ", ".join(f"{r['steps_per_s']:.0f}" for r in rs)
        versus = f"{(rate[variant] / base - 1.0) * 100.0:+.1f}%" if base else "-"
        worst = max(r["emit_max_ms"] for r in rs)
        points = rs[0]["expected_points"]
        missing = sum(r["missing_points"] or 0 for r in rs) if rs[0]["mlflow_run_id"] else "-"
        dup = sum(r["duplicated_points"] or 0 for r in rs) if rs[0]["mlflow_run_id"] else "-"
        catch_up = [r["catch_up_s"] for r in rs if r.get("catch_up_s") is not None]
        caught = f"{max(catch_up):.1f}" if catch_up else "-"
        delay = max(r["exit_delay_s"] for r in rs)
        left = max((r.get("journaled_at_exit") or 0) for r in rs)
        first = statistics.median(r["first_summary_s"] for r in rs)
        print(
            f"{variant:<14}{each:>28}{rate[variant]:>9.0f}{versus:>9}{worst:>13.1f}"
            f"{points:>9}{missing!s:>9}{dup!s:>5}{caught:>12}{delay:>14.1f}{left:>11}"
            f"{first:>15.1f}"
        )
    # The machine drifts between runs by more than some effects: each repeat's pair, run back
    # to back, as a ratio too.
    if base:
        for variant in runs:
            if variant == "none":
                continue
            paired = statistics.median(
                b["steps_per_s"] / a["steps_per_s"]
                for a, b in zip(runs["none"], runs[variant], strict=True)
            )
            print(f"{variant}: median paired ratio to none {(paired - 1.0) * 100.0:+.1f} %")
    for variant in ("evtrain-hung", "evtrain-killed"):
        for r in runs.get(variant, []):
            if r["outage_s"] is not None:
                print(f"{variant}: server down for {r['outage_s']:.1f} s of the run")
    write_json("trackers.json", {"runs": runs, "median_steps_per_s": rate})


if __name__ == "__main__":
    main()
