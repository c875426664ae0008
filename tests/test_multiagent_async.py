"""``vectorization: async`` with a PettingZoo Parallel environment: each copy in a process of its
own (:mod:`evtrain.multiagent.remote`) steps exactly as the same copy in the main process does,
its wrappers (``environment_parameters``) applied there; an error in a copy's process names the
copy and the environment; ``close`` ends the processes, even one whose environment hangs; a
turn-based game with it is refused by name; ``evtrain learn`` trains with it and exports."""

from __future__ import annotations

import functools
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from evtrain.config.environment_parameters import Constant
from evtrain.config.options import EnvironmentSettings
from evtrain.errors import ConfigError, CopyProcessError
from evtrain.multiagent import remote
from evtrain.multiagent.remote import RemoteCopy, start_copies
from evtrain.multiagent.slots import AgentSlots
from evtrain.run.environments.envs import make_envs
from evtrain.run.parameters.env_parameters import with_parameters
from evtrain.trainers.settings import TrainerSettings
from tests.curriculum_envs import SAMPLERS
from tests.helpers import run_config
from tests.multiagent_envs import Failing, onnx_actions, tiny, walkers

SPREAD = "mpe2.simple_spread_v3:parallel_env"


def both(env_id: str, copies: int, *names: str, **kwargs: Any) -> tuple[AgentSlots, AgentSlots]:
    """Behavior ``names[0]``'s slots over ``copies`` copies in this process, and in processes
    of their own."""
    made = []
    for vectorization in ("sync", "async"):
        settings = EnvironmentSettings(
            env_id=env_id, num_envs=copies, vectorization=vectorization, **kwargs
        )
        behaviors = {name: TrainerSettings() for name in names}
        envs = make_envs(settings, behavior=names[0], behaviors=behaviors)
        assert isinstance(envs, AgentSlots)
        made.append(envs)
    return made[0], made[1]


def same_run(sync: AgentSlots, rem: AgentSlots, steps: int, seed: int) -> int:
    """Step both with the same seeded random actions; assert every step's results equal; the
    number of copy episodes that ended."""
    rng = np.random.default_rng(seed)
    first = sync.reset(seed=seed), rem.reset(seed=seed)
    assert np.array_equal(first[0][0], first[1][0])
    assert first[0][1]["active"].tolist() == first[1][1]["active"].tolist()
    ended = 0
    for _ in range(steps):
        high = int(sync.single_action_space.n)  # type: ignore[attr-defined]
        actions = rng.integers(0, high, sync.num_envs)
        one, two = sync.step(actions), rem.step(actions)
        for a, b in zip(one[:4], two[:4], strict=True):
            assert np.array_equal(a, b)
        for key in ("active", "group_reward", "episode_over"):
            assert np.array_equal(one[4][key], two[4][key]), key
        assert np.array_equal(one[4].get("_final_obs", []), two[4].get("_final_obs", []))
        for a, b in zip(one[4].get("final_obs", []), two[4].get("final_obs", []), strict=True):
            assert np.array_equal(a, b)
        assert sync.acting.tolist() == rem.acting.tolist()
        ended += int(one[4]["episode_over"].sum())
    return ended


def test_simple_spread_steps_alike_in_processes_of_their_own() -> None:
    sync, rem = both(SPREAD, 2, "agent", env_kwargs={"max_cycles": 25})
    assert all(isinstance(copy.env, RemoteCopy) for copy in rem._copies.copies)
    assert (rem.num_envs, rem.single_observation_space) == (6, sync.single_observation_space)
    try:
        # 300 steps: 12 episodes of each copy, each copy reset with no seed after the first
        assert same_run(sync, rem, 300, seed=5) == 12 * 6
    finally:
        sync.close()
        rem.close()


def test_agents_that_leave_and_appear_step_alike_in_processes_of_their_own() -> None:
    sync, rem = both("tests.multiagent_envs:walkers", 3, "walker", "guide")
    try:
        # walker_1 leaves at step 2, walker_2 appears after step 3, every episode 6 steps
        assert same_run(sync, rem, 200, seed=2) == 33 * 9
    finally:
        sync.close()
        rem.close()


