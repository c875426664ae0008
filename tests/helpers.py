"""Small builders shared by the tests."""

from __future__ import annotations

import atexit
import contextlib
import csv
import errno
import functools
import io
import json
import logging
import os
import shutil
import signal
import socket
import subprocess
import sysconfig
import tempfile
import threading
import time
import venv
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TypeVar

import attrs
import importlib_metadata
import pytest
import yaml

from evtrain import StatsEvent, StatsSummary
from evtrain_writers._hparams import HParamValue

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"
PLUGIN = EXAMPLES / "plugin"


def csv_steps(path: Path) -> list[int]:
    """The ``step`` column of a ``progress.csv``."""
    with path.open(newline="", encoding="utf-8") as file:
        return [int(row["step"]) for row in csv.DictReader(file)]


def jsonl_steps(path: Path) -> list[int]:
    """The steps of a ``stats.jsonl``'s summaries (its hyperparameters record has none)."""
    records = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    return [record["step"] for record in records if "step" in record]


def tensorboard_scalars(folder: Path, tag: str) -> list[tuple[int, float]]:
    """Every ``(step, value)`` of ``tag`` in the TensorBoard files of ``folder``, as
    TensorBoard reads them (points past a restart's first step are purged)."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    accumulator = EventAccumulator(str(folder), size_guidance={"scalars": 0})
    accumulator.Reload()
    return [(s.step, s.value) for s in accumulator.Scalars(tag)]


def tensorboard_steps(folder: Path, tag: str) -> list[int]:
    """The steps of :func:`tensorboard_scalars`."""
    return [step for step, _ in tensorboard_scalars(folder, tag)]


def stats_event(step: int, category: str = "CartPole", **values: float) -> StatsEvent:
    summaries = {k: StatsSummary(full_dist=[v]) for k, v in values.items()}
    return StatsEvent(category=category, step=step, values=summaries, rank=0, time=0.0)


class Gate:
    """A subscriber that blocks on its first event until opened."""

    def __init__(self) -> None:
        self.entered = threading.Event()
        self.open = threading.Event()
        self.steps: list[int] = []

    def __call__(self, event: StatsEvent) -> None:
        self.entered.set()
        assert self.open.wait(10)
        self.steps.append(event.step)


@functools.cache
def isolated_python() -> str:
    """An interpreter for the processes tests start: a venv whose site-packages holds this
    venv's packages (as links) except distributions that declare evtrain plugins, evtrain's
    own aside.  What a test installs for itself (``PYTHONPATH``) is all the plugins it sees,
    whatever else is installed where the suite runs."""
    home = Path(tempfile.mkdtemp(prefix="evtrain-tests-python-"))
    atexit.register(shutil.rmtree, home, ignore_errors=True)
    venv.EnvBuilder(symlinks=True, with_pip=False).create(home)
    # The new venv's own purelib, the same layout as this one's (lib/pythonX.Y/site-packages).
    paths = sysconfig.get_paths()
    theirs = home / Path(paths["purelib"]).relative_to(paths["data"])
    for folder in {Path(paths["purelib"]), Path(paths["platlib"])}:
        for entry in folder.iterdir():
            if not _declares_foreign_plugins(entry) and not (theirs / entry.name).exists():
                (theirs / entry.name).symlink_to(entry)
    return str(home / "bin" / "python")


def isolated_site() -> Path:
    """The site-packages folder of :func:`isolated_python`."""
    data = Path(sysconfig.get_paths()["data"])
    return Path(isolated_python()).parent.parent / Path(
        sysconfig.get_paths()["purelib"]
    ).relative_to(data)


def _declares_foreign_plugins(entry: Path) -> bool:
    if entry.suffix not in (".dist-info", ".egg-info"):
        return False
    distribution = importlib_metadata.PathDistribution(entry)
    return distribution.metadata["Name"] != "evtrain" and any(
        point.group.startswith("evtrain.") for point in distribution.entry_points
    )


def python(
    *args: str,
    env: Mapping[str, str] | None = None,
    cwd: Path | None = None,
    timeout: float = 60,
) -> subprocess.CompletedProcess[str]:
    """Run :func:`isolated_python` with warnings as errors, like the test suite itself."""
    return subprocess.run(
        [isolated_python(), "-W", "error", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        env=dict(env) if env is not None else clean_env(),
        cwd=cwd,
    )


def clean_env(**extra: str) -> dict[str, str]:
    # A RANK left in the environment (e.g. by torchrun) would make the run rank != 0, where
    # the example's file subscribers are not connected at all.
    env = {k: v for k, v in os.environ.items() if k not in {"RANK", "LOCAL_RANK", "WORLD_SIZE"}}
    env.update(extra)
    return env


def free_port() -> int:
    """A TCP port nobody listens on right now (for a rendezvous address)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
    return port


@attrs.frozen(kw_only=True)
class HParamsSession:
    """One session as TensorBoard's HParams dashboard lists it."""

    hparams: dict[str, HParamValue]
    metrics: dict[str, tuple[int, float]]
    """Each metric's (step, value): the last scalar of that tag in the session's run."""
    status: str
    """An ``api_pb2.Status`` name, ``STATUS_UNKNOWN`` for a session without an end."""


