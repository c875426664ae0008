"""``evtrain sweep``: two worker processes on one journal, each trial a run folder, pruning
through the bus's stop request, ``best.yaml`` that ``evtrain learn`` runs, ``--resume``, and
the errors of a bad ``sweep:`` section."""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import attrs
import optuna
import pytest
import yaml

from evtrain import Bus, EvaluationEvent, StatsEvent, StatsSummary, signals
from evtrain.cli import main
from evtrain.cli.parser import parse
from evtrain.cli.sweep import prepare
from evtrain.config.sweep import Objective, Parameter, SweepSettings
from evtrain.errors import ConfigError
from evtrain.events.stats import CUMULATIVE_REWARD
from evtrain.run.interrupt import Aborted
from evtrain.run.learn import learn
from evtrain.sweep.interrupt import stop_on_interrupts
from evtrain.sweep.objective import TrialReporter
from evtrain.sweep.space import suggest
from evtrain.sweep.study import (
    ERROR,
    INTERRUPTED,
    RERUN_OF,
    RUN,
    STEPS,
    WORKER,
    counted,
    draw,
    next_trial,
    storage,
    trial_seed,
)
from evtrain.sweep.trials import run_trial, run_worker, study_of
from tests.helpers import ROOT, clean_env, evtrain_main, isolated_python, python

MAX_STEPS = 1024
BONUS = "env_settings.env_kwargs.bonus"
LEARNING_RATE = "behaviors.CartPole.hyperparameters.learning_rate"


def sweep_config(results: Path, **sweep: Any) -> dict[str, Any]:
    """A tiny CartPole PPO sweep over a bonus a step (0 or 100) and the learning rate.

    With the random sampler and seed 34, trials 0 and 1 (the first of each of two workers)
    draw bonus 100, trials 2, 3 and 4 bonus 0 and trial 5 bonus 100 (the bonus drawn first,
    the learning rate second): once a bonus-100 trial completes, a bonus-0 trial is below the
    median at its first value and is pruned.
    """
    return {
        "behaviors": {
            "CartPole": {
                "trainer_type": "ppo",
                "hyperparameters": {"batch_size": 64, "buffer_size": 128, "num_epoch": 1},
                "network_settings": {"hidden_units": 16},
                "max_steps": MAX_STEPS,
                "time_horizon": 32,
                "summary_freq": 256,
                "checkpoint_interval": MAX_STEPS,
                "keep_checkpoints": 1,
            }
        },
        "env_settings": {"env_id": "tests.sweep_envs:bonus_cartpole", "num_envs": 4, "seed": 3},
        "checkpoint_settings": {"results_dir": str(results)},
        "plugins": {"disabled": ["evtrain.stats_writer:default"]},
        "sweep": {
            "parameters": {
                BONUS: {"type": "choice", "choices": [0, 100]},
                LEARNING_RATE: {"type": "log_uniform", "low": 1.0e-4, "high": 1.0e-2},
            },
            "sampler": "random",
            "seed": 34,
            "pruner": {"type": "median", "n_startup_trials": 1},
            **sweep,
        },
    }


def write(path: Path, data: dict[str, Any]) -> Path:
    path.write_text(yaml.safe_dump(data, sort_keys=False))  # the parameters in their order
    return path


def env() -> dict[str, str]:
    # this checkout's evtrain first, and its tests package for the environment
    path = os.pathsep.join(str(p) for p in (ROOT / "src", ROOT / "writers", ROOT))
    return clean_env(PYTHONPATH=path)


def trials_of(journal: Path, study: str) -> list[optuna.trial.FrozenTrial]:
    return optuna.load_study(study_name=study, storage=storage(journal)).get_trials()


