"""ML-Agents' sample configs, as ML-Agents wrote them (tests/fixtures/mlagents_as_written/), run
through ``evtrain learn CONFIG --env BUILD`` against stand-in builds whose behaviors are named
and shaped like the samples' (tests/standin/scenes.py): each runs to its end and writes every
behavior's model in Unity's inference contract.

Only command-line flags are added (``--env``, ``--base-port``, ``--run-id``, ``--no-graphics``,
``--writer csv``, and ``--env-args --areas N``: the stand-in's training areas, where the scene
has many), and one key is changed: ``max_steps`` (ML-Agents' 500,000 to 50,000,000 steps),
which ``evtrain learn`` has no flag for, is lowered to one or two rollouts in a copy of the file
(checked to differ from ML-Agents' in that line only).
"""

from __future__ import annotations

import csv
import re
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime  # type: ignore[import-untyped]  # ships no type information
import pytest
import yaml

from tests.helpers import free_port, run_cli
from tests.standin import REPO, make_build

AS_WRITTEN = REPO / "tests" / "fixtures" / "mlagents_as_written"


class Sample:
    """One sample config: its stand-in and what its model must be."""

    def __init__(self, scenario: str, max_steps: int, *, areas: int = 0, continuous: int = 0,
                 branches: tuple[int, ...] = (), inputs: int = 1) -> None:  # fmt: skip
        self.scenario = scenario
        self.max_steps = max_steps
        self.areas = areas
        self.continuous = continuous
        self.branches = branches
        self.inputs = inputs


SAMPLES = {
    "ppo/Basic": Sample("corridor", 512, branches=(3,)),
    "ppo/3DBall": Sample("3DBall", 12000, areas=8, continuous=2),
    "ppo/GridWorld": Sample("GridWorld", 512, branches=(5,), inputs=2),
    "ppo/PushBlock": Sample("PushBlock", 2048, areas=8, branches=(7,)),
    "poca/SoccerTwos": Sample("SoccerTwos", 20480, areas=8, branches=(3, 3, 3), inputs=2),
}
"""``max_steps``: one rollout (``buffer_size``), two of Basic's and GridWorld's small ones."""

SLOW = {"poca/SoccerTwos"}
"""20,480 steps through POCA's 2 x 512 networks and attention critic: about 40 s."""


def params() -> list[Any]:
    marks = {name: [pytest.mark.slow] if name in SLOW else [] for name in SAMPLES}
    return [pytest.param(name, id=name, marks=marks[name]) for name in SAMPLES]


def shortened(name: str, folder: Path, max_steps: int) -> Path:
    """A copy of ML-Agents' file whose only change is ``max_steps``."""
    text = (AS_WRITTEN / f"{name}.yaml").read_text()
    copy = re.sub(r"(?m)^(    max_steps: )\d+$", rf"\g<1>{max_steps}", text)
    changed = [(a, b) for a, b in zip(text.splitlines(), copy.splitlines(), strict=True) if a != b]
    assert [b.strip() for _, b in changed] == [f"max_steps: {max_steps}"]
    path = folder / Path(name).name
    path.write_text(copy)
    return path


def model_outputs(path: Path) -> dict[str, Any]:
    """The model's outputs for one agent's zero observations (every action allowed)."""
    session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    feed = {
        i.name: (np.ones if i.name == "action_masks" else np.zeros)(
            [1, *i.shape[1:]], dtype=np.float32
        )
        for i in session.get_inputs()
    }
    names = [o.name for o in session.get_outputs()]
    return {"inputs": sorted(feed), **dict(zip(names, session.run(None, feed), strict=True))}