@attrs.frozen(kw_only=True)
class HParamsDashboard:
    """What the HParams dashboard shows for a logdir: its columns and its sessions."""

    columns: dict[str, str]
    """Each hyperparameter's name and ``api_pb2.DataType`` name."""
    metrics: list[str]
    sessions: dict[str, HParamsSession]
    """By run name (relative to the logdir)."""


def hparams_dashboard(logdir: Path) -> HParamsDashboard:
    """Ask the HParams plugin's own backend (``get_experiment`` and ``list_session_groups``,
    over a multiplexer of ``logdir``) what the dashboard shows."""
    from tensorboard import context
    from tensorboard.backend.event_processing.data_provider import MultiplexerDataProvider
    from tensorboard.backend.event_processing.plugin_event_multiplexer import EventMultiplexer
    from tensorboard.plugins.base_plugin import TBContext
    from tensorboard.plugins.hparams import (
        api_pb2,
        backend_context,
        get_experiment,
        list_session_groups,
    )

    multiplexer = EventMultiplexer()
    multiplexer.AddRunsFromDirectory(str(logdir))
    multiplexer.Reload()
    provider = MultiplexerDataProvider(multiplexer, str(logdir))
    backend = backend_context.Context(
        TBContext(logdir=str(logdir), multiplexer=multiplexer, data_provider=provider)
    )
    request = context.RequestContext()
    experiment = get_experiment.Handler(request, backend, "", api_pb2.GetExperimentRequest()).run()
    every_status = api_pb2.Status.values()
    listing = api_pb2.ListSessionGroupsRequest(slice_size=1000, allowed_statuses=every_status)
    groups = list_session_groups.Handler(request, backend, "", listing).run().session_groups
    sessions = {}
    for group in groups:
        (session,) = group.sessions  # no group names are written: a group per session
        sessions[str(session.name)] = HParamsSession(
            hparams={
                str(k): getattr(v, str(v.WhichOneof("kind"))) for k, v in group.hparams.items()
            },
            metrics={
                str(m.name.tag): (int(m.training_step), float(m.value))
                for m in session.metric_values
            },
            status=str(api_pb2.Status.Name(session.status)),
        )
    return HParamsDashboard(
        columns={str(h.name): str(api_pb2.DataType.Name(h.type)) for h in experiment.hparam_infos},
        metrics=sorted(str(m.name.tag) for m in experiment.metric_infos),
        sessions=sessions,
    )


def fill(folder: Path) -> Path:
    """Write ``folder/filler`` until the filesystem is full; returns its path."""
    filler = folder / "filler"
    with filler.open("wb", buffering=0) as file, contextlib.suppress(OSError):
        while True:
            file.write(b"\0" * 4096)
    with pytest.raises(OSError) as full, (folder / "probe").open("wb", buffering=0) as probe:
        probe.write(b"\0" * 8192)
    assert full.value.errno == errno.ENOSPC
    return filler


