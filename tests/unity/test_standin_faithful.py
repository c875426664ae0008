"""The stand-in is a faithful build: the REAL mlagents-envs 0.28.0 client (in its own venv, see
tests/standin/reference.py) launches it, completes the handshake, reads its behavior specs, resets
and steps it with actions, sends engine configuration and environment parameters, receives its
stats, and closes it.

Every scene is driven by one process of that client (:func:`reports`), one build after another:
its import costs a second or two of CPU, paid once; each build still starts, handshakes and
closes on its own port, in a folder of its own.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from types import MappingProxyType
from typing import Any, NamedTuple

import pytest

from tests.helpers import free_port
from tests.standin import make_build
from tests.standin.launch import lines_with
from tests.standin.reference import ReferenceUnavailable, drive_all, reference_python
from tests.standin.scenes import FOLLOW_REWARD


@pytest.fixture(scope="session")
def mlagents_python() -> Path:
    try:
        return reference_python()
    except ReferenceUnavailable as error:
        pytest.fail(str(error))


class Plan(NamedTuple):
    scenario: str
    steps: int
    policy: str = "random"
    args: tuple[str, ...] = ()
    extra: Mapping[str, Any] = MappingProxyType({})


PLANS = {
    "corridor": Plan("corridor", 9, "right", ("--areas", "2"), {
        "engine": {"time_scale": 20.0, "width": 84, "height": 84, "quality_level": 1},
        "parameters": {"gravity": 9.5},
    }),
    "duel": Plan("duel", 12),
    "mixed-hwc": Plan("mixed", 8, args=("--layout", "hwc")),
    "mixed-chw": Plan("mixed", 2, args=("--layout", "chw")),
    **{scenario: Plan(scenario, 3) for scenario in
       ("3DBall", "GridWorld", "PushBlock", "multi", "SoccerTwos")},
    "crash": Plan("crash", 6, args=("--crash-after", "3")),
}  # fmt: skip
"""What each test drives: its scene, steps, policy, the build's arguments, side channels."""


class Driven(NamedTuple):
    report: dict[str, Any]
    folder: Path
    """The plan's folder: its build, and the build's logs under ``logs``."""


@pytest.fixture(scope="module")
def reports(mlagents_python: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Driven]:
    """Every plan of :data:`PLANS` driven by one process of the reference client, one build
    after another, each on a free port in a folder of its own."""
    folders = {name: tmp_path_factory.mktemp(f"standin-{name}") for name in PLANS}
    plans = []
    for name, plan in PLANS.items():
        build = make_build(folders[name] / "builds", plan.scenario)
        plans.append(
            {"build": str(build.with_suffix("")), "port": free_port(), "steps": plan.steps,
             "policy": plan.policy, "args": list(plan.args),
             "log_folder": str(folders[name] / "logs"), **plan.extra}
        )  # fmt: skip
    done = drive_all(mlagents_python, plans, cwd=tmp_path_factory.mktemp("standin-driver"))
    return {name: Driven(report, folders[name]) for name, report in zip(PLANS, done, strict=True)}


def spec(
    shapes: list[list[int]],
    dims: list[list[int]],
    continuous: int,
    branches: list[int],
    names: list[str],
    types: list[int] | None = None,
) -> dict[str, Any]:
    observations = [
        {"shape": s, "dimension_property": d, "observation_type": t, "name": n}
        for s, d, n, t in zip(shapes, dims, names, types or [0] * len(shapes), strict=True)
    ]
    return {"observations": observations, "continuous": continuous, "branches": branches}


def test_the_corridor_handshakes_steps_and_talks_on_side_channels(
    reports: dict[str, Driven],
) -> None:
    report, folder = reports["corridor"]
    assert report.get("error") is None, report.get("traceback")
    assert report["stage"] == "closed"
    assert report["specs"] == {"Basic": spec([[20]], [[1]], 0, [3], ["BasicSensor"])}
    first, goal, after = (report["steps"][i] for i in (0, 6, 7))  # 7 steps right: cell 17
    assert first["Basic"]["decision_ids"] == [1, 2]
    assert first["Basic"]["decision_obs"] == [[[2, 20], 2.0, 0.0, 1.0]]
    assert goal["Basic"]["terminal_ids"] == [] and after["Basic"]["terminal_ids"] == [1, 2]
    assert after["Basic"]["terminal_rewards"] == pytest.approx([0.99, 0.99])
    assert after["Basic"]["interrupted"] == [False, False]
    assert after["Basic"]["decision_ids"] == [3, 4]
    assert report["stats"] == {
        "Basic/Goal Cell": [[17.0, 0]] * 2,
        "Basic/Goals": [[1.0, 2]] * 2,
        "Basic/Seed": [[0.0, 1]] * 2,
        "Basic/Goal Steps": [[7.0, 3]] * 2,
    }
    log = folder / "logs" / "Player-0.log"
    assert lines_with(log, ("engine:", "env_param:", "init:")) == [
        "init: communication_version=1.5.0 package_version=0.28.0 seed=0 num_areas=1",
        "engine: width=84 height=84",
        "engine: quality_level=1",
        "engine: time_scale=20.0",
        "env_param: gravity=9.5",
    ]
    assert lines_with(log, ("analytics:",))[0].startswith(
        "analytics: TrainingEnvironmentInitialized mlagents_version=Custom "
        "mlagents_envs_version=0.28.0"
    )


