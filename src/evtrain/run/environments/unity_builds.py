"""A Unity run's environment: ``num_envs`` instances of a build (``env_settings.env_path``),
or the Unity Editor (``base_port: 5004`` without ``env_path``), as one
:class:`~evtrain.unity.behaviors.UnityBehaviors` every behavior acts in.

Each instance ``i`` gets, as ML-Agents' ``mlagents-learn`` gives it: the port
``base_port + i`` (evtrain's gRPC server there is bound first, then the build started with
``--mlagents-port``), the seed ``seed + i`` in the handshake, ``-nographics -batchmode`` with
``engine_settings.no_graphics``, ``-logFile run_logs/Player-<i>.log`` (unless ``env_args`` has
a ``-logFile`` of its own), then ``env_args``; ``engine_settings`` through the engine
configuration side channel.  The executable is found as ML-Agents' ``env_utils`` finds it.

No build outlives the run: each is started in a process group of its own (so a Ctrl-C in the
terminal reaches evtrain alone, which then closes the builds, as ML-Agents does), and that
group is ended when the environment closes, when starting the instances fails, and at the
interpreter's exit whatever ended the run
(:func:`~evtrain.run.environments.build_processes.end_every_build`).
"""

from __future__ import annotations

import contextlib
import glob
import logging
import os
import subprocess
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from evtrain.config.environment_settings import EDITOR_PORT, EngineSettings, EnvironmentSettings
from evtrain.errors import (
    ConfigError,
    UnityBuildExitedError,
    UnityCommunicationError,
    UnityError,
    UnityRestartLimitError,
    UnityTimeoutError,
)
from evtrain.run.environments.build_processes import BUILDS
from evtrain.run.environments.unity_restarts import (
    Launch,
    RestartQuota,
    failure,
    keep_crashed_log,
)
from evtrain.unity.behaviors import UnityBehaviors
from evtrain.unity.connection import Steps, UnityConnection
from evtrain.unity.side_channels import (
    EngineConfigurationChannel,
    EnvironmentParametersChannel,
    SideChannel,
    StatsSideChannel,
    TrainingAnalyticsSideChannel,
)

_log = logging.getLogger("evtrain")

_EXTENSIONS = (".app", ".exe", ".x86_64", ".x86")


def find_executable(env_path: str) -> Path | None:
    """The executable ``env_path`` names, found as ML-Agents' ``validate_environment_path``
    finds it: the extension stripped, then ``.x86_64``, ``.x86``, the path itself (Linux);
    ``.app/Contents/MacOS/<name>`` or any file there (macOS); ``.exe``, or a folder's ``.exe``
    other than Unity's crash handler (Windows).  Relative paths are tried from the working
    folder."""
    base = env_path.strip()
    for extension in _EXTENSIONS:
        base = base.replace(extension, "")
    name = os.path.basename(os.path.normpath(base))
    if sys.platform == "darwin":
        patterns = [os.path.join(base + ".app", "Contents", "MacOS", p) for p in (name, "*")]
    elif sys.platform == "win32":
        patterns = [base + ".exe", os.path.join(base, "*.exe")]
    else:
        patterns = [base + ".x86_64", base + ".x86", env_path.strip()]
    for pattern in patterns:
        found = sorted(p for p in glob.glob(pattern) if "UnityCrashHandler" not in p)
        found = [p for p in found if os.path.isfile(p)]
        if found:
            return Path(found[0]).absolute()
    return None


def build_command(
    executable: Path,
    settings: EnvironmentSettings,
    engine: EngineSettings,
    worker_id: int,
    log_folder: Path,
) -> list[str]:
    """The command line of build instance ``worker_id``, as ML-Agents' ``UnityEnvironment``
    writes it."""
    extra = list(settings.env_args or ())
    command = [str(executable)]
    if engine.no_graphics:
        command += ["-nographics", "-batchmode"]
    command += ["--mlagents-port", str(settings.port(worker_id))]
    if "-logfile" not in (arg.lower() for arg in extra):
        command += ["-logFile", str(log_path(log_folder, worker_id))]
    return command + extra


def log_path(log_folder: Path, worker_id: int) -> Path:
    """Where build instance ``worker_id`` writes its log (ML-Agents' name)."""
    return log_folder.absolute() / f"Player-{worker_id}.log"


