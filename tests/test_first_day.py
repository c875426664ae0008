"""What a new user hits on the first day: custom environments, older ML-Agents configs, the
command line's odd corners, demonstrations, `--inference`, a reused bus, logging, progress.

The CLI runs as the user runs it: the installed ``evtrain`` console script (whose
``sys.path[0]`` is its ``bin`` folder, not the working folder), in the isolated interpreter of
:func:`tests.helpers.isolated_python`.
"""

from __future__ import annotations

import csv
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
import yaml

from tests.helpers import ROOT, evtrain_main, isolated_python, tensorboard_scalars

CONSOLE_SCRIPT = Path(sys.executable).parent / "evtrain"
"""The ``evtrain`` script pip installed next to this venv's python."""


def evtrain(
    *args: str, cwd: Path, timeout: float = 120, process: bool = False
) -> subprocess.CompletedProcess[str]:
    """``evtrain ARGS`` in ``cwd``: in this process (:func:`tests.helpers.evtrain_main`), or
    with ``process`` through the console script, where its process is the point (the working
    folder on its ``sys.path``, modules written for the test imported afresh)."""
    if not process:
        return evtrain_main(*args, cwd=cwd)
    return subprocess.run(
        [isolated_python(), str(CONSOLE_SCRIPT), *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=timeout,
        check=False,
    )


@pytest.fixture
def forget_env_modules() -> Iterator[None]:
    """For runs in this process of an environment module written for the test: ``learn``
    puts the working folder on ``sys.path``; both are forgotten after the test, as a new
    process would never have seen them (another test's ``mymodule`` is another file)."""
    path = list(sys.path)
    yield
    added = tuple(os.path.join(folder, "") for folder in sys.path if folder not in path)
    sys.path[:] = path
    for name, module in list(sys.modules.items()):
        if added and (getattr(module, "__file__", None) or "").startswith(added):
            del sys.modules[name]


def tiny(results: Path, run_id: str = "run", **env: Any) -> dict[str, Any]:
    """A CartPole PPO run of 256 steps (4 envs x 32 steps a rollout)."""
    return {
        "behaviors": {
            "CartPole": {
                "trainer_type": "ppo",
                "hyperparameters": {"batch_size": 64, "buffer_size": 128, "num_epoch": 1},
                "network_settings": {"hidden_units": 16},
                "max_steps": 256,
                "time_horizon": 32,
                "summary_freq": 128,
                "checkpoint_interval": 256,
            }
        },
        "env_settings": {"env_id": "CartPole-v1", "num_envs": 4, "seed": 3, **env},
        "checkpoint_settings": {"run_id": run_id, "results_dir": str(results)},
    }


def write(path: Path, data: dict[str, Any]) -> Path:
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


ENV_MODULE = """
import gymnasium as gym

def make_env(tag=None, **kwargs):
    if tag != "from env_kwargs":  # env_kwargs reach the factory as keyword arguments
        raise ValueError(f"tag: {tag!r}")
    return gym.make("CartPole-v1", **kwargs)

def not_an_env():
    return 42
"""


# -- 1. custom environments ------------------------------------------------------------------


def test_console_script_imports_the_env_module_from_the_working_folder(tmp_path: Path) -> None:
    (tmp_path / "mymodule.py").write_text(ENV_MODULE)
    options = tiny(
        tmp_path / "results", env_id="mymodule:make_env", env_kwargs={"tag": "from env_kwargs"}
    )
    write(tmp_path / "run.yaml", options)
    result = evtrain("learn", "run.yaml", cwd=tmp_path, process=True)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[0] == (
        f"CartPole: 256 steps, policy exported to {tmp_path}/results/run/CartPole.onnx"
    )


def test_the_custom_env_example_runs_from_the_repository_root(tmp_path: Path) -> None:
    result = evtrain(
        "learn", "examples/custom_env/corridor.yaml", "--results-dir", str(tmp_path), cwd=ROOT
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[0] == (
        f"Corridor: 2,048 steps, policy exported to {tmp_path}/corridor/Corridor.onnx"
    )
    # the environment class itself is a callable env_id too
    options = yaml.safe_load((ROOT / "examples/custom_env/corridor.yaml").read_text())
    options["env_settings"].update(env_id="examples.custom_env.corridor:Corridor", env_kwargs={})
    options["behaviors"]["Corridor"]["max_steps"] = 256
    config = write(tmp_path / "class.yaml", options)
    result = evtrain(
        "learn", str(config), "--results-dir", str(tmp_path), "--run-id", "class", cwd=ROOT
    )
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "class/Corridor.onnx").is_file()


def test_masked_cartpole_example_runs_as_its_comment_says(tmp_path: Path) -> None:
    example = ROOT / "examples/configs/masked_cartpole_lstm.yaml"
    assert "# evtrain learn examples/configs/masked_cartpole_lstm.yaml" in example.read_text()
    options = yaml.safe_load(example.read_text())
    behavior = options["behaviors"]["MaskedCartPole"]
    behavior.update(max_steps=256, summary_freq=256, checkpoint_interval=256, time_horizon=16)
    behavior["hyperparameters"].update(buffer_size=128, batch_size=64, num_epoch=1)
    options["checkpoint_settings"] = {"results_dir": str(tmp_path)}
    config = write(tmp_path / "masked.yaml", options)
    result = evtrain("learn", str(config), "--run-id", "masked", cwd=ROOT)
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "masked/MaskedCartPole.onnx").is_file()