def test_environment_parameters_wrap_each_copy_in_its_process() -> None:
    made = [
        make_envs(
            EnvironmentSettings(
                env_id="tests.curriculum_envs:parameter_game",
                num_envs=2,
                vectorization=vectorization,
            ),
            functools.partial(with_parameters, samplers=SAMPLERS),
            behavior="player",
            behaviors={"player": TrainerSettings()},
        )
        for vectorization in ("sync", "async")
    ]
    try:
        for envs in made:
            envs.reset(seed=3)
        assert made[0].call("values") == made[1].call("values")
        assert made[1].call("environment_class") == ("ParameterGame",) * 2
        made[1].call("set_environment_parameters", {"bonus": Constant(value=5.0)})
        made[1].reset()
        assert made[1].call("values") == ({"bonus": 5.0, "tilt": 0.5},) * 2
    finally:
        for envs in made:
            envs.close()


def test_an_error_in_a_copys_process_names_the_copy_and_the_environment() -> None:
    factories: list[Callable[[], Any]] = [walkers, functools.partial(Failing, fail_at=2)]
    copies = [RemoteCopy(f, None, k, "'walkers'") for k, f in enumerate(factories)]
    for copy in copies:
        copy.started()
    slots = AgentSlots(copies, "walker", behaviors=["walker", "guide"])
    slots.reset(seed=0)
    slots.step(np.zeros(slots.num_envs, dtype=np.int64))
    with pytest.raises(CopyProcessError) as info:
        slots.step(np.zeros(slots.num_envs, dtype=np.int64))
    message = str(info.value)
    assert message.startswith(
        "copy 1 of 'walkers' failed in its process during step: ValueError: walkers broke at "
        "step 2\nTraceback"
    )
    assert message.endswith("(run it with env_settings.vectorization: sync to debug it in-process)")
    slots.close()
    assert [copy._process.exitcode for copy in copies] == [0, 0]

    with pytest.raises(
        CopyProcessError, match=r"^copy 0 of 'nothing' failed in its process during "
    ):
        start_copies(functools.partial(int, "x"), None, 2, "'nothing'")


def test_close_ends_every_copys_process_even_one_whose_environment_hangs(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(remote, "CLOSE_TIMEOUT", 0.5)
    copies = start_copies(functools.partial(Failing, fail_at=-1, hang=True), None, 2, "'w'")
    slots = AgentSlots(copies, "walker", behaviors=["walker", "guide"])
    slots.reset(seed=0)
    processes = [copy._process for copy in copies]
    assert all(p.is_alive() for p in processes)
    slots.close()
    # asked to close, the environments hang: terminated (SIGTERM) once the timeout passed
    assert [p.exitcode for p in processes] == [-15, -15]
    assert not any(p.is_alive() for p in processes)


def test_a_turn_based_game_is_refused_with_async_by_name() -> None:
    settings = EnvironmentSettings(env_id="tests.multiagent_envs:countdown", vectorization="async")
    with pytest.raises(ConfigError) as info:
        make_envs(settings, behavior="player", behaviors={"player": TrainerSettings()})
    assert info.value.problems == (
        "env_settings.vectorization: 'async' is not supported with a turn-based (AEC) "
        "PettingZoo environment ('tests.multiagent_envs:countdown') yet: every move would be "
        "a round trip to the copy's process; use vectorization: sync (the num_envs copies "
        "still step together)",
    )


def test_cli_trains_simple_spread_with_async_copies_and_exports(tmp_path: Path) -> None:
    env = {"env_id": SPREAD, "env_kwargs": {"max_cycles": 25}}
    options = tiny({"max_steps": 576}, {**env, "num_envs": 2, "vectorization": "async"}, ("agent",))
    result = run_config(tmp_path, options)
    assert result.returncode == 0, result.stderr
    run = tmp_path / "results" / "run"
    actions = onnx_actions(run / "agent.onnx", {"obs": np.zeros((6, 18), dtype=np.float32)})
    assert actions.shape == (6,) and set(actions.tolist()) <= {0, 1, 2, 3, 4}