class UnityBuilds(UnityBehaviors):
    """:class:`~evtrain.unity.behaviors.UnityBehaviors` over build instances this run started:
    an instance that exits, hangs up or stops answering during a step is started again within
    the restart limits (:meth:`replace`); closing it closes the connections, then ends the
    processes.

    :param processes: each instance's process (``None`` for the Editor).
    :param channels: each instance's side channels, by kind.
    :param logs: each instance's log file.
    :param self_play: the behaviors with ``self_play`` (their views hold one team's agents).
    :param launch: how the instances were started (``None``: the Editor, never restarted).
    :param spare_copies: ``env_settings.spare_copies``, for every behavior.
    """

    def __init__(
        self,
        connections: Sequence[UnityConnection],
        behaviors: Sequence[str],
        processes: Sequence[subprocess.Popen[bytes] | None],
        channels: Sequence[Mapping[str, SideChannel]],
        logs: Sequence[Path],
        self_play: Sequence[str] = (),
        launch: Launch | None = None,
        spare_copies: int = 0,
    ) -> None:
        self.processes = list(processes)
        self.channels = list(channels)
        self.logs = list(logs)
        self.launch = launch
        self.quota = None if launch is None else RestartQuota(launch.settings, len(processes))
        spare = dict.fromkeys(behaviors, spare_copies)
        super().__init__(connections, behaviors, self_play=self_play, spare_copies=spare)

    def replace(self, k: int, error: UnityError) -> Steps:
        """Start instance ``k`` again (the same port, command line and log file; its crashed
        log kept as ``Player-<k>.crash-<n>.log``), with its handshake and a reset; a start
        that fails (no connection within ``timeout_wait``, an exit) counts as one more crash.

        :raises UnityRestartLimitError: past ``max_lifetime_restarts`` or
            ``restarts_rate_limit_n``, naming the build, the instance, the limit and its log.
        :raises UnityCommunicationError: the Editor hung up (it is not restarted)."""
        process = self.processes[k]
        if process is None or self.launch is None or self.quota is None:
            raise error
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(1.0)  # a crash is seen as a hang-up first, its exit a moment later
        port = self.connections[k].port
        build = f"the Unity build {_executable(process)} (instance {k}, port {port})"
        what = failure(process, error)
        while True:  # as long as the limits allow (-1: no limit; an interrupt ends the wait)
            limit = self.quota.limit_hit(k)
            if limit is not None:
                BUILDS.end(self.processes[k] or process, grace_s=0.0)  # no quit to wait for
                raise UnityRestartLimitError(
                    f"{build} {what} after {self.quota.counts[k]} restart(s), past {limit}: the "
                    f"models are saved; see its log {self.logs[k]}"
                ) from error
            restart = self.quota.record(k)
            _log.warning("%s %s; starting it again (restart %d of it)", build, what, restart)
            try:
                return self._start_again(k, restart)
            except (UnityTimeoutError, UnityCommunicationError) as failed:
                error, what = failed, f"did not start again ({failed})"

    def _start_again(self, k: int, restart: int) -> Steps:
        run, process = self.launch, self.processes[k]
        assert run is not None and process is not None
        BUILDS.end(process, grace_s=0.0)
        self.connections[k].close()
        keep_crashed_log(self.logs[k], restart)
        # engine_settings and the environment parameters' current values sent again
        self.channels[k] = side_channels(run.engine, run.parameters)
        connection = self.connections[k] = _connection(run.settings, k, self.channels[k])
        self.processes[k] = _start(run.executable, run.settings, run.engine, k, run.log_folder)
        # Not cut short by a Ctrl-C: the run then stops at the end of the turn, and saves.
        _handshake(connection, self.processes[k], run.settings, run.log_folder, lambda: None)
        return connection.reset()

    def close(self) -> None:
        try:
            super().close()
        finally:
            for process in self.processes:
                if process is not None:
                    BUILDS.end(process)


def side_channels(
    engine: EngineSettings,
    parameters: Callable[[EnvironmentParametersChannel], None] | None = None,
) -> dict[str, SideChannel]:
    """One instance's side channels: the engine configuration (``engine_settings`` queued),
    environment parameters (``parameters`` queues them), stats, training analytics."""
    configuration = EngineConfigurationChannel()
    configuration.set_configuration_parameters(
        width=engine.width,
        height=engine.height,
        quality_level=engine.quality_level,
        time_scale=engine.time_scale,
        target_frame_rate=engine.target_frame_rate,
        capture_frame_rate=engine.capture_frame_rate,
    )
    environment = EnvironmentParametersChannel()
    if parameters is not None:
        parameters(environment)
    return {
        "engine": configuration,
        "parameters": environment,
        "stats": StatsSideChannel(),
        "analytics": TrainingAnalyticsSideChannel(),
    }