def evtrain_main(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """``evtrain ARGS`` in ``cwd``, run in this process by :func:`evtrain.cli.main`, the
    function the command runs: its exit code and what it printed (its log lines on stderr, in
    the command's format), without the seconds a new Python spends importing torch.  As in
    :func:`isolated_python`, the only plugins installed are evtrain's own."""
    from evtrain.cli import DEBUG_LOG_FORMAT, LOG_FORMAT, main

    out, err = io.StringIO(), io.StringIO()
    handler = logging.StreamHandler(err)
    handler.setFormatter(logging.Formatter(DEBUG_LOG_FORMAT if "--debug" in args else LOG_FORMAT))
    root, ours = logging.getLogger(), logging.getLogger("evtrain")
    level = ours.level
    every = importlib_metadata.entry_points

    def own_entry_points(**selection: Any) -> importlib_metadata.EntryPoints:
        found = every(**selection)
        return importlib_metadata.EntryPoints(
            point for point in found if point.dist is None or point.dist.name == "evtrain"
        )

    root.addHandler(handler)
    importlib_metadata.entry_points = own_entry_points
    before = Path.cwd()
    os.chdir(cwd)  # contextlib.chdir is Python 3.11's
    try:
        with (
            contextlib.redirect_stdout(out),
            contextlib.redirect_stderr(err),
        ):
            try:
                code = main(list(args))
            except SystemExit as exit:  # argparse's refusals, as the process would end
                code = exit.code if isinstance(exit.code, int) else 1
    finally:
        os.chdir(before)
        importlib_metadata.entry_points = every
        root.removeHandler(handler)
        ours.setLevel(level)
    return subprocess.CompletedProcess(["evtrain", *args], code, out.getvalue(), err.getvalue())


def config(tmp_path: Path, run_id: str = "run", **behavior: Any) -> dict[str, Any]:
    """A tiny CartPole PPO run: 4 envs x 32 steps per update, 1024 steps."""
    settings: dict[str, Any] = {
        "trainer_type": "ppo",
        "hyperparameters": {"batch_size": 64, "buffer_size": 128, "num_epoch": 2},
        "network_settings": {"hidden_units": 32},
        "max_steps": 1024,
        "time_horizon": 32,
        "summary_freq": 256,
        "checkpoint_interval": 512,
        "keep_checkpoints": 1,
    }
    settings.update(behavior)
    return {
        "behaviors": {"CartPole": settings},
        "env_settings": {"env_id": "CartPole-v1", "num_envs": 4, "seed": 3},
        "checkpoint_settings": {"run_id": run_id, "results_dir": str(tmp_path / "results")},
    }


def run_evtrain(*args: str, cwd: Path, process: bool = False) -> subprocess.CompletedProcess[str]:
    """``evtrain ARGS`` in ``cwd``, seeing no other package's evtrain plugins: in this process
    (:func:`evtrain_main`), or with ``process`` in a new ``python -m evtrain`` of
    :func:`isolated_python`, where a process is the point (its exit, its isolation, what a user
    runs)."""
    if not process:
        return evtrain_main(*args, cwd=cwd)
    return subprocess.run(
        [isolated_python(), "-m", "evtrain", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=120,
        check=False,
    )


def run_cli(*args: str, cwd: Path, process: bool = False) -> subprocess.CompletedProcess[str]:
    """``evtrain learn ARGS`` in ``cwd`` (see :func:`run_evtrain`)."""
    return run_evtrain("learn", *args, cwd=cwd, process=process)


def run_config(
    tmp_path: Path,
    options: dict[str, Any],
    *args: str,
    name: str = "run.yaml",
    process: bool = False,
) -> subprocess.CompletedProcess[str]:
    """Write ``options`` to ``tmp_path/name`` and run ``evtrain learn`` on it there (see
    :func:`run_evtrain`)."""
    (tmp_path / name).write_text(yaml.safe_dump(options))
    return run_cli(name, *args, cwd=tmp_path, process=process)


def sync(*args: str, cwd: Path, process: bool = False) -> subprocess.CompletedProcess[str]:
    """``evtrain sync ARGS`` in ``cwd`` (see :func:`run_evtrain`)."""
    return run_evtrain("sync", *args, cwd=cwd, process=process)


STARTED: list[subprocess.Popen[Any]] = []
"""The processes fixtures started (servers, clusters, launchers): if pytest itself is ended by
a signal, tests/conftest.py ends those still running before it goes (:func:`end_started`)."""


Started = TypeVar("Started", bound="subprocess.Popen[Any]")


def end_with_the_suite(process: Started) -> Started:
    """Add ``process`` to :data:`STARTED`; returns it."""
    STARTED.append(process)
    return process


def end_started(grace_s: float = 5.0) -> None:
    """SIGTERM each process of :data:`STARTED` still running (its whole process group if it
    leads one: a server's workers, a launcher's agents), then SIGKILL what is left after
    ``grace_s``."""
    running = [process for process in STARTED if process.poll() is None]
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for process in running:
            with contextlib.suppress(ProcessLookupError):
                if os.getpgid(process.pid) == process.pid:
                    os.killpg(process.pid, signal.SIGCONT)  # a hung (SIGSTOP) one, too
                    os.killpg(process.pid, sig)
                else:
                    process.send_signal(sig)
        deadline = time.monotonic() + grace_s
        for process in running:
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(max(0.0, deadline - time.monotonic()))
        running = [process for process in running if process.poll() is None]
        if not running:
            return


TICTACTOE = "pettingzoo.classic.tictactoe_v3:env"
"""PettingZoo's tic-tac-toe by its factory (both players behavior ``player``, one team each)."""


def tictactoe_self_play(max_steps: int, self_play: dict[str, Any], **env: Any) -> dict[str, Any]:
    """PPO with ``self_play`` on tic-tac-toe, small: 256 steps per update over 4 copies, a
    summary every 512 steps, a checkpoint every 1024, the JSONL writer; ``env`` over the
    ``env_settings``."""
    return {
        "behaviors": {
            "player": {
                "trainer_type": "ppo",
                "hyperparameters": {"batch_size": 64, "buffer_size": 256, "learning_rate": 1e-3},
                "network_settings": {
                    "hidden_units": 32,
                    "num_layers": 1,
                    "vis_encode_type": "fully_connected",
                },
                "max_steps": max_steps,
                "time_horizon": 16,
                "summary_freq": 512,
                "checkpoint_interval": 1024,
                "self_play": self_play,
            }
        },
        "env_settings": {"env_id": TICTACTOE, "num_envs": 4, "seed": 3, **env},
        "writers": {"jsonl": {}},
        "checkpoint_settings": {"run_id": "run", "results_dir": "results"},
    }


def saved(stateful: Any) -> dict[str, Any]:
    """``stateful.state_dict()`` as a checkpoint file holds it, read back as ``--resume`` reads
    it (``weights_only``)."""
    import torch

    buffer = io.BytesIO()
    torch.save(stateful.state_dict(), buffer)
    buffer.seek(0)
    state: dict[str, Any] = torch.load(buffer, weights_only=True)
    return state
