"""ML-Agents' own sample configs (release 21's ``config/ppo``, ``config/sac`` and
``config/imitation``, kept in tests/fixtures/mlagents/), each run to completion through
``evtrain learn`` on a Gymnasium environment that stands in for its Unity scene; and the table
of every ML-Agents key in docs/configuration.md has a row for every key they use.

A file that uses what evtrain does not implement yet is an expected failure (strict: once it
runs, the mark must go), the missing parts named in its reason.  What is missing is read from
evtrain itself where it can be (the keys it refuses as "not supported yet", the test
environments and the ``record`` command that are not there); ``SAC_DISCRETE_ACTIONS`` is the one
switch kept by hand.
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
import json
import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime  # type: ignore[import-untyped]  # ships no type information
import pytest
import yaml
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from tests.helpers import clean_env, python
from tests.test_mlagents_keys import how_evtrain_treats, table_rows

REPO = Path(__file__).resolve().parent.parent
SAMPLES = REPO / "tests" / "fixtures" / "mlagents"
FILES = sorted(SAMPLES.glob("*/*.yaml"))
"""Release 21's files, by folder (``Sorter_curriculum.yaml`` at the top is an older version,
tests/test_curriculum.py's)."""

SLOW = {
    # large networks and buffers: 7-14 s of CPU each (20480 steps through 3 layers of 256-512)
    "ppo/Crawler",
    "ppo/Walker",
    "ppo/Worm",
    "ppo/Sorter_curriculum",  # 40960 steps; WallJump_curriculum is the curriculum by default
    "imitation/Crawler",
    "sac/Crawler",
    "sac/Walker",
    "sac/Worm",
    # the same keys and spaces as a file of the default suite, on other numbers
    "ppo/3DBall",  # = 3DBall_randomize without its samplers
    "ppo/3DBallHard",
    "ppo/PushBlock",  # = Basic's keys and spaces
    "ppo/Visual3DBall",  # = GridWorld's
    "ppo/VisualFoodCollector",  # = FoodCollector's
    "ppo/WallJump",  # = WallJump_curriculum without its curriculum
    "sac/3DBallHard",
    "sac/PushBlock",  # = sac/Basic's
    "sac/WallJump",
}
"""Files left to ``pytest -m slow``: one CLI run each costs 3-14 s of CPU (2 of them the
interpreter's start), all 35 about 2.5 minutes; the default suite keeps one file of each kind
of keys and spaces (18 files)."""

CONTINUOUS_ENVS = {"Pendulum-v1"}
"""The stand-ins with ``Box`` actions; every other one has CartPole's ``Discrete(2)``."""

SAC_DISCRETE_ACTIONS = True
"""Whether evtrain's SAC trains ``Discrete`` actions (ML-Agents' does): it needs a ``Box``
today, and 7 of the 12 SAC files are for Unity scenes with discrete actions."""

RUN_TIMEOUT = 300


def sample_id(path: Path) -> str:
    """``ppo/3DBall`` for tests/fixtures/mlagents/ppo/3DBall.yaml."""
    return f"{path.parent.name}/{path.stem}"


def load(path: Path) -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load(path.read_text())
    return data


def merge(base: dict[str, Any], top: dict[str, Any]) -> dict[str, Any]:
    """``top`` over ``base``, section by section (how ``default_settings`` applies)."""
    merged = dict(base)
    for key, value in top.items():
        below = merged.get(key)
        both = isinstance(below, dict) and isinstance(value, dict)
        merged[key] = merge(below, value) if both else value  # type: ignore[arg-type]
    return merged


