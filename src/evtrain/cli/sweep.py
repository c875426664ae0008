"""``evtrain sweep CONFIG --study NAME --trials N [--workers W] [--storage PATH] [--resume]``.

This process is worker 0; ``--workers W`` starts W - 1 more, each ``evtrain sweep`` with a
hidden ``--worker-index``, in a session of its own (so a Ctrl-C in the terminal reaches this
process alone), writing its log to ``<study>/workers/worker-<i>.log``.  Each SIGTERM, SIGHUP or
SIGINT this process handles, it passes on to each worker as a SIGTERM (at once outside its own
trial's run, else once that run has stopped): the first stops every trial under way with its
final save, the second aborts (:mod:`evtrain.sweep.interrupt`).  Once every worker is done, the
table of trials and ``best.yaml``.  The code of a sweep is :mod:`evtrain.sweep`'s; here, the
command.
"""

from __future__ import annotations

import argparse
import logging
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from evtrain.cli.arguments import positive_int
from evtrain.config.names import name_problem
from evtrain.errors import ConfigError
from evtrain.extras import install_hint

if TYPE_CHECKING:
    import optuna

    from evtrain.sweep.trials import Sweep

    _Commands = argparse._SubParsersAction[argparse.ArgumentParser]

logger = logging.getLogger("evtrain")


def add_sweep(commands: _Commands) -> argparse.ArgumentParser:
    """The ``sweep`` sub-parser."""
    sweep = commands.add_parser(
        "sweep", help="search hyperparameters with Optuna over a config's sweep: section"
    )
    sweep.add_argument("config", help="YAML config with a sweep: section (docs/sweeps.md)")
    sweep.add_argument("--study", required=True, help="the study's name (its results folder)")
    sweep.add_argument(
        "--trials", type=positive_int, required=True, help="trials the study should have in all"
    )
    sweep.add_argument(
        "--workers", type=positive_int, default=1, help="processes running trials (default 1)"
    )
    sweep.add_argument(
        "--storage",
        metavar="PATH",
        help="Optuna journal file (default: <results_dir>/<study>/study.journal); workers on "
        "other machines name the same file on a shared disk",
    )
    sweep.add_argument(
        "--resume", action="store_true", help="continue (or join) the study if it exists"
    )
    sweep.add_argument("--results-dir", help="checkpoint_settings.results_dir")
    sweep.add_argument("--worker-index", type=int, default=None, help=argparse.SUPPRESS)
    return sweep


def prepare(args: argparse.Namespace) -> Sweep:
    """What every worker of the sweep ``args`` describes needs; the config checked whole.

    :raises ConfigError: no ``sweep`` section, a bad study name or objective behavior, a
        parameter path that leads nowhere.
    """
    from evtrain.run.options import options_and_types, read_config
    from evtrain.sweep.space import check_space
    from evtrain.sweep.study import config_digest, file_in_the_way
    from evtrain.sweep.trials import Sweep

    data = read_config(args.config)
    if args.results_dir is not None:
        checkpoints = data.setdefault("checkpoint_settings", {})
        if not isinstance(checkpoints, dict):
            raise ConfigError(
                [f"checkpoint_settings: expected a mapping of options, got {checkpoints!r}"]
            )
        checkpoints["results_dir"] = args.results_dir
    options, _ = options_and_types(data)
    settings = options.sweep
    if settings is None:
        raise ConfigError(
            [
                f"sweep: {args.config} has no sweep section; add one with the parameters to "
                "search (docs/sweeps.md), or train it once with evtrain learn"
            ]
        )
    problem = name_problem(args.study, "the study's name to be")
    if problem is not None:
        raise ConfigError([f"--study: {problem}"])
    behavior = settings.objective.behavior
    if behavior is None and len(options.behaviors) == 1:
        behavior = next(iter(options.behaviors))
    if behavior not in options.behaviors:
        names = ", ".join(options.behaviors)
        raise ConfigError(
            [f"sweep.objective.behavior: expected one of the config's behaviors ({names})"]
        )
    check_space(data, settings)
    folder = Path(options.checkpoint_settings.results_dir) / args.study
    in_the_way = file_in_the_way(folder)
    if in_the_way is not None:
        key = "checkpoint_settings.results_dir" if args.results_dir is None else "--results-dir"
        raise ConfigError(
            [
                f"{key}: {in_the_way} is a file, not a folder; the study's folder {folder} "
                "cannot be made there: give a folder (made if missing)"
            ]
        )
    return Sweep(
        data=data,
        settings=settings,
        behavior=behavior,
        study=args.study,
        folder=folder,
        storage=Path(args.storage) if args.storage else folder / "study.journal",
        trials=args.trials,
        digest=config_digest(data),
    )