def test_two_workers_share_one_study_and_prune(tmp_path: Path) -> None:
    results = tmp_path / "results"
    data = sweep_config(results)
    # each worker's first trial waits until the other's has started
    data["env_settings"]["env_kwargs"] = {"rendezvous": str(tmp_path / "meet")}
    config = write(tmp_path / "sweep.yaml", data)
    args = ["sweep", str(config), "--study", "s", "--trials", "6", "--workers", "2"]
    done = python("-m", "evtrain", *args, env=env(), cwd=tmp_path, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    trials = trials_of(results / "s" / "study.journal", "s")
    # Six trials, each numbered once and run once, in a run folder of its own.
    assert sorted(t.number for t in trials) == list(range(6))
    assert len({t.user_attrs[WORKER] for t in trials}) == 2  # both workers ran trials
    for t in trials:
        assert t.user_attrs[RUN] == str(results / "s" / f"trial-{t.number:04d}")
        saved = yaml.safe_load(
            (results / "s" / f"trial-{t.number:04d}" / "configuration.yaml").read_text()
        )
        assert saved["env_settings"]["env_kwargs"]["bonus"] == t.params[BONUS]
        assert (
            saved["behaviors"]["CartPole"]["hyperparameters"]["learning_rate"]
            == t.params[LEARNING_RATE]
        )
    # Pruning: bonus-0 trials (and a bonus-100 one below the median at some step, perhaps)
    # stopped early, through the run's stop request, with their final save.
    pruned = [t for t in trials if t.state is optuna.trial.TrialState.PRUNED]
    assert 0 in {t.params[BONUS] for t in pruned}
    # (a stop request lands at the next turn boundary: under load, possibly the last one)
    assert min(t.user_attrs[STEPS] for t in pruned) < MAX_STEPS
    for t in pruned:
        log = results / "s" / f"trial-{t.number:04d}" / "run_logs" / "training_status.json"
        assert log.exists()  # the final save of a stopped run
    complete = [t for t in trials if t.state is optuna.trial.TrialState.COMPLETE]
    assert complete and all(t.user_attrs[STEPS] == MAX_STEPS for t in complete)
    # The table of trials, and best.yaml: the best trial's values, no sweep section.
    assert [
        line.split()[:4] for line in done.stdout.splitlines() if line.lstrip().startswith("trial ")
    ] == [["trial", "state", "value", "steps"]]
    best = yaml.safe_load((results / "s" / "best.yaml").read_text())
    study = optuna.load_study(study_name="s", storage=storage(results / "s" / "study.journal"))
    assert "sweep" not in best
    assert best["env_settings"]["env_kwargs"]["bonus"] == 100
    assert (
        best["behaviors"]["CartPole"]["hyperparameters"]["learning_rate"]
        == (study.best_params[LEARNING_RATE])
    )
    # ... which the printed command trains, under a run id of its own.
    run_id = f"s-best-trial-{study.best_trial.number:04d}"
    assert best["checkpoint_settings"]["run_id"] == run_id
    lines = done.stdout.splitlines()
    command = lines[lines.index(next(line for line in lines if "train it with:" in line)) + 1]
    assert command == f"  evtrain learn {results / 's' / 'best.yaml'}"
    rerun = shlex.split(command)[1:]
    done = evtrain_main(*rerun, cwd=tmp_path)  # in this process: the sweep was the real one
    assert done.returncode == 0, done.stderr[-3000:]
    assert (results / run_id / "CartPole.onnx").exists()


def test_resume_continues_the_study_and_refuses_another_config(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    results = tmp_path / "results"
    config = write(tmp_path / "sweep.yaml", sweep_config(results, pruner=None))
    args = ["sweep", str(config), "--study", "r", "--trials", "2"]
    assert main([*args, "--resume"]) == 0  # --resume creates a study that is not there
    assert main(args) == 2  # the study exists
    assert "continue it with --resume" in capsys.readouterr().err
    assert main([*args[:-1], "4", "--resume"]) == 0
    trials = trials_of(results / "r" / "study.journal", "r")
    assert sorted(t.number for t in trials) == [0, 1, 2, 3]
    # The trials --resume added drew values of their own, not those of trials 0 and 1 again.
    assert len({t.params[LEARNING_RATE] for t in trials}) == 4
    assert {p.name for p in (results / "r").glob("trial-*")} == {
        "trial-0000",
        "trial-0001",
        "trial-0002",
        "trial-0003",
    }
    other = sweep_config(results, pruner=None)
    other["behaviors"]["CartPole"]["max_steps"] = 512
    write(config, other)
    assert main([*args, "--resume"]) == 2
    assert "started from another config" in capsys.readouterr().err


def test_two_sweeps_on_one_study_draw_values_of_their_own(tmp_path: Path) -> None:
    results = tmp_path / "results"
    data = sweep_config(results, pruner=None)
    data["behaviors"]["CartPole"]["max_steps"] = 256
    # each process's first trial waits until the other's has started
    data["env_settings"]["env_kwargs"] = {"rendezvous": str(tmp_path / "meet")}
    config = write(tmp_path / "sweep.yaml", data)
    args = ["-m", "evtrain", "sweep", str(config), "--study", "j", "--trials", "4", "--resume"]
    command = [isolated_python(), "-W", "error", *args]
    sweeps = [
        subprocess.Popen(
            command,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env(),
            cwd=tmp_path,
        )
        for _ in range(2)
    ]
    for sweep in sweeps:
        _, err = sweep.communicate(timeout=180)
        assert sweep.returncode == 0, err[-3000:]
    trials = trials_of(results / "j" / "study.journal", "j")
    assert sorted(t.number for t in trials) == [0, 1, 2, 3]
    assert len({t.user_attrs[WORKER] for t in trials}) == 2  # both processes ran trials
    assert len({(t.params[BONUS], t.params[LEARNING_RATE]) for t in trials}) == 4


def a_journal(path: Path, study: str) -> bytes:
    """A real journal at ``path`` holding ``study`` with one trial; its bytes."""
    made = optuna.create_study(study_name=study, storage=storage(path), direction="maximize")
    made.tell(made.ask(), 1.0)
    return path.read_bytes()


@pytest.mark.parametrize(
    ("garbage", "where"),
    [
        (b"behaviors: {}\n", "alone"),  # a config named by mistake
        (b"not json at all\n", "end"),
        (b"[1, 2]\n", "start"),
    ],
    ids=["not-a-journal", "garbage-line", "not-an-entry"],
)
def test_a_journal_that_is_not_optunas_is_refused_and_left_as_it_is(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], garbage: bytes, where: str
) -> None:
    config = write(tmp_path / "sweep.yaml", sweep_config(tmp_path / "results"))
    journal = tmp_path / "crafted.journal"
    entries = a_journal(journal, "g")
    crafted = {"alone": garbage, "end": entries + garbage, "start": garbage + entries}[where]
    journal.write_bytes(crafted)
    line = len(entries.splitlines()) + 1 if where == "end" else 1
    args = ["sweep", str(config), "--study", "g", "--trials", "2", "--resume"]
    assert main([*args, "--storage", str(journal)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        f"evtrain: error: --storage: {journal} line {line} is not an entry of an Optuna journal "
        f"(expected one JSON object a line, got {garbage.rstrip()[:40]!r}); "
        "nothing was written to it: restore it, or give another --storage (or --study)"
    ]
    assert journal.read_bytes() == crafted
    assert sorted(p.name for p in tmp_path.iterdir()) == ["crafted.journal", "sweep.yaml"]


def test_a_journal_torn_at_its_end_is_repaired_before_the_sweep_appends(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    config = write(tmp_path / "sweep.yaml", sweep_config(tmp_path / "results", pruner=None))
    journal = tmp_path / "results" / "t" / "study.journal"
    whole = a_journal(journal, "t")
    journal.write_bytes(whole + b'{"op_code": 5, "worker_id": "cut')  # a writer killed mid-line
    args = ["sweep", str(config), "--study", "t", "--trials", "2", "--resume"]
    assert main(args) == 0
    assert f"{journal}: its last line was cut short (32 bytes without an end of line" in caplog.text
    assert journal.read_bytes().startswith(whole)
    assert all(json.loads(line) for line in journal.read_bytes().splitlines())
    trials = trials_of(journal, "t")
    assert [t.state for t in trials] == [optuna.trial.TrialState.COMPLETE] * 2


def test_a_results_dir_or_storage_that_is_not_a_folder_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = write(tmp_path / "sweep.yaml", sweep_config(tmp_path / "results"))
    a_file = tmp_path / "a-file"
    a_file.write_text("mine\n")
    args = ["sweep", str(config), "--study", "f", "--trials", "1"]
    assert main([*args, "--results-dir", str(a_file)]) == 2
    assert capsys.readouterr().err == (
        f"evtrain: error: --results-dir: {a_file} is a file, not a folder; the study's folder "
        f"{a_file / 'f'} cannot be made there: give a folder (made if missing)\n"
    )
    assert main([*args, "--storage", str(tmp_path)]) == 2
    assert capsys.readouterr().err == (
        f"evtrain: error: --storage: {tmp_path} is a folder; name the journal file, e.g. "
        f"{tmp_path / 'study.journal'}\n"
    )
    assert main([*args, "--storage", str(a_file / "study.journal")]) == 2
    assert capsys.readouterr().err == (
        f"evtrain: error: --storage: {a_file} is a file, not a folder; the journal "
        f"{a_file / 'study.journal'} cannot be made under it\n"
    )
    assert a_file.read_text() == "mine\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a-file", "sweep.yaml"]


def test_an_interrupted_trial_does_not_count(tmp_path: Path) -> None:
    journal = tmp_path / "study.journal"
    study = optuna.create_study(study_name="i", storage=storage(journal))
    first = next_trial(study, journal, 2)
    assert first is not None
    first.suggest_float("x", 0.0, 1.0)
    study.enqueue_trial(first.params, user_attrs={RERUN_OF: 0})  # as an interrupted trial is
    first.set_user_attr(INTERRUPTED, True)
    study.tell(first, state=optuna.trial.TrialState.FAIL)
    assert counted(study) == 0  # neither the interrupted trial nor the waiting one
    second = next_trial(study, journal, 2)  # the waiting one, its values again
    assert second is not None and second.number == 1
    assert second.suggest_float("x", 0.0, 1.0) == first.params["x"]
    study.tell(second, 1.0)
    third = next_trial(study, journal, 2)
    assert third is not None and third.number == 2
    # Two trials count, the running one too (a worker killed with it would leave it so).
    assert next_trial(study, journal, 2) is None


def summary(step: int, value: float, category: str = "CartPole") -> StatsEvent:
    values = {CUMULATIVE_REWARD: StatsSummary(full_dist=[value])}
    return StatsEvent(category=category, step=step, values=values)


def reporter_on(bus: Bus, study: optuna.Study, **objective: Any) -> TrialReporter:
    reporter = TrialReporter(study.ask(), Objective(**objective), "CartPole", "median")
    reporter.connect(bus)
    return reporter


def test_the_reporter_scores_and_prunes_from_the_bus() -> None:
    pruner = optuna.pruners.MedianPruner(n_startup_trials=1)
    study = optuna.create_study(direction="maximize", pruner=pruner)
    with Bus() as bus:
        done = reporter_on(bus, study, aggregate="mean_last_k", k=2)
        for step, value in ((100, 10.0), (200, 30.0), (300, 50.0)):
            bus.emit(signals.stats, summary(step, value))
        bus.emit(
            signals.stats,
            summary(400, -1.0, category="Other"),
        )
        bus.flush()
        assert done.values == [(100, 10.0), (200, 30.0), (300, 50.0)]
        assert done.score() == 40.0
        # the pruner sees the score so far: here the mean of the last two values
        assert study.trials[0].intermediate_values == {100: 10.0, 200: 20.0, 300: 40.0}
        assert bus.stop_request is None
        study.tell(done.trial, done.score())
        # Below the median of the completed trial at step 100: pruned, the run asked to stop.
        worse = reporter_on(bus, study)
        bus.emit(signals.stats, summary(100, 5.0))
        bus.flush()
        assert worse.pruned_at == 100
        request = bus.take_stop_request()
        assert request is not None and request.by == "evtrain.sweep"
        assert request.reason == (
            "pruned by optuna's median pruner at step 100 (Environment/Cumulative Reward 5)"
        )
        study.tell(worse.trial, state=optuna.trial.TrialState.PRUNED)
        # Evaluation events carry the objective too; best is the best of its values.
        evaluated = reporter_on(bus, study, stat="Evaluation/Mean Return", aggregate="best")
        for step, returns in ((100, (20.0, 40.0)), (200, (10.0, 10.0))):
            event = EvaluationEvent(
                category="CartPole",
                step=step,
                returns=returns,
                lengths=(9, 9),
            )
            bus.emit(signals.evaluation, event)
        bus.flush()
        assert evaluated.values == [(100, 30.0), (200, 10.0)]
        assert evaluated.score() == 30.0


def test_learn_refuses_a_sweep_config(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="evtrain sweep CONFIG --study NAME --trials N"):
        learn(sweep_config(tmp_path / "results"))
    assert not (tmp_path / "results").exists()


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        (
            lambda c: c.pop("sweep"),
            "sweep: {config} has no sweep section; add one with the parameters to search",
        ),
        (
            lambda c: c["sweep"]["parameters"].update(
                {"behaviors.Cartpole.max_steps": {"type": "int", "low": 1, "high": 2}}
            ),
            "sweep.parameters.behaviors.Cartpole.max_steps: expected behaviors.<name>.<option> "
            "naming a behavior of the config (behaviors: CartPole)",
        ),
        (
            lambda c: c["sweep"]["parameters"].update(
                {
                    "behaviors.CartPole.hyperparameters.learnin_rate": {
                        "type": "uniform",
                        "low": 0.1,
                        "high": 0.2,
                    }
                }
            ),
            "behaviors.CartPole.hyperparameters.learnin_rate",
        ),
        (
            lambda c: c["sweep"]["parameters"].update(
                {"behaviors.CartPole.max_steps": {"type": "int", "low": 0, "high": 100}}
            ),
            "sweep.parameters: the config with",
        ),
        (
            lambda c: c["sweep"]["parameters"][BONUS].update(choices=[]),
            f"sweep.parameters.{BONUS}.choices: expected at least one choice",
        ),
        (
            lambda c: c["sweep"]["parameters"][LEARNING_RATE].update(low=0.0),
            f"sweep.parameters.{LEARNING_RATE}.low: expected a number above 0 on a log scale",
        ),
        (
            lambda c: c["sweep"].update(objective={"behavior": "Walker"}),
            "sweep.objective.behavior: expected one of the config's behaviors (CartPole)",
        ),
        (
            lambda c: c["sweep"].update(objective={"aggregate": "mean_last_k", "k": 0}),
            "sweep.objective.k: must be >= 1, got 0",
        ),
    ],
    ids=[
        "no-sweep",
        "no-behavior",
        "unknown-key",
        "out-of-range",
        "no-choice",
        "log-0",
        "objective",
        "k-0",
    ],
)
def test_a_bad_sweep_section_is_refused_before_any_trial(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], change: Any, expected: str
) -> None:
    config = sweep_config(tmp_path / "results")
    change(config)
    path = write(tmp_path / "sweep.yaml", config)
    assert main(["sweep", str(path), "--study", "s", "--trials", "1"]) == 2
    assert expected.format(config=path) in capsys.readouterr().err
    assert not (tmp_path / "results").exists()