def behaviors(options: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Each behavior's settings with ``default_settings`` merged under them."""
    default = options.get("default_settings") or {}
    return {name: merge(default, own or {}) for name, own in options["behaviors"].items()}


def trainer_of(settings: dict[str, Any]) -> str:
    trainer: str = settings.get("trainer_type", "ppo")
    return trainer


# --- which row of the key table documents a key of a file --------------------------------


def leaves(data: Any, path: tuple[str, ...] = ()) -> Iterator[tuple[str, ...]]:
    """The path of every value of ``data`` that is no mapping or list."""
    if isinstance(data, dict):
        for key, value in data.items():
            yield from leaves(value, (*path, str(key)))
    elif isinstance(data, list):
        for index, value in enumerate(data):
            yield from leaves(value, (*path, str(index)))
    else:
        yield path


def table_key(path: tuple[str, ...], options: dict[str, Any]) -> tuple[str, str | None]:
    """The key (and trainer type, for a hyperparameter) of the table row that documents the
    value at ``path``: behavior and parameter names and list indices become the table's
    placeholders, ``default_settings`` reads as a behavior's settings, and a lesson's ``value``
    as a parameter's own (a constant or a sampler, written alike)."""
    parts = list(path)
    trainer = None
    if parts[0] in ("behaviors", "default_settings"):
        if parts[0] == "behaviors":
            settings, rest = behaviors(options)[parts[1]], parts[2:]
        else:
            settings, rest = options["default_settings"], parts[1:]
        parts = ["behaviors", "<name>", *rest]
        if rest[:1] == ["hyperparameters"]:
            trainer = trainer_of(settings).upper()
    elif parts[0] == "environment_parameters":
        rest = parts[2:]
        if rest[:1] == ["curriculum"]:
            rest = ["curriculum", "<i>", *rest[2:]]
            if rest[2:3] == ["value"] and len(rest) > 3:
                rest = rest[3:]
        parts = ["environment_parameters", "<param>", *rest]
    return ".".join(parts), trainer


def keys_of(options: dict[str, Any]) -> set[tuple[str, str | None]]:
    """The table rows a file's keys need; ``env_settings.env_id`` and ``env_kwargs`` are
    evtrain's own (the keys the fixtures add that ML-Agents lacks)."""
    found = {table_key(path, options) for path in leaves(options)}
    return {
        (key, trainer)
        for key, trainer in found
        if key != "env_settings.env_id" and not key.startswith("env_settings.env_kwargs.")
    }


def not_yet(options: dict[str, Any]) -> list[str]:
    """The keys of a file that evtrain refuses as not supported yet (the outermost one of
    each path), as the key table's test reads evtrain's code."""
    found = set()
    for key, trainer in keys_of(options):
        parts = key.split(".")
        for end in range(1, len(parts) + 1):
            try:
                status = how_evtrain_treats(".".join(parts[:end]), trainer)
            except AssertionError:  # a placeholder level such as behaviors.<name>
                continue
            if status == "not yet":
                found.add(".".join(parts[:end]))
                break
    return sorted(found)


# --- what a file needs that evtrain lacks today ---------------------------------------------


def has_command(name: str) -> bool:
    """Whether ``evtrain NAME --help`` is a command's help."""
    from evtrain.cli import _parser

    quiet = io.StringIO()
    with contextlib.redirect_stdout(quiet), contextlib.redirect_stderr(quiet):
        try:
            _parser().parse_args([name, "--help"])
        except SystemExit as exit_:
            return exit_.code == 0
    return False


def demo_paths(options: dict[str, Any]) -> set[str]:
    """The ``demo_path`` values of a file (GAIL's and behavioral cloning's)."""
    found = set()
    for settings in behaviors(options).values():
        for part in (
            settings.get("reward_signals", {}).get("gail"),
            settings.get("behavioral_cloning"),
        ):
            if part:
                found.add(part["demo_path"])
    return found


def missing(options: dict[str, Any]) -> list[str]:
    """What of evtrain a file needs and does not find."""
    lacking = [f"{key} (refused: not supported yet)" for key in not_yet(options)]
    env_id = options["env_settings"]["env_id"]
    module, _, name = env_id.partition(":")
    if name and importlib.util.find_spec(module) is None:
        lacking.append(f"{module}.{name} (no module {module})")
    sac = any(trainer_of(s) == "sac" for s in behaviors(options).values())
    if sac and env_id not in CONTINUOUS_ENVS and not SAC_DISCRETE_ACTIONS:
        lacking.append("SAC for Discrete actions (evtrain's SAC needs a Box action space)")
    if demo_paths(options) and not has_command("record"):
        lacking.append("evtrain record (the demonstrations demo_path names)")
    return lacking


def sample_params() -> list[Any]:
    unknown = SLOW - {sample_id(path) for path in FILES}
    assert not unknown, f"SLOW names no fixture: {sorted(unknown)}"
    params = []
    for path in FILES:
        lacking = missing(load(path))
        marks = [pytest.mark.slow] if sample_id(path) in SLOW else []
        if lacking:
            reason = "evtrain lacks " + "; ".join(lacking)
            marks.append(pytest.mark.xfail(reason=reason, strict=True))
        params.append(pytest.param(path, id=sample_id(path), marks=marks))
    return params


# --- the demonstrations of the imitation files ----------------------------------------------


class Demonstrations:
    """Records each demonstration a file's ``demo_path`` names once, into ``root``: a short PPO
    run on the file's environment, then ``evtrain record`` of its policy."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def record(self, demo_path: str, env_id: str) -> None:
        if (self.root / demo_path).is_file():
            return
        if not has_command("record"):
            pytest.fail("evtrain has no record command yet")
        run_id = Path(demo_path).stem
        teacher = {
            "behaviors": {
                "Teacher": {
                    "trainer_type": "ppo",
                    "hyperparameters": {"batch_size": 64, "buffer_size": 256},
                    "network_settings": {"hidden_units": 16, "num_layers": 1},
                    "max_steps": 256,
                    "summary_freq": 256,
                }
            },
            "env_settings": {"env_id": env_id, "num_envs": 4, "seed": 1},
        }
        config = f"{run_id}.yaml"
        (self.root / config).write_text(yaml.safe_dump(teacher))
        (self.root / demo_path).parent.mkdir(parents=True, exist_ok=True)
        env = clean_env(PYTHONPATH=str(REPO))
        learned = python(
            "-m", "evtrain", "learn", config, "--run-id", run_id, cwd=self.root, env=env
        )  # fmt: skip
        assert learned.returncode == 0, learned.stderr
        recorded = python(
            "-m", "evtrain", "record", config, "--run-id", run_id, "--episodes", "5",
            "--output", demo_path, cwd=self.root, env=env,
        )  # fmt: skip
        assert recorded.returncode == 0, recorded.stderr
        assert (self.root / demo_path).is_file()


@pytest.fixture(scope="module")
def demonstrations(tmp_path_factory: pytest.TempPathFactory) -> Demonstrations:
    """The module's demonstrations: each recorded once, for every file that names it."""
    return Demonstrations(tmp_path_factory.mktemp("demonstrations"))


# --- the runs -------------------------------------------------------------------------------


def rollout(settings: dict[str, Any], num_envs: int) -> int:
    """Environment steps between two updates (docs/configuration.md): PPO collects
    ``buffer_size`` rounded up to a multiple of ``batch_size`` and of the environments; SAC
    steps every environment once."""
    if trainer_of(settings) == "sac":
        return num_envs
    hp = settings["hyperparameters"]
    step = math.lcm(hp["batch_size"], num_envs)
    buffer_size: int = hp["buffer_size"]
    return -(-buffer_size // step) * step


def summary_steps(settings: dict[str, Any], num_envs: int) -> tuple[int, list[int]]:
    """The step a behavior stops at (the end of the update that reaches ``max_steps``), and the
    steps its summaries are labelled with: at the end of each update that crosses a multiple
    of ``summary_freq``, the last one crossed; at the end, the final step unless the last
    update just wrote one."""
    every = rollout(settings, num_envs)
    final = -(-int(settings["max_steps"]) // every) * every
    freq = settings.get("summary_freq", 50000)  # ML-Agents' default, and evtrain's
    labels = []
    for end in range(every, final + 1, every):
        if end // freq > (end - every) // freq:
            labels.append(end // freq * freq)
    if not labels or labels[-1] <= final - every:
        labels.append(final)
    return final, labels


def expected_tags(settings: dict[str, Any]) -> set[str]:
    """Scalars every summary of the behavior holds (ML-Agents' names)."""
    tags = {
        "Environment/Cumulative Reward",
        "Environment/Episode Length",
        "Losses/Policy Loss",
        "Policy/Learning Rate",
    }
    if trainer_of(settings) == "sac":
        tags |= {"Losses/Q1 Loss", "Losses/Q2 Loss"}
    else:
        tags |= {"Losses/Value Loss", "Policy/Entropy"}
    signals = settings.get("reward_signals", {})
    if "curiosity" in signals:
        tags |= {"Losses/Curiosity Forward Loss", "Losses/Curiosity Inverse Loss"}
    if "rnd" in signals:
        tags.add("Losses/RND Loss")
    if "gail" in signals:
        tags.add("Losses/GAIL Loss")
    if "behavioral_cloning" in settings:
        tags.add("Losses/Pretraining Loss")
    return tags


ONNX_TYPES = {"tensor(float)": np.float32, "tensor(uint8)": np.uint8, "tensor(int64)": np.int64}


def run_policy(model: Path) -> list[np.ndarray]:
    """The exported policy, run in onnxruntime on a batch of two all-zero inputs."""
    session = onnxruntime.InferenceSession(str(model), providers=["CPUExecutionProvider"])
    feeds = {
        node.name: np.zeros(
            [d if isinstance(d, int) else 2 for d in node.shape], dtype=ONNX_TYPES[node.type]
        )
        for node in session.get_inputs()
    }
    outputs: list[np.ndarray] = session.run(None, feeds)
    return outputs


@pytest.mark.parametrize("sample", sample_params())
def test_mlagents_sample_config_trains_through_the_cli(
    sample: Path, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    options = load(sample)
    wanted = demo_paths(options)
    if wanted:
        demonstrations: Demonstrations = request.getfixturevalue("demonstrations")
        for demo_path in sorted(wanted):
            demonstrations.record(demo_path, options["env_settings"]["env_id"])
            (tmp_path / demo_path).parent.mkdir(parents=True, exist_ok=True)
            (tmp_path / demo_path).symlink_to(demonstrations.root / demo_path)
    (tmp_path / sample.name).write_text(sample.read_text())
    result = python(
        "-m", "evtrain", "learn", sample.name, "--run-id", "sample", "--results-dir", "results",
        cwd=tmp_path, env=clean_env(PYTHONPATH=str(REPO)), timeout=RUN_TIMEOUT,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-4000:]

    run = tmp_path / "results" / "sample"
    status = json.loads((run / "run_logs" / "training_status.json").read_text())
    num_envs = options["env_settings"]["num_envs"]
    for name, settings in behaviors(options).items():
        final, labels = summary_steps(settings, num_envs)
        assert status[name]["final_checkpoint"]["steps"] == final, name
        outputs = run_policy(run / f"{name}.onnx")
        assert outputs[0].shape[0] == 2 and np.isfinite(outputs[0]).all(), name
        events = EventAccumulator(str(run / name), size_guidance={"scalars": 0})
        events.Reload()
        tags = expected_tags(settings)
        assert tags <= set(events.Tags()["scalars"]), name
        for tag in sorted(tags):
            assert [s.step for s in events.Scalars(tag)] == labels, (name, tag)


# --- the key table --------------------------------------------------------------------------


def test_the_key_table_has_a_row_for_every_key_of_the_sample_configs() -> None:
    rows = {(key, trainer) for key, trainer, _ in table_rows()}
    used = set().union(*(keys_of(load(path)) for path in FILES))
    assert sorted(used - rows, key=str) == []
