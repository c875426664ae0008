"""``evtrain sweep CONFIG --study NAME --trials N [--workers W] [--storage PATH] [--resume]``.

This process is worker 0; ``--workers W`` starts W - 1 more, each ``evtrain sweep`` with a
hidden ``--worker-index``, in a session of its own (so a Ctrl-C in the terminal reaches this
process, which passes one SIGINT on to each: every trial under way stops cleanly), writing
its log to ``<study>/workers/worker-<i>.log``.  Once every worker is done, the table of
trials and ``best.yaml``.  The code of a sweep is :mod:`evtrain.sweep`'s; here, the command.
"""

from __future__ import annotations

import argparse
import logging
import shlex
import signal
import subprocess
import sys
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
    from evtrain.sweep.study import config_digest
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
    """``evtrain sweep``: 0 once the study has its trials (or a signal stopped the sweep);
    1 when a worker process failed."""
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
    sweep = prepare(args)
    if args.worker_index is not None:  # started by the first worker
        run_worker(sweep, study_of(sweep, args.worker_index, create=False))
        return 0
    study = study_of(sweep, 0, create=not args.resume)
    workers = [_start_worker(args, sweep, index) for index in range(1, args.workers)]
    try:
        finished = run_worker(sweep, study)
    except KeyboardInterrupt:
        _stop(workers)  # a second signal: aborted here, so there too
        raise
    if not finished:
        _stop(workers)
    failed = [index for index, worker in enumerate(workers, 1) if worker.wait() != 0]
    _summary(sweep, study)
    if not finished:
        print(f"Interrupted. Continue with: {_resume_line(args)}")
    for index in failed:
        log = _worker_log(sweep, index)
        print(f"evtrain: error: worker {index} failed; see {log}", file=sys.stderr)
    return 1 if failed else 0


def _start_worker(args: argparse.Namespace, sweep: Sweep, index: int) -> subprocess.Popen[bytes]:
    command = [sys.executable, "-m", "evtrain", *(["--debug"] if args.debug else []), "sweep"]
    command += [args.config, "--study", sweep.study, "--trials", str(sweep.trials)]
    command += ["--storage", str(sweep.storage), "--worker-index", str(index)]
    if args.results_dir is not None:
        command += ["--results-dir", args.results_dir]
    log = _worker_log(sweep, index)
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("ab") as output:
        worker = subprocess.Popen(
            command, stdout=output, stderr=subprocess.STDOUT, start_new_session=True
        )
    logger.info("Worker %d started (pid %d); its log: %s", index, worker.pid, log)
    return worker


def _worker_log(sweep: Sweep, index: int) -> Path:
    return sweep.folder / "workers" / f"worker-{index}.log"


def _stop(workers: list[subprocess.Popen[bytes]]) -> None:
    """One SIGINT to each worker still running: its trial stops cleanly, and it exits."""
    for worker in workers:
        if worker.poll() is None:
            worker.send_signal(signal.SIGINT)


def _summary(sweep: Sweep, study: optuna.Study) -> None:
    from evtrain.sweep.results import table, write_best

    trials = study.get_trials(deepcopy=False)
    print(f"Study {sweep.study} ({sweep.storage}): {len(trials)} trials")
    for line in table(trials, list(sweep.settings.parameters)):
        print(line)
    best = _best(study)
    if best is None:
        print("No trial completed: no best.yaml")
        return
    path = write_best(sweep.folder, sweep.data, best, sweep.settings.objective.stat)
    print(f"Best: trial {best.number}, {sweep.settings.objective.stat} {best.value:.6g}")
    print(f"Its config: {path} (evtrain learn {shlex.quote(str(path))})")


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