def test_the_docs_give_each_objective_keys_default() -> None:
    rows = {}
    for line in (ROOT / "docs" / "sweeps.md").read_text().splitlines():
        cells = [cell.strip().strip("`") for cell in line.strip("|").split("|")]
        if len(cells) == 3 and cells[0].startswith("objective."):
            rows[cells[0]] = cells[1]
    for field in attrs.fields(Objective):
        if field.default is not None:
            assert rows[f"objective.{field.name}"] == str(field.default)
    assert rows["objective.k"] == "5"


def test_without_optuna_the_command_says_what_to_install(tmp_path: Path) -> None:
    config = write(tmp_path / "sweep.yaml", sweep_config(tmp_path / "results"))
    code = (
        "import sys; sys.modules['optuna'] = None; from evtrain.cli import main; "
        f"sys.exit(main(['sweep', {str(config)!r}, '--study', 's', '--trials', '1']))"
    )
    done = python("-c", code, env=env(), cwd=tmp_path)
    assert done.returncode == 2
    # the command itself depends on how the process found evtrain (here: PYTHONPATH)
    assert done.stderr.startswith(
        "evtrain: error: evtrain sweep needs Optuna, which is not installed; install evtrain's "
        "'sweep' extra: pip install -e "
    )
    assert done.stderr.endswith(" (README.md, 'Installing extras')\n")