def make_unity_env(
    settings: EnvironmentSettings,
    engine: EngineSettings,
    behaviors: Mapping[str, Any],
    log_folder: Path,
    interrupted: Callable[[], str | None] = lambda: None,
    parameters: Callable[[EnvironmentParametersChannel], None] | None = None,
) -> UnityBuilds:
    """The run's Unity environment: ``num_envs`` build instances started and connected (or the
    Editor's one), every behavior of ``behaviors`` in them.

    :raises ConfigError: no executable at ``env_path``; a behavior the build lacks.
    :param interrupted: the interrupt that asked the run to stop, if any: then no build is
        waited for any longer.
    :param parameters: queues the environment parameters on each instance's channel (they
        reach the build with the first reset).
    :raises UnityError: a port in use, a build that does not connect within ``timeout_wait``
        (naming the build, the port and its log), an API version evtrain does not speak, an
        interrupt while waiting.
    """
    executable = None
    if settings.env_path is not None:
        executable = find_executable(settings.env_path)
        if executable is None:
            raise ConfigError(
                [
                    f"env_settings.env_path: no Unity build at {settings.env_path!r} (looked "
                    f"for it as is and with {', '.join(_EXTENSIONS)} from {os.getcwd()}); give "
                    "the path of the build's executable"
                ]
            )
    count = 1 if executable is None else settings.num_envs
    connections: list[UnityConnection] = []
    processes: list[subprocess.Popen[bytes] | None] = []
    channels: list[dict[str, SideChannel]] = []
    try:
        for worker_id in range(count):
            channels.append(side_channels(engine, parameters))
            connections.append(_connection(settings, worker_id, channels[-1]))
        for worker_id, connection in enumerate(connections):
            processes.append(_start(executable, settings, engine, worker_id, log_folder))
            _handshake(connection, processes[-1], settings, log_folder, interrupted)
        logs = [log_path(log_folder, i) for i in range(count)]
        playing = [name for name, own in behaviors.items() if getattr(own, "self_play", None)]
        launch = None
        if executable is not None:
            launch = Launch(executable, settings, engine, log_folder, parameters)
        spare = settings.spare_copies
        return UnityBuilds(
            connections, list(behaviors), processes, channels, logs, playing, launch, spare
        )
    except BaseException:
        for connection in connections:
            connection.close()
        for process in processes:
            if process is not None:
                BUILDS.end(process, grace_s=0.0)
        raise


def _connection(
    settings: EnvironmentSettings, worker_id: int, channels: Mapping[str, SideChannel]
) -> UnityConnection:
    port = EDITOR_PORT if settings.editor else settings.port(worker_id)
    return UnityConnection(
        port,
        side_channels=list(channels.values()),
        seed=settings.seed + worker_id,
        num_areas=settings.num_areas,
        timeout=settings.timeout_wait,
    ).open()


def _start(
    executable: Path | None,
    settings: EnvironmentSettings,
    engine: EngineSettings,
    worker_id: int,
    log_folder: Path,
) -> subprocess.Popen[bytes] | None:
    if executable is None:
        _log.info("waiting for the Unity Editor on port %d: press Play", EDITOR_PORT)
        return None
    log_folder.mkdir(parents=True, exist_ok=True)
    return BUILDS.start(build_command(executable, settings, engine, worker_id, log_folder))


def _handshake(
    connection: UnityConnection,
    process: subprocess.Popen[bytes] | None,
    settings: EnvironmentSettings,
    log_folder: Path,
    interrupted: Callable[[], str | None],
) -> None:
    connecting = True

    def alive() -> bool:  # an interrupt stops the wait to connect, never a later exchange
        if connecting and interrupted() is not None:
            return False
        return process is None or process.poll() is None

    where = "the Unity Editor" if process is None else f"the Unity build {_executable(process)}"
    worker_id = connection.port - settings.base_port
    log = "" if process is None else f"; see its log {log_path(log_folder, worker_id)}"
    try:
        connection.handshake(settings.timeout_wait, alive)
        connecting = False
    except UnityTimeoutError:
        raise UnityTimeoutError(
            f"{where} did not connect to port {connection.port} within "
            f"{settings.timeout_wait:g} s{log}, or raise env_settings.timeout_wait "
            "(--timeout-wait)"
        ) from None
    except UnityBuildExitedError:
        signal_name = interrupted()
        if signal_name is not None:
            raise UnityError(
                f"{signal_name} received while waiting for {where} to connect to port "
                f"{connection.port}: stopped before training"
            ) from None
        raise UnityBuildExitedError(
            f"{where} exited before it connected to port {connection.port} (exit status "
            f"{process.poll() if process else None}){log}"
        ) from None


def _executable(process: subprocess.Popen[bytes]) -> str:
    args = process.args
    return str(args[0]) if isinstance(args, list) else str(args)
