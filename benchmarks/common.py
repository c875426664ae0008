"""What the benchmark scripts share: where they write, how they start runs, how they count.

Every ``bench_*.py`` script runs a configuration over seeds (or repeats), each run in a process
of its own, and collects steps/s and episode returns; this module holds the parts that were the
same in each:

* the output folder and the JSON report (:func:`out_dir`, :func:`write_json`, :func:`machine`);
* the command-line arguments most scripts take (:func:`make_parser`, :func:`add_run_args`);
* runs in fresh processes: a worker that prints its result as the last line of its output
  (:func:`run_worker`), a child that writes it to a file (:func:`run_child`), ``evtrain learn``
  on a configuration written to a folder (:func:`learn_process`), ``learn()`` in this process
  (:func:`learn_here`);
* episode returns: a reporter that sees each one (:func:`reward_reporter`), the returns of a
  ``stats`` event (:func:`episode_returns`), and :class:`ReturnTracker` for "the env step at
  which the mean of the last N returns first reached a target";
* medians over seeds (:func:`median_of`, :func:`median_with_misses`) and fixed-width tables
  (:class:`Column`, :func:`header`, :func:`row`).

The scripts run as ``python benchmarks/bench_x.py``, which puts this folder on ``sys.path``:
they import it as ``common``.  Nothing here imports torch or evtrain at module level, so a
script's ``--help`` stays fast.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from evtrain import Bus, StatsEvent, StatsReporter
    from evtrain.run.learn import LearnResult

HERE = Path(__file__).resolve().parent
"""The ``benchmarks/`` folder (also where ``bench_envs`` lives)."""
ROOT = HERE.parent
"""The repository."""
CONFIGS = ROOT / "examples" / "configs"
"""The example configurations several benchmarks start from."""
OUT_ENV = "EVTRAIN_BENCH_OUT"
"""Environment variable: a folder to write the JSON reports to instead of ``benchmarks/out``."""
CUMULATIVE_REWARD = "Environment/Cumulative Reward"
"""The stat key of an episode's return (``evtrain.events.stats.CUMULATIVE_REWARD``)."""


# -- output ----------------------------------------------------------------------------------


def out_dir() -> Path:
    """Where reports go: ``$EVTRAIN_BENCH_OUT`` if set (the smoke test), else ``benchmarks/out``."""
    return Path(os.environ.get(OUT_ENV) or HERE / "out")


def stamped(prefix: str) -> str:
    """A report name that does not overwrite earlier ones: ``<prefix>-YYYYmmdd-HHMMSS.json``."""
    return f"{prefix}-{time.strftime('%Y%m%d-%H%M%S')}.json"


def write_json(name: str | Path, report: Mapping[str, Any]) -> Path:
    """Write ``report`` (indented) to ``name`` under :func:`out_dir` (or to ``name`` itself
    if it is an absolute path), creating the folder; the path written.

    :param name: a file name such as ``"sac.json"``, or an absolute path.
    :param report: plain JSON values.
    """
    path = Path(name) if Path(name).is_absolute() else out_dir() / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(report, indent=2))
    return path


def machine() -> dict[str, Any]:
    """What a report says about where it ran: Python, architecture, cores and the date."""
    return {
        "python": platform.python_version(),
        "machine": platform.machine(),
        "cpus": os.cpu_count(),
        "date": time.strftime("%Y-%m-%d %H:%M:%S"),
    }


# -- command line ----------------------------------------------------------------------------


def make_parser(doc: str | None) -> argparse.ArgumentParser:
    """A parser described by the first line of a script's docstring."""
    return argparse.ArgumentParser(description=(doc or "").split("\n")[0])


def add_run_args(
    parser: argparse.ArgumentParser,
    *,
    steps: int | None = None,
    seeds: Sequence[int] | None = None,
    repeats: int | None = None,
    steps_help: str | None = None,
) -> None:
    """Add ``--steps``, ``--seeds`` and ``--repeats``: each only when given a default.

    :param steps: the default of ``--steps`` (env steps per run).
    :param seeds: the default of ``--seeds`` (one run per seed).
    :param repeats: the default of ``--repeats`` (runs of each variant, alternating).
    :param steps_help: the help text of ``--steps``.
    """
    if steps is not None:
        parser.add_argument("--steps", type=int, default=steps, help=steps_help)
    if seeds is not None:
        parser.add_argument("--seeds", type=int, nargs="+", default=list(seeds))
    if repeats is not None:
        parser.add_argument("--repeats", type=int, default=repeats)