@pytest.mark.parametrize(
    "change",
    [
        lambda c: c["env_settings"].update(env_kwargs={"fail": True}),
        lambda c: c["sweep"].update(objective={"stat": "Nothing/Here"}),
    ],
    ids=["raises", "no-value"],
)
def test_a_failed_trial_is_recorded_and_the_sweep_goes_on(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], change: Any
) -> None:
    config = sweep_config(tmp_path / "results")
    change(config)
    path = write(tmp_path / "sweep.yaml", config)
    assert main(["sweep", str(path), "--study", "f", "--trials", "2"]) == 0
    trials = trials_of(tmp_path / "results" / "f" / "study.journal", "f")
    assert [t.state for t in trials] == [optuna.trial.TrialState.FAIL] * 2
    out = capsys.readouterr().out
    for t in trials:
        assert f"trial {t.number}: {t.user_attrs[ERROR]}" in out
    assert "No trial completed: no best.yaml" in out
    assert not (tmp_path / "results" / "f" / "best.yaml").exists()


def wait_for(path: Path, text: str, process: subprocess.Popen[Any], timeout: float = 120) -> str:
    """The text of ``path`` once it holds ``text`` (polled: ``process`` writes it)."""
    deadline = time.monotonic() + timeout
    while True:
        written = path.read_text() if path.exists() else ""
        if text in written:
            return written
        assert process.poll() is None, f"the process exited early:\n{written[-3000:]}"
        assert time.monotonic() < deadline, f"no {text!r} in {path}:\n{written[-3000:]}"
        time.sleep(0.05)


