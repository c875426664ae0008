"""``env_settings.vectorization: ray`` against a real Ray cluster of two nodes on 127.0.0.1
(:mod:`tests.ray_cluster`), started once for the module: Ray starts slowly on 2 cores.

The vector environment itself is stepped here, in this process connected to the cluster (the
trajectories of ``sync`` and ``ray`` alike; a worker lost, restarted and its episodes
truncated); ``evtrain learn`` and ``torchrun ... evtrain learn`` run against the same cluster
as a user's would.
"""

from __future__ import annotations

import builtins
import logging
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import yaml

from evtrain.config.options import EnvironmentSettings, RaySettings
from evtrain.errors import ConfigError, EnvWorkerError
from evtrain.extras import install_hint
from evtrain.run.environments.envs import make_envs
from evtrain.run.environments.ray_envs import worker_count
from tests.curriculum_envs import (
    CURRICULUM,
    check_curriculum_returns,
    recorded_run,
    returns,
    run_options,
)
from tests.helpers import ROOT, tensorboard_scalars
from tests.ray_cluster import AUTH, Cluster, ray_env, walkthrough

SCRIPTS = {name: Path(sys.executable).parent / name for name in ("evtrain", "torchrun")}


def doc_command(index: int, config: Path) -> list[str]:
    """Command ``index`` of docs/distributed.md's walk-through, its script this venv's and
    ``config.yaml`` the test's ``config``."""
    name, *args = walkthrough()[index]
    return [str(SCRIPTS[name]), *(str(config) if arg == "config.yaml" else arg for arg in args)]


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    started = Cluster()
    try:
        yield started
    finally:
        started.close()


@pytest.fixture(scope="module")
def ray(cluster: Cluster) -> Iterator[Any]:
    """Ray in this process, connected to :func:`cluster` (with its token, which Ray reads when
    it is imported)."""
    before = {key: os.environ.get(key) for key in AUTH}
    os.environ.update(AUTH)
    import ray

    # Ray's driver swaps builtins.print for its own (ray.experimental.tqdm_ray.safe_print)
    # and leaves it there: later tests in this worker would print through Ray.
    printer = builtins.print
    ray.init(address=cluster.address, logging_level=logging.WARNING)
    try:
        yield ray
    finally:
        ray.shutdown()
        builtins.print = printer
        for key, value in before.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def ray_settings(cluster: Cluster, **env: Any) -> EnvironmentSettings:
    workers = RaySettings(address=cluster.address, workers=2, cpus_per_worker=0.5, max_restarts=1)
    return EnvironmentSettings(vectorization="ray", ray=workers, **env)


def test_sync_and_ray_step_through_the_same_trajectories(cluster: Cluster, ray: Any) -> None:
    ray_envs = make_envs(ray_settings(cluster, num_envs=5))
    sync_envs = make_envs(EnvironmentSettings(num_envs=5))
    try:
        assert len(set(ray_envs.nodes)) == 2  # SPREAD: a worker on each node
        assert [list(share) for share in ray_envs.shares] == [[0, 1, 2], [3, 4]]
        first = ray_envs.reset(seed=7)[0]
        np.testing.assert_array_equal(first, sync_envs.reset(seed=7)[0])
        rng = np.random.default_rng(0)
        ended = 0
        for _ in range(120):
            actions = rng.integers(0, 2, size=5)
            (obs, *arrays, infos), (sync_obs, *sync_arrays, sync_infos) = (
                ray_envs.step(actions),
                sync_envs.step(actions),
            )
            np.testing.assert_array_equal(obs, sync_obs)
            for mine, theirs in zip(arrays, sync_arrays, strict=True):
                np.testing.assert_array_equal(mine, theirs)
            assert infos.keys() == sync_infos.keys()
            if "_final_obs" in infos:
                np.testing.assert_array_equal(infos["_final_obs"], sync_infos["_final_obs"])
                for i in np.flatnonzero(infos["_final_obs"]):
                    np.testing.assert_array_equal(infos["final_obs"][i], sync_infos["final_obs"][i])
                    ended += 1
        assert ended >= 5  # episodes ended, and were reset in the same step, alike
        assert ray_envs.call("spec")[0].id == "CartPole-v1"
        assert ray_envs.take_worker_restarts() == 0
    finally:
        ray_envs.close()
        sync_envs.close()


