"""``evtrain sweep``: two worker processes on one journal, each trial a run folder, pruning
through the bus's stop request, ``best.yaml`` that ``evtrain learn`` runs, ``--resume``, and
the errors of a bad ``sweep:`` section."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import optuna
import pytest
import yaml

from evtrain import Bus, EvaluationEvent, StatsEvent, StatsSummary, signals
from evtrain.cli import main
from evtrain.config.sweep import Objective, Parameter, SweepSettings
from evtrain.errors import ConfigError
from evtrain.events.stats import CUMULATIVE_REWARD
from evtrain.run.learn import learn
from evtrain.sweep.objective import TrialReporter
from evtrain.sweep.space import suggest
from evtrain.sweep.study import (
    ERROR,
    INTERRUPTED,
    RUN,
    STEPS,
    WORKER,
    counted,
    next_trial,
    sampler,
    storage,
)
from tests.helpers import ROOT, clean_env, isolated_python, python

MAX_STEPS = 1024
BONUS = "env_settings.env_kwargs.bonus"
LEARNING_RATE = "behaviors.CartPole.hyperparameters.learning_rate"


def sweep_config(results: Path, **sweep: Any) -> dict[str, Any]:
    """A tiny CartPole PPO sweep over a bonus a step (0 or 100) and the learning rate.

    With the random sampler and seed 0, workers 0 and 1 (seeds 0 and 1) each draw bonus
    100 for their first trial and 0 for their second (the bonus drawn first, the learning
    rate second): once a bonus-100 trial completes, a bonus-0 trial is below the median at
    its first value and is pruned.
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
            "seed": 0,
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
    # ... which evtrain learn trains.
    rerun = ["learn", str(results / "s" / "best.yaml"), "--run-id", "best"]
    done = python("-m", "evtrain", *rerun, env=env(), cwd=tmp_path, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    assert (results / "best" / "CartPole.onnx").exists()


def test_resume_continues_the_study_and_refuses_another_config(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    results = tmp_path / "results"
    config = write(tmp_path / "sweep.yaml", sweep_config(results, pruner=None))
    args = ["sweep", str(config), "--study", "r", "--trials", "2"]
    assert main([*args, "--resume"]) == 0  # --resume creates a study that is not there
    assert main(args) == 2  # the study exists
    assert "continue it with --resume" in capsys.readouterr().err
    assert main([*args[:-1], "3", "--resume"]) == 0
    trials = trials_of(results / "r" / "study.journal", "r")
    assert sorted(t.number for t in trials) == [0, 1, 2]
    assert {p.name for p in (results / "r").glob("trial-*")} == {
        "trial-0000",
        "trial-0001",
        "trial-0002",
    }
    other = sweep_config(results, pruner=None)
    other["behaviors"]["CartPole"]["max_steps"] = 512
    write(config, other)
    assert main([*args, "--resume"]) == 2
    assert "started from another config" in capsys.readouterr().err


def test_an_interrupted_trial_does_not_count(tmp_path: Path) -> None:
    journal = tmp_path / "study.journal"
    study = optuna.create_study(study_name="i", storage=storage(journal))
    first = next_trial(study, journal, 2)
    assert first is not None
    first.set_user_attr(INTERRUPTED, True)
    study.tell(first, state=optuna.trial.TrialState.FAIL)
    assert counted(study) == 0
    second = next_trial(study, journal, 2)
    assert second is not None
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
    ],
    ids=[
        "no-sweep",
        "no-behavior",
        "unknown-key",
        "out-of-range",
        "no-choice",
        "log-0",
        "objective",
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


def test_ctrl_c_stops_every_workers_trial_and_says_how_to_continue(tmp_path: Path) -> None:
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
        out, err = sweep.communicate(timeout=60)
    finally:
        sweep.kill()
    assert sweep.returncode == 0, err[-3000:]
    trials = trials_of(results / "c" / "study.journal", "c")
    assert len(trials) == 2
    for t in trials:
        assert t.state is optuna.trial.TrialState.FAIL and t.user_attrs[INTERRUPTED]
        assert (results / "c" / f"trial-{t.number:04d}" / "CartPole.onnx").exists()  # final save
    assert len({t.user_attrs[WORKER] for t in trials}) == 2
    assert f"Continue with: evtrain sweep {config} --study c --trials 4 --workers 2" in out
    assert out.rstrip().endswith("--resume")


def test_each_type_draws_in_its_range_and_each_worker_its_own() -> None:
    parameters = {
        "u": Parameter(type="uniform", low=0.5, high=1.0, step=0.1),
        "l": Parameter(type="log_uniform", low=1e-4, high=1e-2),
        "i": Parameter(type="int", low=2, high=64, log=True),
        "c": Parameter(type="choice", choices=["a", 3, None]),
    }
    settings = SweepSettings(parameters=parameters, sampler="random", seed=7)
    draws = []
    for worker in (0, 1):
        study = optuna.create_study(sampler=sampler(settings, worker))
        for _ in range(20):
            trial = study.ask()
            values = {path: suggest(trial, path, p) for path, p in parameters.items()}
            study.tell(trial, 0.0)
            assert 0.5 <= values["u"] <= 1.0 and round(values["u"] * 10, 6).is_integer()
            assert 1e-4 <= values["l"] <= 1e-2
            assert isinstance(values["i"], int) and 2 <= values["i"] <= 64
            assert values["c"] in ("a", 3, None)
            draws.append(values)
    assert draws[:20] != draws[20:]  # worker 1 samples with seed 8, not worker 0's 7
    again = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=8)).ask()
    assert suggest(again, "u", parameters["u"]) == draws[20]["u"]