# -- processes -------------------------------------------------------------------------------


def one_torch_thread() -> None:
    """One torch thread in this process, as every benchmarked run has."""
    import torch

    torch.set_num_threads(1)


def bench_env(**extra: str) -> dict[str, str]:
    """This process's environment with ``benchmarks/`` first on ``PYTHONPATH`` (so that
    configurations can name ``bench_envs:<function>``, in the run and in async env workers),
    plus ``extra``."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(HERE), env.get("PYTHONPATH")]))
    env.update(extra)
    return env


def _check(command: Sequence[str], done: subprocess.CompletedProcess[str]) -> None:
    if done.returncode != 0:
        raise RuntimeError(
            f"{' '.join(command)} exited with {done.returncode}; expected 0. Its stderr "
            f"ends:\n{done.stderr[-3000:]}"
        )


def run_worker(command: Sequence[str], env: Mapping[str, str] | None = None) -> Any:
    """Run ``command`` (a script's hidden worker mode) and parse the last line it printed.

    :raises RuntimeError: if it fails; the message holds the end of its stderr.
    """
    done = subprocess.run(
        list(command), capture_output=True, text=True, env=None if env is None else dict(env)
    )
    _check(command, done)
    return json.loads(done.stdout.strip().splitlines()[-1])


def spawn(script: str, name: str, *args: int) -> dict[str, Any]:
    """``script --worker name args...`` in a fresh process (said on stderr); its result."""
    print(f"{name} {' '.join(map(str, args))}...", file=sys.stderr, flush=True)
    result: dict[str, Any] = run_worker([sys.executable, script, "--worker", name, *map(str, args)])
    return result


def run_child(command: Sequence[str]) -> dict[str, Any]:
    """Run ``command --out FILE`` (a child that writes its result as JSON to FILE); the result.

    The child's output goes to this process's terminal.
    """
    with tempfile.NamedTemporaryFile(suffix=".json") as tmp:
        subprocess.run([*command, "--out", tmp.name], check=True)
        result: dict[str, Any] = json.loads(Path(tmp.name).read_text())
    return result


def timed_run(command: Sequence[str], cwd: Path, env: Mapping[str, str]) -> float:
    """Seconds ``command`` took, from just before it started to its exit."""
    start = time.perf_counter()
    done = subprocess.run(list(command), cwd=cwd, env=dict(env), capture_output=True, text=True)
    seconds = time.perf_counter() - start
    _check(command, done)
    return seconds


def evtrain_command() -> list[str]:
    """The ``evtrain`` console script beside this interpreter."""
    return [str(Path(sys.executable).with_name("evtrain"))]


@dataclass(frozen=True)
class LearnRun:
    """One ``evtrain learn`` process: how long it took, and where it wrote."""

    seconds: float
    """Wall time from just before the process started to its exit."""
    run_folder: Path
    """``results/<run_id>``."""

    def timers(self) -> dict[str, Any]:
        """The run's ``run_logs/timers.json`` (a tree of ``total``/``children``)."""
        timers: dict[str, Any] = json.loads(
            (self.run_folder / "run_logs" / "timers.json").read_text()
        )
        return timers


def learn_process(
    config: Mapping[str, Any],
    folder: Path,
    run_id: str,
    *,
    launcher: Sequence[str] | None = None,
    env: Mapping[str, str] | None = None,
) -> LearnRun:
    """Write ``config`` to ``folder/config.yaml`` and run ``evtrain learn`` on it there.

    :param config: the run's configuration as YAML would give it; its ``results_dir``, if
        any, must be ``folder/results`` (relative or absolute) for :attr:`LearnRun.run_folder`.
    :param run_id: given as ``--run-id`` (with ``--force``, so runs can reuse ``folder``).
    :param launcher: what runs evtrain (default: the ``evtrain`` script beside this
        interpreter; ``torchrun ... -m evtrain`` for several ranks).
    :param env: the process's environment (default: :func:`bench_env`).
    :raises RuntimeError: if the run fails; the message holds the end of its stderr.
    """
    import yaml

    (folder / "config.yaml").write_text(yaml.safe_dump(dict(config)))
    command = [*(launcher or evtrain_command()), "learn", "config.yaml"]
    command += ["--run-id", run_id, "--force"]
    seconds = timed_run(command, folder, bench_env() if env is None else env)
    return LearnRun(seconds=seconds, run_folder=folder / "results" / run_id)


def timer_total(tree: Mapping[str, Any], name: str) -> float:
    """The total seconds of every timer called ``name`` in a ``timers.json`` tree."""
    total = 0.0
    for child_name, child in tree.get("children", {}).items():
        if child_name == name:
            total += float(child["total"])
        total += timer_total(child, name)
    return total


def log_to_file(path: Path) -> None:
    """Send evtrain's log (the console writer's lines) to ``path``: a terminal would slow
    the whole machine, not just the writer."""
    log = logging.getLogger("evtrain")
    log.addHandler(logging.FileHandler(path))
    log.setLevel(logging.INFO)
    log.propagate = False


def learn_here(
    options: dict[str, Any], on_stats: Callable[[StatsEvent], None]
) -> tuple[LearnResult, float]:
    """``learn(options)`` in this process, into a temporary results folder, with ``on_stats``
    subscribed to ``stats``; the result and the seconds ``learn`` took (imports excluded).

    :param options: the configuration; its ``checkpoint_settings`` are replaced.
    """
    from evtrain import Bus, signals
    from evtrain.run.learn import learn

    with tempfile.TemporaryDirectory() as tmp:
        options = {**options, "checkpoint_settings": {"run_id": "bench", "results_dir": tmp}}
        with Bus() as bus:
            bus.connect(signals.stats, on_stats)
            start = time.perf_counter()
            result = learn(options, bus)
            elapsed = time.perf_counter() - start
    return result, elapsed


def timed_learn(options: dict[str, Any], bus: Bus) -> tuple[LearnResult, dict[str, float]]:
    """``learn(options, bus)``, timed: its wall seconds (``wall_s``), and the CPU seconds
    inside it of the calling thread, which trains (``main_cpu_s``), and of every other thread
    of the process — the bus's dispatcher and subscribers, torch's, gymnasium's
    (``other_cpu_s``)."""
    from evtrain.run.learn import learn

    start = time.perf_counter()
    cpu_start, main_start = time.process_time(), time.thread_time()
    result = learn(options, bus)
    wall = time.perf_counter() - start
    cpu = time.process_time() - cpu_start
    main_cpu = time.thread_time() - main_start
    return result, {"wall_s": wall, "main_cpu_s": main_cpu, "other_cpu_s": cpu - main_cpu}


# -- episode returns -------------------------------------------------------------------------


def episode_returns(event: StatsEvent) -> tuple[float, ...]:
    """The returns of the episodes a ``stats`` event summarizes (none if it has no key)."""
    summary = event.values.get(CUMULATIVE_REWARD)
    return () if summary is None else tuple(summary.full_dist)


def reward_reporter(bus: Bus, category: str, on_return: Callable[[float], None]) -> StatsReporter:
    """A :class:`~evtrain.StatsReporter` that also hands each episode's return to
    ``on_return`` as the trainer records it (before any aggregation)."""
    from evtrain import StatsAggregationMethod, StatsReporter

    class TrackingReporter(StatsReporter):
        def add_stat(
            self,
            key: str,
            value: float,
            aggregation: StatsAggregationMethod = StatsAggregationMethod.AVERAGE,
        ) -> None:
            if key == CUMULATIVE_REWARD:
                on_return(value)
            super().add_stat(key, value, aggregation)

    return TrackingReporter(bus, category)


@dataclass
class ReturnTracker:
    """Episode returns with the env step each finished at, and the first step at which the
    mean of the last ``window`` returns reached ``target``.

    :param window: how many of the latest returns a mean is over.
    :param target: the mean to reach (``None``: only record).
    :param step: the current env step, read when :meth:`add` is given none.
    """

    window: int
    target: float | None = None
    step: Callable[[], int] = lambda: 0
    returns: list[float] = field(default_factory=list)
    """Every return so far, in order."""
    steps: list[int] = field(default_factory=list)
    """The env step each return was recorded at."""
    hit: int | None = None
    """The env step at which the mean of ``window`` first reached ``target`` (``None``: not yet)."""

    def add(self, value: float, step: int | None = None) -> None:
        """Record one episode's return, finished at ``step`` (default: ``self.step()``)."""
        step = self.step() if step is None else step
        self.returns.append(value)
        self.steps.append(step)
        last = self.returns[-self.window :]
        if (
            self.hit is None
            and self.target is not None
            and len(last) == self.window
            and sum(last) / self.window >= self.target
        ):
            self.hit = step

    def last_mean(self, digits: int | None = None) -> float | None:
        """The mean of the last ``window`` returns (fewer if there are fewer), rounded to
        ``digits`` if given; ``None`` before the first."""
        last = self.returns[-self.window :]
        if not last:
            return None
        mean = sum(last) / len(last)
        return mean if digits is None else round(mean, digits)

    @classmethod
    def from_episodes(
        cls, episodes: Iterable[Sequence[Any]], window: int, target: float
    ) -> ReturnTracker:
        """A tracker fed ``(step, index, return)`` records (``bench_envs:returns_cartpole``)."""
        tracker = cls(window, target)
        for step, _, value in episodes:
            tracker.add(float(value), int(step))
        return tracker


def train(
    trainer: Any,
    until: Callable[[], bool] | None = None,
    after_advance: Callable[[], None] | None = None,
) -> tuple[float, float]:
    """Advance ``trainer`` until ``until()`` (default: ``trainer.should_stop``); the wall and
    CPU seconds of this process that took.

    :param after_advance: called after every ``advance`` (inside the timing).
    """
    stop = until or (lambda: bool(trainer.should_stop))
    start, cpu_start = time.perf_counter(), time.process_time()
    while not stop():
        trainer.advance()
        if after_advance is not None:
            after_advance()
    return time.perf_counter() - start, time.process_time() - cpu_start


# -- summaries -------------------------------------------------------------------------------


def median_of(runs: Iterable[Mapping[str, Any]], key: str, **where: Any) -> Any:
    """The median of ``run[key]`` over the runs whose fields equal ``where``."""
    return statistics.median(
        r[key] for r in runs if all(r[name] == value for name, value in where.items())
    )


def median_with_misses(hits: Iterable[int | None]) -> float:
    """The median of ``hits``, a seed that never reached the target (``None``) counting as
    infinitely slow."""
    return statistics.median(h if h is not None else float("inf") for h in hits)


@dataclass(frozen=True)
class Column:
    """One column of a fixed-width table.

    :param title: the header.
    :param width: characters, the title's and every value's.
    :param spec: the format of non-string values (``".1f"``, ``",d"``); strings are shown as
        they are.
    :param align: ``"<"`` or ``">"``.
    """

    title: str
    width: int
    spec: str = ""
    align: str = ">"


def header(columns: Sequence[Column], sep: str = "") -> str:
    """The titles of ``columns``, each in its width."""
    return sep.join(format(c.title, f"{c.align}{c.width}") for c in columns)


def row(columns: Sequence[Column], values: Sequence[Any], sep: str = "") -> str:
    """One line of ``values`` under ``columns``."""
    return sep.join(
        format(v, f"{c.align}{c.width}" if isinstance(v, str) else f"{c.align}{c.width}{c.spec}")
        for c, v in zip(columns, values, strict=True)
    )


def percentiles(samples_ns: list[int]) -> dict[str, float]:
    """p50, p99, p99.9 and the largest of ``samples_ns`` (nanoseconds), in microseconds."""
    ordered = sorted(samples_ns)
    n = len(ordered)

    def at(q: float) -> float:
        return ordered[min(n - 1, int(q * n))] / 1000.0

    return {
        "p50_us": at(0.5),
        "p99_us": at(0.99),
        "p999_us": at(0.999),
        "max_us": ordered[-1] / 1000.0,
    }
