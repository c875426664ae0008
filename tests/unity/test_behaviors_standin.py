"""UnityBehaviors over the stand-in build launched as a player: the mixed scene (hybrid
actions, a PNG camera in either layout, groups, decision periods, a late and a leaving agent)
and the multi scene (self-play teams beside a group behavior)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from gymnasium import spaces

from evtrain.unity.behaviors import UnityBehaviors
from evtrain.unity.connection import UnityConnection
from tests.helpers import end_with_the_suite, free_port
from tests.standin import make_build
from tests.standin.launch import launch


@pytest.mark.parametrize(("layout", "camera"), [("hwc", (16, 16, 3)), ("chw", (3, 16, 16))])
def test_the_mixed_scene_steps_as_slots(
    tmp_path: Path, layout: str, camera: tuple[int, ...]
) -> None:
    build = make_build(tmp_path, "mixed", args=("--layout", layout))
    port = free_port()
    with UnityConnection(port, timeout=30.0).open() as connection:
        process = end_with_the_suite(launch(build, port, tmp_path / "Player-0.log"))
        connection.handshake(30.0, alive=lambda: process.poll() is None)
        shared = UnityBehaviors([connection], spare_copies={"Mixed": 1})
        view = shared.view("Mixed")
        space = view.single_observation_space
        assert isinstance(space, spaces.Dict)
        assert [space[k].shape for k in ("obs_0", "obs_1")] == [camera, (4,)]
        assert isinstance(view.single_action_space, spaces.Dict)
        assert (view.group_size, view.num_envs) == (2, 6)  # groups 1 and 2, one spare copy
        rng = np.random.default_rng(0)
        active = np.zeros(view.num_envs, dtype=np.int64)
        group_rewards = 0.0
        for _ in range(30):
            actions = {
                "continuous": rng.uniform(-1, 1, (view.num_envs, 2)),
                "discrete": rng.integers(0, (3, 2), (view.num_envs, 2)),
            }
            record = shared.step({"Mixed": actions})["Mixed"]
            active += record.active
            group_rewards += float(np.abs(record.group_reward).sum())
            camera_now = view.observations()["obs_0"]
            assert camera_now.min() >= 0.0 and camera_now.max() <= 1.0
        assert active[4:].sum() > 0  # the late agent got the spare copy
        assert active[:4].min() > 0
        assert group_rewards > 0
        shared.close()
    assert process.wait(10) == 0