def processes_with(marker: str) -> list[int]:
    """The processes alive (zombies aside) whose command line holds ``marker``."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            command = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, UnicodeDecodeError, IndexError):
            continue  # gone meanwhile
        if marker in command and state != "Z":
            found.append(int(entry.name))
    return found


def kill_all(marker: str) -> None:
    """What a failed test leaves running: each of its processes, killed by pid."""
    for pid in processes_with(marker):
        os.kill(pid, signal.SIGKILL)


def ignored_interrupts(pid: int) -> set[int]:
    """The signals process ``pid`` ignores (``SigIgn`` of its status)."""
    status = Path(f"/proc/{pid}/status").read_text()
    mask = int(
        next(line for line in status.splitlines() if line.startswith("SigIgn:")).split()[1], 16
    )
    return {number for number in range(1, 65) if mask >> (number - 1) & 1}


def test_ctrl_c_stops_every_workers_trial_and_resume_runs_them_again(tmp_path: Path) -> None:
    results = tmp_path / "results"
    data = sweep_config(results)
    data["behaviors"]["CartPole"]["max_steps"] = 10**6  # runs until the signal
    data["env_settings"]["env_kwargs"] = {"rendezvous": str(tmp_path / "meet")}
    config = write(tmp_path / "sweep.yaml", data)
    args = ["sweep", str(config), "--study", "c", "--trials", "4", "--workers", "2"]
    sweep = subprocess.Popen(
        [isolated_python(), "-W", "error", "-m", "evtrain", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env(),
        cwd=tmp_path,
    )
    try:
        deadline = time.monotonic() + 60
        # both workers are in their first trial once both signed in
        while not (tmp_path / "meet").exists() or len(list((tmp_path / "meet").iterdir())) < 2:
            assert time.monotonic() < deadline and sweep.poll() is None
            time.sleep(0.05)
        sweep.send_signal(signal.SIGINT)  # as Ctrl-C in the terminal: this process only
        out, err = sweep.communicate(timeout=120)
    finally:
        sweep.kill()
        kill_all(str(config))
    assert sweep.returncode == 0, err[-3000:]
    assert processes_with(str(config)) == []  # the worker it started is gone too
    journal = results / "c" / "study.journal"
    trials = trials_of(journal, "c")
    cut = [t for t in trials if t.state is not optuna.trial.TrialState.WAITING]
    assert len(cut) == 2
    for t in cut:
        assert t.state is optuna.trial.TrialState.FAIL and t.user_attrs[INTERRUPTED]
        assert (results / "c" / f"trial-{t.number:04d}" / "CartPole.onnx").exists()  # final save
    assert len({t.user_attrs[WORKER] for t in cut}) == 2
    assert f"Continue with: evtrain sweep {config} --study c --trials 4 --workers 2" in out
    assert out.rstrip().endswith("--resume")
    # --resume: the next trial runs the values of a cut one again; a SIGTERM as it starts
    # (before or after its run's own handlers are in place) cuts it short in turn.
    resume = subprocess.Popen(
        [isolated_python(), "-W", "error", "-m", "evtrain", *args[:-2], "--resume"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env(),
        cwd=tmp_path,
    )
    watchdog = threading.Timer(120, resume.kill)  # should the line never come
    watchdog.start()
    try:
        assert resume.stderr is not None
        for line in resume.stderr:
            if "Trial 2 (trial-0002) (trial " in line:
                break
        resume.send_signal(signal.SIGTERM)
        out, err = resume.communicate(timeout=120)
    finally:
        watchdog.cancel()
        resume.kill()
    assert resume.returncode == 0, err[-3000:]
    again = {t.number: t for t in trials_of(journal, "c")}[2]
    assert again.state is optuna.trial.TrialState.FAIL and again.user_attrs[INTERRUPTED]
    assert again.user_attrs[RERUN_OF] in {t.number for t in cut}
    assert again.params == {t.number: t for t in cut}[again.user_attrs[RERUN_OF]].params
    assert (results / "c" / "trial-0002" / "CartPole.onnx").exists()


def test_an_interrupt_between_trials_stops_the_worker_before_its_next_trial(tmp_path: Path) -> None:
    config = write(tmp_path / "sweep.yaml", sweep_config(tmp_path / "results"))
    sweep = prepare(parse(["sweep", str(config), "--study", "s", "--trials", "2"]))
    study = study_of(sweep, create=True)
    before = signal.getsignal(signal.SIGTERM)
    ignored = signal.signal(signal.SIGINT, signal.SIG_IGN)  # as in a job started with &
    try:
        with stop_on_interrupts() as stop:
            assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN  # left ignored
            signal.raise_signal(signal.SIGTERM)  # between two trials
            assert stop.requested == "SIGTERM"
            assert run_worker(sweep, study, stop) is False
            assert study.get_trials() == []  # no new trial
            # Given a trial as the signal came: recorded interrupted, without a run.
            trial = next_trial(study, sweep.storage, sweep.trials)
            assert trial is not None and run_trial(sweep, study, trial, stop) is False
            (cut,) = study.get_trials()
            assert cut.state is optuna.trial.TrialState.FAIL and cut.user_attrs[INTERRUPTED]
            assert not (sweep.folder / "trial-0000").exists()
            with pytest.raises(Aborted):  # the second interrupt
                signal.raise_signal(signal.SIGTERM)
        assert signal.getsignal(signal.SIGTERM) is before  # put back
    finally:
        signal.signal(signal.SIGINT, ignored)


def test_sigterm_to_a_background_sweep_waiting_for_its_worker_stops_it(tmp_path: Path) -> None:
    results = tmp_path / "results"
    data = sweep_config(results)
    data["behaviors"]["CartPole"]["max_steps"] = 10**6  # the worker's trial runs until the signal
    # the first process's trial fails once the worker's has started: then it waits for it
    data["env_settings"]["env_kwargs"] = {
        "rendezvous": str(tmp_path / "meet"),
        "fail_in_first": True,
    }
    config = write(tmp_path / "sweep.yaml", data)
    log, pid, status = tmp_path / "sweep.log", tmp_path / "sweep.pid", tmp_path / "sweep.status"
    args = ["sweep", str(config), "--study", "b", "--trials", "2", "--workers", "2"]
    # A job started with & by a script: its SIGINT is ignored, SIGTERM is how it is stopped.
    script = f'"$@" > {log} 2>&1 & echo $! > {pid}; wait $!; echo $? > {status}'
    shell = subprocess.Popen(
        ["sh", "-c", script, "sh", isolated_python(), "-W", "error", "-m", "evtrain", *args],
        env=env(),
        cwd=tmp_path,
    )
    try:
        wait_for(log, "Waiting for worker 1 (pid ", shell)
        sweep = int(pid.read_text())
        assert signal.SIGINT in ignored_interrupts(sweep)  # left so by the sweep
        os.kill(sweep, signal.SIGTERM)
        shell.wait(timeout=120)
    finally:
        shell.kill()
        kill_all(str(config))
    assert status.read_text().strip() == "0", log.read_text()[-3000:]
    assert processes_with(str(config)) == []
    trials = {t.number: t for t in trials_of(results / "b" / "study.journal", "b")}
    ran = [t for t in trials.values() if t.state is not optuna.trial.TrialState.WAITING]
    (first,) = [t for t in ran if ERROR in t.user_attrs]
    (worker,) = [t for t in ran if t.user_attrs.get(INTERRUPTED)]
    assert first.state is optuna.trial.TrialState.FAIL
    assert "in the first process" in first.user_attrs[ERROR]
    assert worker.state is optuna.trial.TrialState.FAIL and worker.user_attrs[INTERRUPTED]
    assert (results / "b" / f"trial-{worker.number:04d}" / "CartPole.onnx").exists()
    # its values wait in the study for the next trial
    waiting = [t for t in trials.values() if t.state is optuna.trial.TrialState.WAITING]
    assert [t.user_attrs[RERUN_OF] for t in waiting] == [worker.number]
    assert "Interrupted. Continue with:" in log.read_text()


def test_each_type_draws_in_its_range_and_each_trial_its_own() -> None:
    parameters = {
        "u": Parameter(type="uniform", low=0.5, high=1.0, step=0.1),
        "l": Parameter(type="log_uniform", low=1e-4, high=1e-2),
        "i": Parameter(type="int", low=2, high=64, log=True),
        "c": Parameter(type="choice", choices=["a", 3, None]),
    }
    settings = SweepSettings(parameters=parameters, sampler="random", seed=7)
    study = optuna.create_study()
    draws = []
    for _ in range(20):
        trial = study.ask()
        values = draw(study, settings, trial)
        study.tell(trial, 0.0)
        assert 0.5 <= values["u"] <= 1.0 and round(values["u"] * 10, 6).is_integer()
        assert 1e-4 <= values["l"] <= 1e-2
        assert isinstance(values["i"], int) and 2 <= values["i"] <= 64
        assert values["c"] in ("a", 3, None)
        draws.append(values)
    assert len({values["l"] for values in draws}) == 20
    # Trial 3 draws from the seed of (7, 3), in any study and any process.
    again = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=trial_seed(7, 3)))
    assert suggest(again.ask(), "u", parameters["u"]) == draws[3]["u"]