def test_ray_workers_get_the_values_and_lesson_changes(
    cluster: Cluster, ray: Any, tmp_path: Path
) -> None:
    workers = {"address": cluster.address, "workers": 2, "cpus_per_worker": 0.5}
    options = run_options(tmp_path, CURRICULUM, vectorization="ray", ray=workers)
    periods = returns(recorded_run(options))
    check_curriculum_returns(periods)
    # the same seeded draws, the same lessons, as in this process
    assert periods == returns(recorded_run(run_options(tmp_path / "sync", CURRICULUM)))


def test_a_lost_worker_is_restarted_and_its_episodes_truncated(
    cluster: Cluster, ray: Any, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    marker = tmp_path / "died"
    kwargs = {"die_at": 3, "marker": str(marker)}
    envs = make_envs(
        ray_settings(cluster, env_id="tests.ray_envs:mortal", env_kwargs=kwargs, num_envs=4)
    )
    try:
        obs, _ = envs.reset(seed=1)
        envs.set_attr("tag", ["a", "b", "c", "d"])
        for _ in range(2):
            obs, *_ = envs.step(np.zeros(4, dtype=np.int64))
        with caplog.at_level(logging.WARNING, logger="evtrain"):
            # only this step's lines: the placement line is INFO, and an earlier test in the
            # same process may have left evtrain's logger at INFO
            caplog.clear()
            new_obs, rewards, terminated, truncated, infos = envs.step(np.zeros(4, dtype=np.int64))
        assert marker.exists()
        lost = [w for w, share in enumerate(envs.shares) if truncated[share.start]]
        assert len(lost) == 1
        share = envs.shares[lost[0]]
        expected = np.zeros(4, dtype=np.bool_)
        expected[share.start : share.stop] = True
        np.testing.assert_array_equal(truncated, expected)
        assert not terminated.any()
        assert (rewards[expected] == 0).all()
        for i in share:  # the final observation is the last one the trainer saw
            np.testing.assert_array_equal(infos["final_obs"][i], obs[i])
            # the new environment reset with a seed drawn from its own (1 + i) and restart 1
            seed = int(np.random.SeedSequence([1 + i, 1]).generate_state(1)[0])
            np.testing.assert_array_equal(new_obs[i], gym.make("CartPole-v1").reset(seed=seed)[0])
        assert [r.getMessage() for r in caplog.records if r.name == "evtrain"] == [
            f"Ray environment worker {lost[0]} (environments {share.start}-{share.stop - 1}) "
            "was lost; restarted (1 of env_settings.ray.max_restarts 1): its episodes end "
            "truncated"
        ]
        assert envs.take_worker_restarts() == 1
        assert envs.take_worker_restarts() == 0
        # what changed the environments before was replayed on the new ones
        assert envs.get_attr("tag") == ("a", "b", "c", "d")
        for _ in range(5):  # the new environments step on
            envs.step(np.ones(4, dtype=np.int64))
    finally:
        envs.close()


@pytest.mark.parametrize("stale", [0, 1, 2, 5])
def test_one_death_counts_once_however_late_ray_sees_it(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, stale: int
) -> None:
    """A worker dies in a step, and the ``stale`` call attempts after it fail as well, as they
    do while Ray has not yet seen the death (tests/ray_standin.py): with ``max_restarts: 1``
    the run goes on past that one loss, counted once; a second death is one too many."""
    pytest.importorskip("ray")
    from evtrain.run.environments import ray_envs
    from evtrain.run.environments.ray_worker import EnvMaker
    from tests.ray_standin import StandInRay

    standin = StandInRay()
    monkeypatch.setattr(ray_envs, "import_ray", lambda: standin)
    maker = EnvMaker(env_id="CartPole-v1", env_kwargs={})
    envs = ray_envs.RayVectorEnv(maker, 4, 2, RaySettings(max_restarts=1))
    try:
        envs.reset(seed=1)
        envs.set_attr("tag", ["a", "b", "c", "d"])  # replayed on the new environments
        envs.step(np.zeros(4, dtype=np.int64))
        standin.kill_during_next_step(1, stale=stale)
        with caplog.at_level(logging.WARNING, logger="evtrain"):
            caplog.clear()
            *_, truncated, _ = envs.step(np.zeros(4, dtype=np.int64))
        assert truncated.tolist() == [False, False, True, True]
        assert [r.getMessage() for r in caplog.records if r.name == "evtrain"] == [
            "Ray environment worker 1 (environments 2-3) was lost; restarted (1 of "
            "env_settings.ray.max_restarts 1): its episodes end truncated"
        ]
        assert envs.take_worker_restarts() == 1
        assert envs.get_attr("tag") == ("a", "b", "c", "d")
        for _ in range(3):
            envs.step(np.ones(4, dtype=np.int64))
        assert envs.take_worker_restarts() == 0
        standin.kill_during_next_step(1, stale=stale)
        with pytest.raises(EnvWorkerError) as raised:
            envs.step(np.zeros(4, dtype=np.int64))
        assert str(raised.value).startswith(
            "Ray environment worker 1 (environments 2-3) was lost 2 time(s), more than "
            "env_settings.ray.max_restarts (1) allows"
        )
    finally:
        envs.close()


def test_a_worker_lost_more_often_than_max_restarts_stops_the_run(
    cluster: Cluster, ray: Any, tmp_path: Path
) -> None:
    kwargs = {"die_at": 2, "marker": str(tmp_path / "died")}
    settings = ray_settings(cluster, env_id="tests.ray_envs:mortal", env_kwargs=kwargs, num_envs=2)
    settings.ray.max_restarts = 0
    envs = make_envs(settings)
    try:
        envs.reset(seed=1)
        envs.step(np.zeros(2, dtype=np.int64))
        with pytest.raises(EnvWorkerError) as raised:
            envs.step(np.zeros(2, dtype=np.int64))
        assert re.fullmatch(
            r"Ray environment worker ([01]) \(environments \1\) was lost 1 time\(s\), more "
            r"than env_settings.ray.max_restarts \(0\) allows; raise it, or find out why its "
            r"process dies \(its Ray logs: ray logs, or the session's logs folder\)",
            str(raised.value),
        )
    finally:
        envs.close()


def test_a_worker_that_cannot_make_its_environments_says_so(cluster: Cluster, ray: Any) -> None:
    settings = ray_settings(cluster, env_kwargs={"no_such_argument": 1}, num_envs=2)
    with pytest.raises(EnvWorkerError) as raised:
        make_envs(settings)
    message = str(raised.value)
    assert message.startswith(
        "Ray environment worker 0 (environments 0) failed during construction (the "
        "environment's module and packages must be importable on every node; what happened "
        "there is in its Ray logs): "
    )
    assert "no_such_argument" in message


def test_workers_are_one_per_cpu_of_the_cluster_unless_set(cluster: Cluster, ray: Any) -> None:
    # the cluster: 2 nodes of 2 CPUs
    assert worker_count(EnvironmentSettings(num_envs=16, vectorization="ray"), ray) == 4
    half = RaySettings(cpus_per_worker=0.5)
    assert worker_count(EnvironmentSettings(num_envs=16, ray=half), ray) == 8
    assert worker_count(EnvironmentSettings(num_envs=3, ray=half), ray) == 3
    too_many = EnvironmentSettings(num_envs=2, ray=RaySettings(workers=3))
    with pytest.raises(ConfigError) as raised:
        worker_count(too_many, ray)
    assert raised.value.problems == (
        "env_settings.ray.workers: 3 workers for num_envs 2: each worker needs at least one "
        "environment; set workers to at most num_envs (or null: one per CPU of the cluster)",
    )


def test_pettingzoo_environments_are_refused_by_name() -> None:
    settings = EnvironmentSettings(env_id="classic/tictactoe-v3", vectorization="ray")
    with pytest.raises(ConfigError) as raised:
        make_envs(settings, behavior="player", behaviors={"player": None})
    assert raised.value.problems == (
        "env_settings.vectorization: 'ray' runs Gymnasium environments only; "
        "'classic/tictactoe-v3' is a PettingZoo environment: use vectorization: "
        "async (each copy in a process of its own) or sync",
    )


def test_without_ray_installed_the_error_says_how_to_install_it() -> None:
    code = (
        "import sys; sys.modules['ray'] = None\n"
        "from evtrain.run.environments.ray_envs import import_ray\n"
        "try:\n    import_ray()\nexcept ValueError as error:\n    print(error)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=True
    )
    assert done.stdout == (
        "env_settings.vectorization: 'ray' needs Ray, which is not installed; "
        f"{install_hint('ray')} (or use vectorization: async)\n"
    )


def learn_config(folder: Path, cluster: Cluster, max_steps: int) -> Path:
    """A small PPO run of a CartPole whose environment process dies once (at an environment's
    40th step: 160 steps of a rank's 4 environments), on 2 Ray workers per rank that may each
    be restarted once; a summary every ``max_steps // 4`` steps."""
    config = {
        "behaviors": {
            "Agent": {
                "trainer_type": "ppo",
                "hyperparameters": {"batch_size": 32, "buffer_size": 64, "num_epoch": 1},
                "network_settings": {"hidden_units": 16, "num_layers": 1},
                "max_steps": max_steps,
                "time_horizon": 16,
                "summary_freq": max_steps // 4,
                "checkpoint_interval": max_steps // 2,
            }
        },
        "env_settings": {
            "env_id": "tests.ray_envs:mortal",
            "env_kwargs": {"die_at": 40, "marker": str(folder / "died")},
            "num_envs": 4,
            "seed": 1,
            "vectorization": "ray",
            "ray": {
                "address": cluster.address,
                "workers": 2,
                "cpus_per_worker": 0.5,
                "max_restarts": 1,  # the one loss must count once
            },
        },
        "checkpoint_settings": {"run_id": "run", "results_dir": str(folder / "results")},
    }
    path = folder / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


WORKERS = re.compile(
    r"Ray environment workers: worker 0 \(environments 0-1\) on node (\w+) pid \d+; "
    r"worker 1 \(environments 2-3\) on node (\w+) pid \d+"
)


def learn_on_the_cluster(line: int, cluster: Cluster, folder: Path, max_steps: int) -> str:
    """The walk-through's command ``line`` run with :func:`learn_config`'s config of
    ``max_steps``; it must succeed.  Its output."""
    done = subprocess.run(
        doc_command(line, learn_config(folder, cluster, max_steps)),
        capture_output=True,
        text=True,
        env={**ray_env(), "OMP_NUM_THREADS": "1"},
        cwd=ROOT,
        timeout=900,  # two learners and their workers on 2 busy cores
        check=False,
    )
    output = done.stdout + done.stderr
    assert done.returncode == 0, output
    return output


def test_learn_on_the_cluster_finishes_past_a_lost_worker(cluster: Cluster, tmp_path: Path) -> None:
    output = learn_on_the_cluster(2, cluster, tmp_path, max_steps=256)  # the death at 160
    nodes = WORKERS.search(output)
    assert nodes is not None, output
    assert nodes.group(1) != nodes.group(2)  # one worker on each node
    assert output.count("was lost; restarted (1 of env_settings.ray.max_restarts 1)") == 1
    run = tmp_path / "results" / "run"
    restarts = tensorboard_scalars(run / "Agent", "Environment/Worker Restarts")
    assert [step for step, _ in restarts] == [64, 128, 192, 256]
    assert sum(value for _, value in restarts) == 1
    assert (run / "Agent.onnx").exists()


def test_torchrun_learners_each_with_ray_workers(cluster: Cluster, tmp_path: Path) -> None:
    # 512 steps: 256 a rank, past the death at a rank's 160th
    output = learn_on_the_cluster(3, cluster, tmp_path, max_steps=512)
    assert len(WORKERS.findall(output)) == 2  # each rank's own two workers
    assert output.count("was lost; restarted") == 1  # one environment died, on one rank
    run = tmp_path / "results" / "run"
    restarts = tensorboard_scalars(run / "Agent", "Environment/Worker Restarts")
    assert sum(value for _, value in restarts) == 1  # summed over the ranks
    assert (run / "Agent.onnx").exists()