def test_the_duel_has_two_teams_of_one_behavior_and_a_winner(reports: dict[str, Driven]) -> None:
    report = reports["duel"].report
    assert report.get("error") is None, report.get("traceback")
    duel = spec([[4]], [[1]], 0, [3], ["Vector0"])
    assert report["specs"] == {"Duel?team=0": duel, "Duel?team=1": duel}
    ended = report["steps"][10]  # 10 steps played; judged at the next decision
    blue, red = ended["Duel?team=0"], ended["Duel?team=1"]
    assert (blue["terminal_ids"], red["terminal_ids"]) == ([1], [2])
    rewards = blue["terminal_rewards"][0], red["terminal_rewards"][0]
    wins = [round(reward) for reward in rewards]
    assert wins[0] == -wins[1]  # a win and a loss, or a tie
    for reward, win in zip(rewards, wins, strict=True):  # beside each, its own follow reward
        assert reward - win == pytest.approx(0.0, abs=1e-6) or reward - win == pytest.approx(
            FOLLOW_REWARD
        )


def test_mixed_hybrid_actions_an_hwc_camera_groups_and_agents_coming_and_going(
    reports: dict[str, Driven],
) -> None:
    report = reports["mixed-hwc"].report
    assert report.get("error") is None, report.get("traceback")
    assert report["specs"] == {
        "Mixed": spec([[16, 16, 3], [4]], [[2, 2, 1], [1]], 2, [3, 2], ["Camera", "Vector0"])
    }
    steps = [step["Mixed"] for step in report["steps"]]
    assert steps[0]["decision_ids"] == [1, 2, 3, 4]
    assert steps[0]["decision_group_ids"] == [1, 1, 2, 2]
    assert steps[1]["decision_ids"] == [1, 3]  # agents 2 and 4 decide every second step
    assert steps[0]["decision_obs"][0][0] == [4, 16, 16, 3]
    assert 5 in steps[3]["decision_ids"]  # the late agent appears at step 3
    leaving = next(step for step in steps if step["terminal_ids"])
    assert leaving["terminal_ids"] == [3] and leaving["interrupted"] == [False]
    assert all(3 not in step["decision_ids"] for step in steps[steps.index(leaving) :])
    assert any(reward > 0 for step in steps for reward in step["decision_group_rewards"])


def test_a_chw_camera_is_a_package_3_build_that_mlagents_envs_0_28_cannot_decode(
    reports: dict[str, Driven],
) -> None:
    # Package 3.0 lays cameras out channels-first; mlagents-envs 0.28 reads the spec and then
    # fails on the PNG, exactly as it does with a real 3.0 build (1.x reads it).
    report = reports["mixed-chw"].report
    assert report["specs"]["Mixed"]["observations"][0] == {
        "shape": [3, 16, 16], "dimension_property": [1, 2, 2], "observation_type": 0,
        "name": "Camera",
    }  # fmt: skip
    assert report["error"] == (
        "UnityObservationException: Decompressed observation did not have the expected shape "
        "- decompressed had (16, 16, 3) but expected [3, 16, 16]"
    )
    assert "package_version=3.0.0" not in report["error"]
    assert report["stage"] == "closed"


@pytest.mark.parametrize(
    ("scenario", "specs"),
    [
        ("3DBall", {"3DBall": spec([[8]], [[1]], 2, [], ["Vector0"])}),
        ("GridWorld", {"GridWorld": spec([[84, 84, 3], [2]], [[2, 2, 1], [1]], 0, [5],
                                         ["Camera", "GoalSignal"], [0, 1])}),
        ("PushBlock", {"PushBlock": spec([[210]], [[1]], 0, [7], ["Vector0"])}),
        ("multi", {"Striker?team=0": spec([[6]], [[1]], 0, [3], ["Vector0"]),
                   "Striker?team=1": spec([[6]], [[1]], 0, [3], ["Vector0"]),
                   "Coop": spec([[5]], [[1]], 0, [3], ["Vector0"])}),
        ("SoccerTwos", {f"SoccerTwos?team={team}": spec(
            [[264], [72]], [[1], [1]], 0, [3, 3, 3], ["Vector0", "Vector1"]) for team in (0, 1)}),
    ],
)  # fmt: skip
def test_the_samples_have_their_behaviors_sizes(
    reports: dict[str, Driven], scenario: str, specs: dict[str, Any]
) -> None:
    report = reports[scenario].report
    assert report.get("error") is None, report.get("traceback")
    assert report["specs"] == specs
    agents = sum(len(step["decision_ids"]) for step in report["steps"][0].values())
    assert (
        agents
        == {"3DBall": 12, "GridWorld": 9, "PushBlock": 1, "SoccerTwos": 4, "multi": 8}[scenario]
    )
    if scenario == "multi":
        assert report["steps"][0]["Coop"]["decision_group_ids"] == [1, 1, 1, 2, 2, 2]
    if scenario == "GridWorld":
        assert report["steps"][0]["GridWorld"]["action_mask"] == [[[0, 0, 0, 0, 1]] * 9]


def test_a_crashing_build_is_seen_to_exit(reports: dict[str, Driven]) -> None:
    report = reports["crash"].report
    assert report["error"].startswith("UnityEnvironmentException: Environment shut down with ")
    assert report["stage"] == "closed"
