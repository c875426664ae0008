"""ML-Agents' own sample configs (release 21's ``config/ppo``, ``config/sac``,
``config/imitation`` and ``config/poca``, kept in tests/fixtures/mlagents/), each run to
completion through ``evtrain learn`` on a Gymnasium or PettingZoo environment that stands in for
its Unity scene; and the table of every ML-Agents key in docs/configuration.md has a row for
every key they use.

A file that uses what evtrain does not implement yet is an expected failure (strict: once it
runs, the mark must go), the missing parts named in its reason.  What is missing is read from
evtrain itself where it can be (the keys it refuses as "not supported yet", the trainer types
it does not have, the self-play its ghost trainer refuses, the test environments and the
``record`` command that are not there); ``SAC_DISCRETE_ACTIONS`` is the one switch kept by hand.
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

from tests.helpers import run_evtrain
from tests.mlagents_table import how_evtrain_treats, table_rows

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
    "poca/SoccerTwos",  # 20480 agent steps through 2 x 512 and POCA's attention critic: 25 s
    "poca/DungeonEscape",  # two rollouts of 10240 (its agents die), knights_archers_zombies
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
    "poca/StrikersVsGoalie",  # = poca/SoccerTwos's, on two behaviors
}
"""Files left to ``pytest -m slow``: one CLI run each costs 3-25 s of CPU (2 of them the
interpreter's start), all 41 about 3.5 minutes; the default suite keeps one file of each kind
of keys and spaces (20 files: ``poca/PushBlockCollab`` for POCA, ``ppo/SoccerTwos`` for
self-play)."""

CONTINUOUS_ENVS = {"Pendulum-v1"}
"""The stand-ins with ``Box`` actions; every other Gymnasium one has CartPole's ``Discrete(2)``
(the PettingZoo ones have ``Discrete`` actions too)."""

AGENTS_LEAVE = {"butterfly/knights_archers_zombies-v11"}
"""The stand-ins whose agents leave their episodes early: the steps of a run count only the
steps its agents acted in, so a rollout of ``buffer_size`` slot steps holds fewer, and where a
run ends depends on when its agents died."""

GROUP_TRAINERS = {"poca", "mappo"}
"""The trainer types whose hyperparameters are PPO's keys (docs/configuration.md: "POCA and
MAPPO ``hyperparameters``"; the key table's PPO rows) and which write
``Environment/Group Cumulative Reward``."""

SAC_DISCRETE_ACTIONS = True
"""Whether evtrain's SAC trains ``Discrete`` actions (ML-Agents' does): it needs a ``Box``
today, and 7 of the 12 SAC files are for Unity scenes with discrete actions."""


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
            kind = trainer_of(settings)
            trainer = "PPO" if kind in GROUP_TRAINERS else kind.upper()
    elif parts[0] == "environment_parameters":
        rest = parts[2:]
        if rest[:1] == ["curriculum"]:
            rest = ["curriculum", "<i>", *rest[2:]]
            if rest[2:3] == ["value"] and len(rest) > 3:
                rest = rest[3:]
        parts = ["environment_parameters", "<param>", *rest]
    return ".".join(parts), trainer


def keys_of(options: dict[str, Any]) -> set[tuple[str, str | None]]:
    """The table rows a file's keys need; ``env_settings.env_id``, ``env_kwargs`` and
    ``agent_behaviors`` are evtrain's own (the keys the fixtures add that ML-Agents lacks)."""
    found = {table_key(path, options) for path in leaves(options)}
    own = ("env_settings.env_kwargs.", "env_settings.agent_behaviors.")
    return {
        (key, trainer)
        for key, trainer in found
        if key != "env_settings.env_id" and not key.startswith(own)
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


def self_play_refusals(options: dict[str, Any]) -> list[str]:
    """What evtrain's ghost trainer says of each self-playing behavior's teams before a run's
    first step (``team_slots`` on the environments ``evtrain learn`` builds for it)."""
    playing = [name for name, settings in behaviors(options).items() if "self_play" in settings]
    if not playing:
        return []
    if importlib.util.find_spec("evtrain.trainers.ghost") is None:
        return ["self_play (the ghost trainer, evtrain.trainers.ghost)"]
    from evtrain import ConfigError, RunOptions
    from evtrain.run.environments.envs import make_envs
    from evtrain.trainers.ghost import team_slots

    run = RunOptions.from_dict(options)
    refusals: list[str] = []
    for name in playing:
        envs = make_envs(run.env_settings, behavior=name, behaviors=run.behaviors)
        try:
            team_slots(name, envs)
        except ConfigError as error:
            refusals.extend(error.problems)
        finally:
            envs.close()
    return refusals


def missing(options: dict[str, Any]) -> list[str]:
    """What of evtrain a file needs and does not find."""
    from evtrain.trainers.registry import TRAINER_TYPES

    lacking = [f"{key} (refused: not supported yet)" for key in not_yet(options)]
    types = sorted({trainer_of(s) for s in behaviors(options).values()} - set(TRAINER_TYPES))
    lacking += [f"trainer_type {name} (no such trainer type)" for name in types]
    env_id = options["env_settings"]["env_id"]
    module, _, name = env_id.partition(":")
    if name and importlib.util.find_spec(module) is None:
        lacking.append(f"{module}.{name} (no module {module})")
    sac = any(trainer_of(s) == "sac" for s in behaviors(options).values())
    if sac and env_id not in CONTINUOUS_ENVS and not SAC_DISCRETE_ACTIONS:
        lacking.append("SAC for Discrete actions (evtrain's SAC needs a Box action space)")
    if demo_paths(options) and not has_command("record"):
        lacking.append("evtrain record (the demonstrations demo_path names)")
    if not types:
        lacking += self_play_refusals(options)
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
        learned = run_evtrain("learn", config, "--run-id", run_id, cwd=self.root)
        assert learned.returncode == 0, learned.stderr
        recorded = run_evtrain(
            "record", config, "--run-id", run_id, "--episodes", "5", "--output", demo_path,
            cwd=self.root,
        )  # fmt: skip
        assert recorded.returncode == 0, recorded.stderr
        assert (self.root / demo_path).is_file()


@pytest.fixture(scope="module")
def demonstrations(tmp_path_factory: pytest.TempPathFactory) -> Demonstrations:
    """The module's demonstrations: each recorded once, for every file that names it."""
    return Demonstrations(tmp_path_factory.mktemp("demonstrations"))


# --- the runs -------------------------------------------------------------------------------


def slots(options: dict[str, Any], name: str) -> int:
    """The environments behavior ``name`` steps together: ``num_envs``, times its agents in a
    copy of a PettingZoo environment (docs/multi-agent.md: its agent slots; in self-play, those
    of the team that learns first, the lowest number).  The stand-ins name every agent's
    behavior in ``agent_behaviors``."""
    env_settings = options["env_settings"]
    mapping = env_settings.get("agent_behaviors")
    if not mapping:
        return int(env_settings["num_envs"])
    roles = [spec.partition("?team=") for spec in mapping.values()]
    mine = [team for behavior, _, team in roles if behavior == name]  # their teams ("": none)
    if "self_play" in behaviors(options)[name]:  # without ?team=, each agent is a team
        first = min((int(team) for team in mine if team), default=None)
        mine = mine[:1] if first is None else [t for t in mine if t and int(t) == first]
    return int(env_settings["num_envs"]) * len(mine)


def rollout(settings: dict[str, Any], num_envs: int) -> int:
    """Environment steps between two updates (docs/configuration.md): PPO (and POCA, MAPPO)
    collects ``buffer_size`` rounded up to a multiple of ``batch_size`` and of the
    environments (agent slots); SAC steps every environment once."""
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
    if trainer_of(settings) in GROUP_TRAINERS:
        tags.add("Environment/Group Cumulative Reward")
    if trainer_of(settings) == "poca":
        tags.add("Losses/Baseline Loss")
    if "self_play" in settings:
        tags.add("Self-play/ELO")
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
    # In this process, as `evtrain learn` runs it: the stand-in environments are modules of
    # tests/, which this process imports as they are.
    result = run_evtrain(
        "learn", sample.name, "--run-id", "sample", "--results-dir", "results", cwd=tmp_path
    )
    assert result.returncode == 0, result.stderr[-4000:]

    run = tmp_path / "results" / "sample"
    status = json.loads((run / "run_logs" / "training_status.json").read_text())
    for name, settings in behaviors(options).items():
        final, labels = summary_steps(settings, slots(options, name))
        steps = status[name]["final_checkpoint"]["steps"]
        if options["env_settings"]["env_id"] in AGENTS_LEAVE:
            # a summary at the end only (summary_freq beyond the run), at whichever step
            assert settings["max_steps"] <= steps < settings["summary_freq"], name
            final, labels = steps, [steps]
        assert steps == final, name
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