# -- 2. a factory that returns no environment ------------------------------------------------


@pytest.mark.usefixtures("forget_env_modules")
def test_a_factory_returning_no_environment_is_one_line_exit_2(tmp_path: Path) -> None:
    (tmp_path / "mymodule.py").write_text(ENV_MODULE)
    write(tmp_path / "run.yaml", tiny(tmp_path / "results", env_id="mymodule:not_an_env"))
    result = evtrain("learn", "run.yaml", cwd=tmp_path)
    assert (result.returncode, result.stderr) == (
        2,
        "evtrain: error: env_settings.env_id: 'mymodule:not_an_env' returned 42 (a int), not a "
        "gymnasium.Env or a PettingZoo ParallelEnv or AECEnv; make it return an environment, "
        "e.g. gymnasium.make(...) or an instance of a gymnasium.Env subclass (see "
        "docs/environments.md, docs/multi-agent.md)\n",
    )


# -- 3. configs of older ML-Agents releases --------------------------------------------------


def test_output_path_and_lessons_named_by_their_key_are_read_with_a_note(tmp_path: Path) -> None:
    options = tiny(tmp_path / "results")
    options["behaviors"]["CartPole"]["output_path"] = "default"
    options["environment_parameters"] = {
        "gravity": {
            "curriculum": [
                {
                    "Lesson0": {
                        "value": 3.0,
                        "completion_criteria": {
                            "behavior": "CartPole",
                            "measure": "progress",
                            "threshold": 0.4,
                        },
                    }
                },
                {"Lesson1": {"value": 9.8}},
            ]
        }
    }
    write(tmp_path / "old.yaml", options)
    result = evtrain("learn", "old.yaml", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    notes = [
        line for line in result.stderr.splitlines() if "output_path" in line or "'name" in line
    ]
    assert notes == [
        "[WARNING] behaviors.CartPole.output_path: written by older ML-Agents releases; evtrain "
        "writes a behavior's files under checkpoint_settings.results_dir/run_id: ignored",
        "[INFO] environment_parameters.gravity.curriculum.0: lesson written as 'Lesson0: {...}' "
        "read as 'name: Lesson0' (ML-Agents' current form)",
        "[INFO] environment_parameters.gravity.curriculum.1: lesson written as 'Lesson1: {...}' "
        "read as 'name: Lesson1' (ML-Agents' current form)",
    ]
    assert (
        "[INFO] Parameter 'gravity' is now in lesson 1 ('Lesson1') after CartPole's step 128: "
        "Constant(value=9.8)"
    ) in result.stderr.splitlines()
    written = yaml.safe_load((tmp_path / "results/run/configuration.yaml").read_text())
    lessons = written["environment_parameters"]["gravity"]["curriculum"]
    assert [lesson["name"] for lesson in lessons] == ["Lesson0", "Lesson1"]


OLD_TRAINER_CONFIG = """\
default:
    trainer: ppo
    batch_size: 1024
    beta: 5.0e-3
    buffer_size: 10240
    epsilon: 0.2
    hidden_units: 128
    lambd: 0.95
    learning_rate: 3.0e-4
    learning_rate_schedule: linear
    max_steps: 5.0e5
    memory_size: 128
    normalize: false
    num_epoch: 3
    num_layers: 2
    time_horizon: 64
    sequence_length: 64
    summary_freq: 10000
    use_recurrent: false
    vis_encode_type: simple
    reward_signals:
        extrinsic:
            strength: 1.0
            gamma: 0.99

CartPole:
    normalize: true
    batch_size: 32
    buffer_size: 128
    hidden_units: 16
    max_steps: 256
    summary_freq: 128
    time_horizon: 32
    use_recurrent: true
    sequence_length: 8
    memory_size: 16
    pretraining:
        demo_path: old.demo
"""


def test_an_ml_agents_0_16_trainer_config_is_upgraded_with_a_note(tmp_path: Path) -> None:
    (tmp_path / "trainer_config.yaml").write_text(OLD_TRAINER_CONFIG)
    result = evtrain(
        "learn", "trainer_config.yaml", "--num-envs", "4", "--results-dir", "results", cwd=tmp_path
    )
    assert result.returncode == 0, result.stderr
    assert (
        "[WARNING] ML-Agents 0.16 trainer config (behaviors CartPole at the top level, default "
        "merged into each) converted to today's shape as mlagents-upgrade-config does; dropped, "
        "having no place: CartPole.pretraining"
    ) in result.stderr.splitlines()
    written = yaml.safe_load((tmp_path / "results/evtrain/configuration.yaml").read_text())
    behavior = written["behaviors"]["CartPole"]
    assert behavior["trainer_type"] == "ppo"
    assert behavior["max_steps"] == 256
    assert behavior["network_settings"]["hidden_units"] == 16
    assert behavior["network_settings"]["normalize"] is True
    assert behavior["network_settings"]["memory"] == {"sequence_length": 8, "memory_size": 16}
    assert behavior["hyperparameters"]["batch_size"] == 32
    assert behavior["hyperparameters"]["beta"] == 5.0e-3


def test_an_old_config_of_an_unknown_trainer_names_the_key() -> None:
    from evtrain import ConfigError, RunOptions

    with pytest.raises(ConfigError) as info:
        RunOptions.from_dict({"default": {"trainer": "offline_bc"}, "B": {"max_steps": 10}})
    assert info.value.problems == (
        "behaviors.B.trainer_type: expected a registered trainer type, got 'offline_bc'; "
        "available: ppo (evtrain), sac (evtrain), poca (evtrain), mappo (evtrain)",
    )


def test_the_old_configs_sections_are_run_options_fields() -> None:
    import attrs

    from evtrain.config.mlagents import _RUN_SECTIONS
    from evtrain.config.options import RunOptions

    assert set(_RUN_SECTIONS) == {*attrs.fields_dict(RunOptions), "engine_settings"}


# -- 4. the command line's odd corners -------------------------------------------------------


def test_debug_is_accepted_after_the_command_as_before_it(tmp_path: Path) -> None:
    write(tmp_path / "run.yaml", tiny(tmp_path / "results"))
    after = evtrain("learn", "run.yaml", "--debug", cwd=tmp_path)
    before = evtrain("--debug", "learn", "run.yaml", "--force", cwd=tmp_path)
    plain = evtrain("learn", "run.yaml", "--force", cwd=tmp_path)
    assert (after.returncode, before.returncode, plain.returncode) == (0, 0, 0), after.stderr
    debug_line = " DEBUG [evtrain"
    assert debug_line in after.stderr and debug_line in before.stderr
    assert debug_line not in plain.stderr


def test_version_prints_evtrains_version(tmp_path: Path) -> None:
    from evtrain._version import __version__

    result = evtrain("--version", cwd=tmp_path, process=True)
    assert (result.returncode, result.stdout) == (0, f"evtrain {__version__}\n")
    # The command is also `python -m evtrain` and, as when it was one module, `-m evtrain.cli`.
    for module in ("evtrain", "evtrain.cli"):
        ran = subprocess.run(
            [isolated_python(), "-m", module, "--version"],
            capture_output=True,
            text=True,
            cwd=tmp_path,
            timeout=120,
            check=False,
        )
        assert (ran.returncode, ran.stdout) == (0, f"evtrain {__version__}\n"), (module, ran)


@pytest.mark.skipif(torch.backends.mps.is_available(), reason="needs a torch without MPS")
def test_an_unavailable_mps_device_is_one_line_exit_2(tmp_path: Path) -> None:
    write(tmp_path / "run.yaml", tiny(tmp_path / "results"))
    result = evtrain("learn", "run.yaml", "--torch-device", "mps", cwd=tmp_path)
    assert (result.returncode, result.stderr) == (
        2,
        "evtrain: error: torch_settings.device: 'mps': MPS (Apple's Metal GPUs) is not available "
        f"to this torch ({torch.__version__}) on this machine; use --torch-device cpu "
        "(torch_settings.device), or leave the device unset\n",
    )
    assert not (tmp_path / "results").exists()


def test_a_negative_seed_other_than_minus_one_is_refused(tmp_path: Path) -> None:
    write(tmp_path / "run.yaml", tiny(tmp_path / "results"))
    result = evtrain("learn", "run.yaml", "--seed", "-5", cwd=tmp_path)
    assert (result.returncode, result.stderr) == (
        2,
        "evtrain: error: env_settings.seed: expected a seed of 0 or more, or -1 to draw one "
        "(logged), got -5\n",
    )
    drawn = evtrain("learn", "run.yaml", "--seed", "-1", cwd=tmp_path)
    assert drawn.returncode == 0, drawn.stderr
    assert "[INFO] env_settings.seed is -1: using seed " in drawn.stderr


def test_a_drawn_seed_is_written_to_the_run_folder_and_gives_the_same_run_again(
    tmp_path: Path,
) -> None:
    options = tiny(tmp_path / "results")
    del options["env_settings"]["seed"]  # -1: drawn
    options["writers"] = {"csv": {}}
    write(tmp_path / "run.yaml", options)
    drawn = evtrain("learn", "run.yaml", cwd=tmp_path)
    assert drawn.returncode == 0, drawn.stderr
    written = yaml.safe_load((tmp_path / "results/run/configuration.yaml").read_text())
    seed = written["env_settings"]["seed"]
    assert isinstance(seed, int) and seed >= 0
    assert f"[INFO] env_settings.seed is -1: using seed {seed}\n" in drawn.stderr
    again = evtrain("learn", "run.yaml", "--seed", str(seed), "--run-id", "again", cwd=tmp_path)
    assert again.returncode == 0, again.stderr
    # Before the first update the returns depend on the seed alone: the environments' resets
    # and the initial policy's weights and actions.
    first, second = (
        next(
            csv.DictReader(
                (tmp_path / f"results/{run}/CartPole/progress.csv").read_text().splitlines()
            )
        )
        for run in ("run", "again")
    )
    assert float(first["Step"]) == float(second["Step"]) == 128
    for key in ("Environment/Cumulative Reward", "Environment/Episode Length"):
        assert float(first[key]) == pytest.approx(float(second[key]), rel=1e-6), key


def test_plugins_before_the_config_leave_the_config_positional(tmp_path: Path) -> None:
    (tmp_path / "plugs").mkdir()
    write(tmp_path / "run.yaml", tiny(tmp_path / "results"))
    result = evtrain("learn", "--plugins", "plugs", "run.yaml", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    written = yaml.safe_load((tmp_path / "results/run/configuration.yaml").read_text())
    assert written["plugins"]["paths"] == ["plugs"]
    alone = evtrain("learn", "--plugins", "plugs", cwd=tmp_path)
    assert alone.returncode == 2
    assert alone.stderr.endswith(
        "evtrain learn: error: the following arguments are required: config\n"
    )


def test_more_environments_than_max_steps_are_refused(tmp_path: Path) -> None:
    write(tmp_path / "run.yaml", tiny(tmp_path / "results"))
    result = evtrain("learn", "run.yaml", "--num-envs", "100000", cwd=tmp_path)
    assert (result.returncode, result.stderr) == (
        2,
        "evtrain: error: env_settings.num_envs: 100,000 environments take 100,000 steps at each "
        "step, more than behaviors.CartPole.max_steps (256); use --num-envs "
        "(env_settings.num_envs) 256 or fewer, or raise max_steps\n",
    )
    assert not (tmp_path / "results").exists()


def test_resume_past_max_steps_says_so_and_keeps_the_latest_options(tmp_path: Path) -> None:
    write(tmp_path / "run.yaml", tiny(tmp_path / "results"))
    assert evtrain("learn", "run.yaml", cwd=tmp_path).returncode == 0
    again = evtrain("learn", "run.yaml", "--resume", "--num-envs", "2", cwd=tmp_path)
    assert again.returncode == 0, again.stderr
    assert (
        "[WARNING] CartPole: run run already reached max_steps 256 (at step 256); raise "
        "behaviors.CartPole.max_steps to continue"
    ) in again.stderr.splitlines()
    written = yaml.safe_load((tmp_path / "results/run/configuration.yaml").read_text())
    assert written["env_settings"]["num_envs"] == 2
    assert written["checkpoint_settings"]["resume"] is True


# -- 5. --inference ---------------------------------------------------------------------------


def test_inference_without_a_trained_model_says_how_to_give_one(tmp_path: Path) -> None:
    write(tmp_path / "run.yaml", tiny(tmp_path / "results"))
    result = evtrain("learn", "run.yaml", "--inference", cwd=tmp_path)
    assert (result.returncode, result.stderr) == (
        2,
        "evtrain: error: --inference runs a trained model, and run 'run' has none for CartPole "
        f"(no checkpoint in {tmp_path}/results/run): train the run first (--inference, with or "
        "without --resume, then runs its latest checkpoint), or run another run's model with "
        "--initialize-from RUN_ID (checkpoint_settings.initialize_from)\n",
    )
    assert not (tmp_path / "results").exists()


def test_inference_summaries_stay_off_the_training_curve(tmp_path: Path) -> None:
    write(tmp_path / "run.yaml", tiny(tmp_path / "results"))
    assert evtrain("learn", "run.yaml", cwd=tmp_path).returncode == 0
    behavior = tmp_path / "results/run/CartPole"
    trained = tensorboard_scalars(behavior, "Environment/Cumulative Reward")
    assert [step for step, _ in trained] == [128, 256]
    result = evtrain("learn", "run.yaml", "--inference", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "[INFO] CartPole/inference. Step: 256. Time Elapsed:" in result.stderr
    assert tensorboard_scalars(behavior, "Environment/Cumulative Reward") == trained
    inferred = tensorboard_scalars(behavior / "inference", "Environment/Cumulative Reward")
    assert [step for step, _ in inferred] == [128, 256]
    # With --resume, the same: the run's latest checkpoint, and its curve left as it was.
    resumed = evtrain("learn", "run.yaml", "--inference", "--resume", cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stderr
    assert "[INFO] CartPole/inference. Step: 256. Time Elapsed:" in resumed.stderr
    assert tensorboard_scalars(behavior, "Environment/Cumulative Reward") == trained


LOGGING_ENV = """
import json
import gymnasium as gym

class Logged(gym.Wrapper):
    def __init__(self, env, log):
        super().__init__(env)
        self.log = log

    def reset(self, **kwargs):
        self.obs, info = self.env.reset(**kwargs)
        return self.obs, info

    def step(self, action):
        with open(self.log, "a") as file:
            file.write(json.dumps([self.obs.tolist(), int(action)]) + "\\n")
        self.obs, *rest = self.env.step(action)
        return (self.obs, *rest)

def make_env(log=None):
    env = gym.make("CartPole-v1")
    return env if log is None else Logged(env, log)
"""


@pytest.mark.usefixtures("forget_env_modules")
def test_inference_takes_the_exported_policys_most_likely_action(tmp_path: Path) -> None:
    import json

    import numpy as np

    from evtrain.export import onnx_policy

    (tmp_path / "logged_env.py").write_text(LOGGING_ENV)
    write(tmp_path / "run.yaml", tiny(tmp_path / "results", env_id="logged_env:make_env"))
    assert evtrain("learn", "run.yaml", cwd=tmp_path).returncode == 0
    log = tmp_path / "steps.jsonl"
    options = tiny(tmp_path / "results", env_id="logged_env:make_env", env_kwargs={"log": str(log)})
    write(tmp_path / "logged.yaml", options)
    result = evtrain("learn", "logged.yaml", "--inference", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    rows = [json.loads(line) for line in log.read_text().splitlines()]
    assert len(rows) == 256
    policy = onnx_policy(tmp_path / "results/run/CartPole.onnx", threads=1)
    expected = policy(np.array([obs for obs, _ in rows], dtype=np.float32))
    assert [action for _, action in rows] == np.asarray(expected).reshape(-1).tolist()


# -- 6. demonstrations named .demo ------------------------------------------------------------


def test_a_recorded_file_named_dot_demo_is_read_back_and_unitys_are_still_named(
    tmp_path: Path,
) -> None:
    write(tmp_path / "run.yaml", tiny(tmp_path / "results"))
    assert evtrain("learn", "run.yaml", cwd=tmp_path).returncode == 0
    recorded = evtrain(
        "record", "run.yaml", "--episodes", "2", "--output", "expert.demo", cwd=tmp_path
    )
    assert recorded.returncode == 0, recorded.stderr
    assert (tmp_path / "expert.demo").read_bytes()[:4] == b"PK\x03\x04"
    cloning = tiny(tmp_path / "results", run_id="cloned")
    cloning["behaviors"]["CartPole"]["behavioral_cloning"] = {"demo_path": "expert.demo"}
    write(tmp_path / "cloning.yaml", cloning)
    result = evtrain("learn", "cloning.yaml", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "results/cloned/CartPole.onnx").is_file()
    # a folder holding it reads it too
    (tmp_path / "demos").mkdir()
    (tmp_path / "expert.demo").rename(tmp_path / "demos/expert.demo")
    cloning["behaviors"]["CartPole"]["behavioral_cloning"] = {"demo_path": "demos"}
    write(tmp_path / "cloning.yaml", cloning)
    assert evtrain("learn", "cloning.yaml", "--force", cwd=tmp_path).returncode == 0
    # Unity's own .demo (protobuf, not a zip archive) is still named as such
    (tmp_path / "unity.demo").write_bytes(b"\x0a\x13Unity demonstration")
    cloning["behaviors"]["CartPole"]["behavioral_cloning"] = {"demo_path": "unity.demo"}
    write(tmp_path / "cloning.yaml", cloning)
    unity = evtrain("learn", "cloning.yaml", "--force", cwd=tmp_path)
    assert (unity.returncode, unity.stderr.splitlines()[-1] + "\n") == (
        2,
        "evtrain: error: behaviors.CartPole.behavioral_cloning.demo_path: unity.demo is an "
        "ML-Agents .demo file, recorded by Unity; evtrain reads its own demonstrations (.npz): "
        "record them with evtrain record CONFIG --run-id ID --episodes N --output FILE\n",
    )


# -- 7. one bus, several runs -----------------------------------------------------------------


WATCHING_PLUGIN = """
from evtrain import signals

SEEN = []

def connect(options, bus):
    run_id = options.checkpoint_settings.run_id
    bus.connect(
        signals.run_started,
        lambda event: SEEN.append((run_id, event.run_id)),
        name=f"watch-{run_id}",
    )

EVTRAIN_PLUGINS = {"evtrain.subscriber": {"watch": connect}}
"""


def test_a_reused_bus_drops_what_each_runs_plugins_connected(tmp_path: Path) -> None:
    import threading

    from evtrain import Bus
    from evtrain.run.learn import learn

    plugins = tmp_path / "plugins"
    plugins.mkdir()
    (plugins / "watching_plugin_first_day.py").write_text(WATCHING_PLUGIN)
    with Bus() as bus:
        before = bus.subscriptions
        for run_id in ("one", "two"):
            options = tiny(tmp_path / "results", run_id=run_id)
            options["plugins"] = {"paths": [str(plugins)]}
            learn(options, bus)
            assert bus.subscriptions == before
        seen = sys.modules.pop("watching_plugin_first_day").SEEN
        assert seen == [("one", "one"), ("two", "two")]
        # the plugins' subscriber threads end too, while the bus lives on
        watchers = [
            t for t in threading.enumerate() if t.name.startswith("evtrain-subscriber[watch")
        ]
        for thread in watchers:
            thread.join(timeout=60)
        assert [t.name for t in watchers if t.is_alive()] == []


# -- 8. learn() from Python -------------------------------------------------------------------


LEARN_FROM_PYTHON = """
import logging
import sys

from evtrain import learn

if sys.argv[1] == "configured":
    logging.basicConfig(level=logging.INFO, format="%(name)s: %(message)s")
learn("run.yaml")
print("evtrain handlers after:", logging.getLogger("evtrain").handlers)
"""


def step_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if "CartPole. Step: " in line]


def test_learn_from_python_logs_progress_once_whether_or_not_logging_is_configured(
    tmp_path: Path,
) -> None:
    write(tmp_path / "run.yaml", tiny(tmp_path / "results"))
    (tmp_path / "script.py").write_text(LEARN_FROM_PYTHON)
    plain = subprocess.run(
        [isolated_python(), "script.py", "plain"], capture_output=True, text=True, cwd=tmp_path
    )
    assert plain.returncode == 0, plain.stderr
    assert [line.split(". Time")[0] for line in step_lines(plain.stderr)] == [
        "[INFO] CartPole. Step: 128",
        "[INFO] CartPole. Step: 256",
    ]
    assert plain.stdout == "evtrain handlers after: []\n"
    write(tmp_path / "run.yaml", tiny(tmp_path / "results", run_id="configured"))
    configured = subprocess.run(
        [isolated_python(), "script.py", "configured"], capture_output=True, text=True, cwd=tmp_path
    )
    assert configured.returncode == 0, configured.stderr
    assert [line.split(". Time")[0] for line in step_lines(configured.stderr)] == [
        "evtrain: CartPole. Step: 128",
        "evtrain: CartPole. Step: 256",
    ]


def test_errors_raised_to_python_name_the_option_beside_the_flag(tmp_path: Path) -> None:
    from evtrain.errors import RunFolderError
    from evtrain.run.learn import learn

    options = tiny(tmp_path / "results")
    learn(options)  # a run of that id exists now
    with pytest.raises(RunFolderError) as info:
        learn(options)
    assert str(info.value) == (
        f"run 'run' already exists in {tmp_path}/results/run. Use --resume "
        "(checkpoint_settings.resume) to continue it, --force (checkpoint_settings.force) to "
        "overwrite it, or choose another --run-id (checkpoint_settings.run_id)."
    )


# -- 9. the progress bar ----------------------------------------------------------------------


def recorded_display(behaviors: dict[str, int]) -> tuple[Any, Any]:
    """A progress display drawing into a string, refreshed only when asked (no timer)."""
    import io

    from rich.console import Console

    from evtrain.run.progress import ProgressDisplay

    out = io.StringIO()
    display = ProgressDisplay(behaviors, console=Console(file=out, force_terminal=True, width=100))
    display.progress.live.auto_refresh = False
    return display, out


def test_the_bar_under_a_log_line_is_the_current_one() -> None:
    import logging

    display, out = recorded_display({"CartPole": 1000})
    with display:
        display("CartPole", 100, 1000)
        display.progress.refresh()
        display("CartPole", 500, 1000)
        logging.getLogger("evtrain").warning("a log line")
        after = out.getvalue().split("a log line", 1)[1]
    assert "500/1000" in after
    assert "100/1000" not in after


def test_the_bar_follows_a_run_past_max_steps() -> None:
    display, out = recorded_display({"CartPole": 100})
    with display:
        display("CartPole", 64, 100)
        display("CartPole", 128, 100)
    (task,) = display.progress.tasks
    assert (task.completed, task.total) == (128, 128)
    assert "128/128" in out.getvalue()


def test_the_bar_shows_the_reward_of_an_inference_run() -> None:
    from evtrain import StatsEvent, StatsSummary

    display, _ = recorded_display({"CartPole": 100})
    summary = StatsSummary(full_dist=[21.5])
    display.on_stats(
        StatsEvent(
            category="CartPole/inference",
            step=64,
            values={"Environment/Cumulative Reward": summary},
        )
    )
    (task,) = display.progress.tasks
    assert task.fields["reward"] == "21.500"
