from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from types import FrameType

import pytest
from xdist.scheduler import LoadScopeScheduling

from evtrain import Bus
from evtrain.cli.startup import pause_collector, resume_collector
from tests.helpers import PLUGIN, end_started
from tests.writers.mlflow_server import MlflowServer

if os.environ.get("PYTEST_XDIST_WORKER"):
    # A worker collects without the cyclic garbage collector: see pytest_collection_finish.
    pause_collector()


def pytest_configure(config: pytest.Config) -> None:
    """Signals, however pytest was started and however it ends.

    A shell runs a background job (``cmd &``, ``nohup``) with SIGINT ignored (and ``nohup``
    SIGHUP), a child inherits that, and a Python started so never raises KeyboardInterrupt
    nor hears a hangup: the Ctrl-C and SIGHUP tests then hung.  A handler (unlike an ignored
    signal) is reset to the default in a child at ``exec``: here a hangup ignored stays without
    effect, as ``nohup`` asked, while the processes the tests start get the default.

    SIGTERM, SIGINT and a hangup not ignored end the processes fixtures started
    (:data:`tests.helpers.STARTED`: servers and launchers in sessions of their own, which no
    terminal's signal reaches) before pytest goes as that signal would end it.
    """
    if not hasattr(config, "workerinput"):  # pytest's own process, before any worker
        _write_bytecode()
        _torchrun_logs(config)
    if signal.getsignal(signal.SIGHUP) is signal.SIG_IGN:
        signal.signal(signal.SIGHUP, _hangup_ignored)
    else:
        signal.signal(signal.SIGHUP, _ended_by_signal)
    signal.signal(signal.SIGTERM, _ended_by_signal)
    signal.signal(signal.SIGINT, _ended_by_signal)


def _write_bytecode() -> None:
    """Bytecode cached even where ``PYTHONDONTWRITEBYTECODE`` is set (as on CI machines): the
    suite starts hundreds of Pythons, and each would compile evtrain's sources again (a few
    tenths of a second each), and each xdist worker rewrite every test module's assertions.
    The caches go where Python puts them (``__pycache__``, ignored by git)."""
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
    sys.dont_write_bytecode = False


def _torchrun_logs(config: pytest.Config) -> None:
    """Every ``torchrun`` the tests start makes its log folder in ``/tmp``
    (``torchelastic_*``, empty unless it redirects the ranks' output), and an agent killed on
    purpose never removes it: about twenty a run.  ``PET_LOG_DIR`` (torchrun's ``--log-dir``
    from the environment) puts the suite's into one folder, removed when pytest ends."""
    if "PET_LOG_DIR" in os.environ:
        return
    folder = tempfile.mkdtemp(prefix="evtrain-tests-torchrun-")
    os.environ["PET_LOG_DIR"] = folder
    config.add_cleanup(lambda: shutil.rmtree(folder, ignore_errors=True))


_SUITE = os.getpid()
"""pytest's process: a child forked by a test (multiprocessing) inherits these handlers."""


def _hangup_ignored(signum: int, frame: object) -> None:
    """SIGHUP in a suite started under ``nohup``: ignored, as it asked."""
    del signum, frame


def _ended_by_signal(signum: int, frame: FrameType | None) -> None:
    """End what fixtures started, then end as ``signum`` would have (SIGINT: pytest's own
    KeyboardInterrupt, its report and teardown)."""
    if os.getpid() == _SUITE:
        end_started()
    if signum == signal.SIGINT:
        signal.default_int_handler(signum, frame)
    signal.signal(signum, signal.SIG_DFL)
    os.kill(os.getpid(), signum)


_GROUPS = {
    # a real mlflow server (tests/conftest.py's shared_mlflow_server): 10-20 s to start
    "tests/writers/test_mlflow_writer.py": "mlflow",
    "tests/writers/test_tracker_delivery.py": "mlflow",
    "tests/writers/test_mlflow_outage.py": "mlflow",
    "tests/writers/test_evaluation_trackers.py": "mlflow",
    "tests/writers/test_trackers_doc.py": "mlflow",
    "tests/test_elastic.py": "mlflow",  # its killed-rank runs write to it too
    "tests/test_untrusted_files.py": "mlflow",  # one test of it does
    # module-scoped fixtures that cost seconds
    "tests/test_ray.py": "ray",  # a local Ray cluster
    "tests/unity/test_standin_faithful.py": "mlagents-envs",  # a venv with mlagents-envs
    "tests/test_distributed.py": "distributed",  # a two-rank run under torchrun
    "tests/test_imitation.py": "imitation",  # trained experts
    "tests/test_mlagents_keys.py": "mlagents-keys",  # a trained teacher
    "tests/test_mlagents_samples.py": "mlagents-samples",  # recorded demonstrations
}
"""Modules whose tests share a session- or module-scoped fixture that costs seconds: all
of a group's tests run on one worker, which builds the fixture once (xdist's own
``xdist_group`` marks no longer group under pytest 9.2, whose node ids xdist cannot suffix)."""