def run_sweep(args: argparse.Namespace) -> int:
    """``evtrain sweep``: 0 once the study has its trials, or once an interrupt stopped the sweep
    and every trial under way with its final save; 1 when a worker process failed."""
    from evtrain.sweep.interrupt import stop_on_interrupts
    from evtrain.sweep.trials import run_worker, study_of

    try:
        import optuna  # noqa: F401  # only to say what to install when it is missing
    except ImportError:
        print(
            "evtrain: error: evtrain sweep needs Optuna, which is not installed; "
            f"{install_hint('sweep')}",
            file=sys.stderr,
        )
        return 2
    workers = _Workers()
    # From before the study is opened: an interrupt never cuts a write to the journal short.
    with stop_on_interrupts(on_interrupt=workers.pass_on) as stop:
        sweep = prepare(args)
        if args.worker_index is not None:  # started by the first process
            if stop.requested is None:
                run_worker(sweep, study_of(sweep, create=False), stop)
            return 0
        study = study_of(sweep, create=not args.resume)
        try:
            for index in range(1, args.workers):
                if stop.requested is None:
                    workers.start(args, sweep, index)
            finished = run_worker(sweep, study, stop)
            if not finished:
                workers.stop()  # a signal that this process's trial's run handled
            failed = workers.wait()
        except KeyboardInterrupt:
            workers.abort()  # a second interrupt: aborted here, so there too
            raise
        except BaseException:
            workers.stop()
            workers.wait()
            raise
        _summary(sweep, study)
        if not finished or stop.requested is not None:
            print(f"Interrupted. Continue with: {_resume_line(args)}")
    for index in failed:
        log = _worker_log(sweep, index)
        print(f"evtrain: error: worker {index} failed; see {log}", file=sys.stderr)
    return 1 if failed else 0


ABORT_WAIT_S = 30.0
"""How long a second interrupt waits for the workers to abort before it kills them."""


class _Workers:
    """The worker processes this one started, and the interrupts passed on to them."""

    def __init__(self) -> None:
        self.processes: dict[int, subprocess.Popen[bytes]] = {}
        """By worker index."""
        self.passed = 0
        """How many SIGTERMs each running worker was sent."""

    def start(self, args: argparse.Namespace, sweep: Sweep, index: int) -> None:
        """Start worker ``index``: ``evtrain sweep`` with ``--worker-index``, in a session of
        its own (a Ctrl-C in the terminal reaches this process alone, which passes it on),
        its output in its log."""
        command = [sys.executable, "-m", "evtrain", *(["--debug"] if args.debug else [])]
        command += ["sweep", args.config, "--study", sweep.study, "--trials", str(sweep.trials)]
        command += ["--storage", str(sweep.storage), "--worker-index", str(index)]
        if args.results_dir is not None:
            command += ["--results-dir", args.results_dir]
        log = _worker_log(sweep, index)
        log.parent.mkdir(parents=True, exist_ok=True)
        with log.open("ab") as output:
            worker = subprocess.Popen(
                command, stdout=output, stderr=subprocess.STDOUT, start_new_session=True
            )
        self.processes[index] = worker
        logger.info("Worker %d started (pid %d); its log: %s", index, worker.pid, log)

    def pass_on(self, signum: int = signal.SIGTERM) -> None:
        """One SIGTERM to each worker still running (whatever interrupt this process got: a
        worker may ignore SIGINT, as a job started with ``&`` does)."""
        self.passed += 1
        for worker in self.processes.values():
            if worker.poll() is None:
                worker.send_signal(signal.SIGTERM)

    def stop(self) -> None:
        """Each running worker asked to stop, once: its trial stops with its final save."""
        if self.passed == 0:
            self.pass_on()

    def wait(self) -> list[int]:
        """Wait for every worker to exit; the indexes of those that failed."""
        running = [f"{i} (pid {w.pid})" for i, w in self.processes.items() if w.poll() is None]
        if running:
            logger.info("Waiting for worker %s to finish", ", ".join(running))
        return [index for index, worker in self.processes.items() if worker.wait() != 0]

    def abort(self) -> None:
        """A second SIGTERM to each running worker (it aborts its trial); those still running
        :data:`ABORT_WAIT_S` later are killed."""
        while self.passed < 2:
            self.pass_on()
        deadline = time.monotonic() + ABORT_WAIT_S
        for worker in self.processes.values():
            try:
                worker.wait(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                worker.kill()
                worker.wait()


def _worker_log(sweep: Sweep, index: int) -> Path:
    return sweep.folder / "workers" / f"worker-{index}.log"


def _summary(sweep: Sweep, study: optuna.Study) -> None:
    from evtrain.sweep.results import best_run_id, learn_line, table, write_best

    trials = study.get_trials(deepcopy=False)
    print(f"Study {sweep.study} ({sweep.storage}): {len(trials)} trials")
    for line in table(trials, list(sweep.settings.parameters)):
        print(line)
    best = _best(study)
    if best is None:
        print("No trial completed: no best.yaml")
        return
    path = write_best(sweep.folder, sweep.data, best, sweep.settings.objective.stat, sweep.study)
    print(f"Best: trial {best.number}, {sweep.settings.objective.stat} {best.value:.6g}")
    print(f"Its config: {path}, run id {best_run_id(sweep.study, best)}; train it with:")
    print(f"  {learn_line(path)}")


def _best(study: optuna.Study) -> optuna.trial.FrozenTrial | None:
    try:
        return study.best_trial
    except ValueError:  # no trial completed
        return None


def _resume_line(args: argparse.Namespace) -> str:
    command: list[Any] = ["evtrain", "sweep", args.config, "--study", args.study]
    command += ["--trials", args.trials, "--workers", args.workers]
    if args.storage:
        command += ["--storage", args.storage]
    if args.results_dir:
        command += ["--results-dir", args.results_dir]
    return shlex.join([str(c) for c in [*command, "--resume"]])
