"""The stand-in build (tests/standin) as evtrain's own client sees it: launched as a build,
stepped, quit; the fault builds (crash, never, no trainer) end as a build does."""

from __future__ import annotations

import signal
from pathlib import Path

import numpy as np
import pytest

from evtrain.errors import UnityCommunicationError
from evtrain.unity.connection import UnityConnection
from evtrain.unity.steps import ActionTuple
from tests.helpers import end_with_the_suite, free_port
from tests.standin import make_build
from tests.standin.corridor import BEST_RETURN
from tests.standin.launch import launch, lines_with, log_lines, wait_for_line


def right(count: int) -> ActionTuple:
    return ActionTuple(
        continuous=np.zeros((count, 0), np.float32), discrete=np.full((count, 1), 2, np.int32)
    )


def test_the_corridor_walked_right_pays_its_best_return_and_quits(tmp_path: Path) -> None:
    build = make_build(tmp_path / "builds", "corridor", "Basic", args=("--areas", "2"))
    log = tmp_path / "Player-0.log"
    port = free_port()
    with UnityConnection(port).open() as connection:
        process = end_with_the_suite(launch(build, port, log, "--extra", "7"))
        info = connection.handshake(30.0, alive=lambda: process.poll() is None)
        steps = connection.reset()
        assert info.communication_version == "1.5.0"
        assert list(connection.behavior_specs) == ["Basic"]
        decisions, _ = steps["Basic"]
        first_ids = list(decisions.agent_id)
        total = 0.0
        for _ in range(7):
            connection.set_actions("Basic", right(len(decisions.agent_id)))
            decisions, terminals = connection.step()["Basic"]
            total += float(decisions.reward.sum() + terminals.reward.sum())
        assert list(terminals.agent_id) == first_ids
        assert not terminals.interrupted.any()
        assert set(decisions.agent_id).isdisjoint(first_ids)  # a new episode is a new agent id
        assert terminals.reward == pytest.approx([1.0 - 0.01] * 2)
        assert total / 2 == pytest.approx(BEST_RETURN)  # 0.93, ML-Agents' Basic's best
    assert process.wait(10) == 0
    assert lines_with(log, ("args:",)) == [
        f"args: --scenario corridor --areas 2 -nographics -batchmode --mlagents-port {port} "
        f"-logFile {log} --extra 7"
    ]
    assert log_lines(log)[-1] == "quit: status 400"  # a quit is a non-200 status, as ML-Agents


def test_the_crash_build_dies_after_its_steps(tmp_path: Path) -> None:
    build = make_build(tmp_path, "crash", args=("--crash-after", "3"))
    log = tmp_path / "crash.log"
    port = free_port()
    with UnityConnection(port, timeout=20.0).open() as connection:
        process = end_with_the_suite(launch(build, port, log))
        connection.handshake(30.0, alive=lambda: process.poll() is None)
        connection.reset()
        for _ in range(2):
            connection.set_actions("Basic", right(1))
            connection.step()
        connection.set_actions("Basic", right(1))
        with pytest.raises(UnityCommunicationError):
            connection.step()
    assert process.wait(10) == 3
    assert wait_for_line(log, "crash:") == "crash: after 3 steps"


def test_the_never_build_runs_until_sigterm(tmp_path: Path) -> None:
    log = tmp_path / "never.log"
    process = end_with_the_suite(launch(make_build(tmp_path, "never"), free_port(), log))
    wait_for_line(log, "never:")
    process.send_signal(signal.SIGTERM)
    assert process.wait(10) == 0
    assert log_lines(log)[-1] == "quit: SIGTERM"


def test_a_build_with_no_trainer_gives_up_with_a_line_in_its_log(tmp_path: Path) -> None:
    log = tmp_path / "alone.log"
    port = free_port()
    build = make_build(tmp_path, "corridor")
    process = end_with_the_suite(launch(build, port, log, "--connect-timeout", "0.5"))
    assert process.wait(20) == 1
    assert log_lines(log)[-1] == f"quit: no trainer listening on 127.0.0.1:{port} after 0.5 s"


def test_an_unknown_scenario_is_refused_when_the_build_is_made(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="unknown stand-in scenario 'corridoor'"):
        make_build(tmp_path, "corridoor")