_RUN_FIRST = (
    "tests/test_elastic.py",
    "tests/test_distributed.py",
    "tests/test_benchmarks_smoke.py",
    "tests/test_evaluation_faults.py",
    "tests/test_mlagents_samples.py",
    "tests/test_ray.py",
    "tests/writers/test_tracker_delivery.py",
    "tests/writers/test_mlflow_outage.py",
    "tests/writers/test_mlflow_writer.py",
    "tests/writers/test_evaluation_trackers.py",
    "tests/writers/test_trackers_doc.py",
    "tests/test_crash_consistency.py",
    "tests/unity/test_standin_faithful.py",
    "tests/test_readme.py",
    "tests/test_interrupts.py",
    "tests/test_first_day.py",
    "tests/test_example_configs.py",
    "tests/test_sweep.py",
)
"""Modules whose tests each run processes for seconds, roughly slowest first: the
workers take tests one at a time (:class:`_LongestFirst`), the long ones first, so that
they end together instead of one finishing a long test while the others wait."""


def pytest_collection_finish(session: pytest.Session) -> None:
    """A worker's collection (torch, every test module) runs with the cyclic garbage collector
    off, as ``evtrain``'s own start-up does (:mod:`evtrain.cli.startup`): its imports'
    allocations triggered collections walking torch's objects over and over, ~1.6 s of the
    ~9.5 s of CPU a collection takes.  Once it is done, what it made is frozen out of the
    collector's reach (it lives as long as the worker) and the collector is on again for the
    tests."""
    del session
    resume_collector()


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    first = {module: rank for rank, module in enumerate(_RUN_FIRST)}
    items.sort(key=lambda item: first.get(_module(item.nodeid), len(first)))


def _module(nodeid: str) -> str:
    return nodeid.split("::")[0]


def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> object:
    """pytest-xdist's scheduler for ``-n``: :class:`_LongestFirst`."""
    return _LongestFirst(config, log)


class _LongestFirst(LoadScopeScheduling):  # type: ignore[misc]  # xdist: no types
    """Tests handed out one at a time in the collection's order (slowest modules first),
    a group of :data:`_GROUPS` as one unit."""

    def __init__(self, config: pytest.Config, log: object = None) -> None:
        super().__init__(config, log)
        config.option.loadscopereorder = False

    def _split_scope(self, nodeid: str) -> str:
        return _GROUPS.get(_module(nodeid), nodeid)


@pytest.fixture(autouse=True)
def one_torch_thread() -> Iterator[None]:
    """Tests share two cores; the runner and the exports use one intra-op thread anyway.
    torch is imported here only if a test module already did."""
    torch = sys.modules.get("torch")
    if torch is None:
        yield
        return
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture
def bus() -> Iterator[Bus]:
    """A bus that raises subscriber errors in tests unless a test asks otherwise."""
    with Bus() as bus:
        yield bus


@pytest.fixture(scope="session")
def plugin_site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder holding the example plugin installed by pip, for ``PYTHONPATH``.

    Built from a copy: building in place leaves ``build/`` and ``*.egg-info`` in the source
    tree.  ``--no-build-isolation`` uses this venv's setuptools and ``--no-index`` keeps pip
    off the network, so this takes about a second offline.
    """
    work = tmp_path_factory.mktemp("example-plugin")
    source = work / "source"
    shutil.copytree(
        PLUGIN,
        source,
        ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__", ".*_cache"),
    )
    site = work / "site"
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--no-deps",
            "--no-build-isolation",
            "--no-index",
            "--no-cache-dir",
            "--disable-pip-version-check",
            "--quiet",
            "--target",
            str(site),
            str(source),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    return site


@pytest.fixture(scope="session")
def shared_mlflow_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MlflowServer]:
    """One real ``mlflow server`` for the whole session: each start costs 10 to 20 s (its
    store's tables are created, its workers import mlflow).  Tests take it through
    :func:`mlflow_server` and log to experiments of their own names."""
    pytest.importorskip("mlflow")
    tracker = MlflowServer(tmp_path_factory.mktemp("mlflow-server"))
    tracker.start()
    yield tracker
    # Killed, not stopped: a graceful stop waits seconds for the clients' idle keep-alive
    # connections, and nothing reads its store afterwards.
    tracker.kill()


@pytest.fixture
def mlflow_server(shared_mlflow_server: MlflowServer) -> MlflowServer:
    """The session's ``mlflow server``, answering: a test before may have hung it or killed
    it (on purpose) and failed before it brought it back."""
    shared_mlflow_server.ensure_up()
    return shared_mlflow_server


@pytest.fixture
def disk(tmp_path: Path) -> Iterator[Path]:
    """A 1 MiB tmpfs, unmounted after the test."""
    mount = tmp_path / "disk"
    mount.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mount)],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)
