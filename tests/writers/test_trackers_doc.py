"""What docs/trackers.md tells a user to type, and what it says the MLflow writer logs,
checked against the project: the extras ``pyproject.toml`` defines, the ``mlflow server`` the
tests start, a real CLI run logging to a real MLflow server."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.helpers import ROOT, config, run_config
from tests.writers.mlflow_server import MlflowServer

DOC = (ROOT / "docs" / "trackers.md").read_text()
BASH = re.compile(r"^```bash\n(.*?)^```$", re.DOTALL | re.MULTILINE)


def commands() -> list[str]:
    return [line for block in BASH.findall(DOC) for line in block.splitlines() if line]


def test_the_install_commands_name_what_pyproject_defines() -> None:
    readme = (ROOT / "README.md").read_text()
    section = readme.split("## Installing extras\n")[1].split("\n## ")[0]
    pyproject = (ROOT / "pyproject.toml").read_text()  # no tomllib on Python 3.10
    version = re.search(r'^version = "(.*)"$', pyproject, re.MULTILINE)
    optional = pyproject.split("[project.optional-dependencies]\n")[1].split("\n[")[0]
    extras = set(re.findall(r"^([a-z-]+) = \[", optional, re.MULTILINE))
    assert version is not None and {"test", "mlflow", "wandb", "prometheus"} <= extras
    installs = [
        line
        for block in BASH.findall(section)
        for line in block.splitlines()
        if line.startswith("pip install")
    ]
    assert installs == [
        'pip install -c constraints.txt -e ".[mlflow]"',
        'pip install -c constraints.txt "dist/evtrain-0.1.0-py3-none-any.whl[mlflow]"',
    ]
    assert (ROOT / "constraints.txt").is_file()
    assert f"evtrain-{version.group(1)}-py3-none-any.whl" in installs[1]
    named = {n for c in installs for n in re.findall(r"\[([a-z,]+)\]", c)}
    named |= set(re.findall(r'`"\.\[([a-z,]+)\]"`', section))  # '`".[mlflow,wandb,prometheus]"`'
    assert named == {"mlflow", "mlflow,wandb,prometheus"}
    assert {e for n in named for e in n.split(",")} <= extras
    assert set(re.findall(r"`([a-z-]+)`", section.split("```")[0])) - {"pyproject.toml"} <= extras
    # `test` installs every tracker: its evtrain[...] line names at least these extras
    test_extra = optional.split("\n]")[0]
    assert {"mlflow", "wandb", "prometheus"} <= {
        e
        for n in re.findall(r'^ +"evtrain\[([a-z,-]+)\]",', test_extra, re.MULTILINE)
        for e in n.split(",")
    }
    assert "(../README.md#installing-extras)" in DOC.split("## Every tracker writer")[0]


def test_the_local_mlflow_server_command_is_the_one_the_tests_start() -> None:
    (server,) = [c for c in commands() if c.startswith("mlflow server")]
    assert server == (
        "mlflow server --host 127.0.0.1 --port 5000 --backend-store-uri sqlite:///mlruns.db"
    )
    started = (ROOT / "tests" / "writers" / "mlflow_server.py").read_text()
    for flag in re.findall(r"--[a-z-]+", server):
        assert f'"{flag}"' in started  # the same options, the test's own values


def test_mlflow_logs_is_training_and_the_trainers_step(
    mlflow_server: MlflowServer, tmp_path: Path
) -> None:
    """3 envs x 32 steps, a 128-step buffer: updates at 192, 384, 576; 256 is crossed at 384."""
    mlflow = pytest.importorskip("mlflow")
    uri = mlflow_server.uri
    options = config(tmp_path, max_steps=576, summary_freq=256, checkpoint_interval=576)
    options["env_settings"]["num_envs"] = 3
    options["writers"] = {"mlflow": {"tracking_uri": uri, "experiment": "doc"}}
    result = run_config(tmp_path, options)
    assert result.returncode == 0, result.stderr
    client = mlflow.MlflowClient(uri)
    (run,) = client.search_runs([client.get_experiment_by_name("doc").experiment_id])

    def logged(key: str) -> dict[int, float]:
        return {m.step: m.value for m in client.get_metric_history(run.info.run_id, key)}

    assert logged("CartPole/Is Training") == {256: 1.0, 512: 1.0}
    assert logged("CartPole/Step") == {256: 384.0, 512: 576.0}
    # the docs' example is this run's
    example = re.search(
        r"the summary at MLflow step (\d+) has `Step` (\d+)", DOC.replace("\n", " ")
    )
    assert example is not None and example.groups() == ("256", "384")