@pytest.mark.parametrize("name", params())
def test_an_mlagents_sample_config_runs_as_written_on_its_stand_in(
    name: str, tmp_path: Path
) -> None:
    sample = SAMPLES[name]
    behavior = Path(name).stem
    build = make_build(tmp_path / "builds", sample.scenario, behavior)
    config = shortened(name, tmp_path, sample.max_steps)
    flags = ["--env", str(build), "--base-port", str(free_port()), "--run-id", "sample"]
    flags += ["--no-graphics", "--writer", "csv"]
    if sample.areas:
        flags += ["--env-args", "--areas", str(sample.areas)]
    result = run_cli(config.name, *flags, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    run = tmp_path / "results" / "sample"
    assert f"policy exported to results/sample/{behavior}.onnx" in result.stdout
    outputs = model_outputs(run / f"{behavior}.onnx")
    expected_inputs = [f"obs_{i}" for i in range(sample.inputs)]
    assert outputs["inputs"] == sorted(expected_inputs + (["action_masks"] * bool(sample.branches)))
    assert outputs["version_number"].tolist() == [3.0]
    if sample.branches:
        assert outputs["discrete_action_output_shape"].tolist() == [list(sample.branches)]
        assert outputs["discrete_actions"].shape == (1, len(sample.branches))
    if sample.continuous:
        assert outputs["continuous_action_output_shape"].tolist() == [sample.continuous]
        assert outputs["continuous_actions"].shape == (1, sample.continuous)
    with (run / behavior / "progress.csv").open() as f:
        rows = list(csv.DictReader(f))
    assert int(float(rows[-1]["Step"])) >= sample.max_steps
    if name == "poca/SoccerTwos":  # self-play (its ELO) and POCA's group reward, from the build
        assert "Self-play/ELO" in rows[-1] and "Environment/Group Cumulative Reward" in rows[-1]


EXAMPLES = REPO / "examples" / "configs"
EXAMPLE_BUILDS = {
    "unity_basic_ppo": ("corridor", "Basic", 0),
    "unity_3dball_sac": ("3DBall", "3DBall", 0),
    "unity_gridworld_ppo": ("GridWorld", "GridWorld", 0),
    "unity_soccer_poca_selfplay": ("SoccerTwos", "SoccerTwos", 4),
}
"""Each example's stand-in scene, behavior and training areas (0: the scene's own)."""


def test_every_unity_example_config_has_a_stand_in() -> None:
    assert sorted(p.stem for p in EXAMPLES.glob("unity_*.yaml")) == sorted(EXAMPLE_BUILDS)


def tiny(options: dict[str, Any]) -> dict[str, Any]:
    """An example on a tiny budget, as tests/test_example_configs.py runs the others: a few
    hundred steps, small rollouts; its trainers, networks, self-play and builds as written."""
    for settings in options["behaviors"].values():
        settings.update(max_steps=512, summary_freq=256)
        hyperparameters = settings["hyperparameters"]
        if settings["trainer_type"] == "sac":
            hyperparameters.update(buffer_init_steps=64, batch_size=32)
        else:
            hyperparameters.update(
                buffer_size=256, batch_size=min(hyperparameters["batch_size"], 64)
            )
            settings["time_horizon"] = min(settings["time_horizon"], 64)
        if "self_play" in settings:
            settings["self_play"].update(save_steps=128, team_change=256, swap_steps=64)
    return options


EXAMPLES_SLOW = {"unity_basic_ppo", "unity_gridworld_ppo"}
"""The examples whose keys and scene a sample of the default suite runs (ppo/Basic,
ppo/GridWorld); SAC and POCA with self-play run by default."""


@pytest.mark.parametrize(
    "name",
    [
        pytest.param(name, marks=[pytest.mark.slow] if name in EXAMPLES_SLOW else [])
        for name in sorted(EXAMPLE_BUILDS)
    ],
)
def test_a_unity_example_config_trains_its_stand_in(name: str, tmp_path: Path) -> None:
    scenario, behavior, areas = EXAMPLE_BUILDS[name]
    build = make_build(tmp_path / "builds", scenario, behavior)
    options = tiny(yaml.safe_load((EXAMPLES / f"{name}.yaml").read_text()))
    (tmp_path / f"{name}.yaml").write_text(yaml.safe_dump(options))
    flags = ["--env", str(build), "--base-port", str(free_port()), "--run-id", "example"]
    flags += ["--writer", "csv"]
    if areas:
        flags += ["--env-args", "--areas", str(areas)]
    result = run_cli(f"{name}.yaml", *flags, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    run = tmp_path / "results" / "example"
    assert model_outputs(run / f"{behavior}.onnx")["version_number"].tolist() == [3.0]
    with (run / behavior / "progress.csv").open() as f:
        rows = list(csv.DictReader(f))
    assert int(float(rows[-1]["Step"])) >= 512
    if "self_play" in options["behaviors"][behavior]:
        assert len({row["Self-play/ELO"] for row in rows}) > 1  # games ended, ratings moved
        assert any(row["Environment/Group Cumulative Reward"] for row in rows)  # POCA's
