"""The stand-in player: the Unity side of ML-Agents' protocol, launched exactly as a build is.

``BUILD --mlagents-port N [-nographics] [-batchmode] [-logFile PATH] [its own arguments]``; the
build's own arguments are ``--scenario NAME`` (written by :func:`tests.standin.make_build`) and
``--key value`` options its scenario reads (``--areas 4``, ``--crash-after 10``, ``--layout chw``,
``--package-version 3.0.0``, ``--communication-version 1.5.0``, ``--connect-timeout 30``), and
``--crash-once MARKER``: crash after N steps only when it creates the file MARKER (so of every
instance and launch given the same MARKER, only the first to get there crashes), and
``--crash-how hang``: instead of exiting, stop answering (until it is killed), and
``--never-again MARKER``: when MARKER exists, run as ``never`` (a build that does not start
again after it crashed).
Unknown arguments are kept, as Unity keeps them.

It is a gRPC CLIENT of ``communicator_objects.UnityToExternalProto/Exchange``, as
``RpcCommunicator.cs``: the first call carries ``rl_initialization_output`` (name, versions,
capabilities) and is answered with ``rl_initialization_input``; the second, empty, is answered
with the first command (RESET); every later call carries a batch of agent infos (with the
parameters of behaviors not yet sent) and side channel messages, and is answered with the next
command, actions and side channel messages.  It quits on a QUIT command, a reply whose header
status is not 200, or a lost connection (sending a last status-400 message, as ``Dispose`` does).

The log (``-logFile``) gets one line per thing received: ``args: ...``, ``init: ...``,
``engine: time_scale=20.0``, ``env_param: key=value``, ``analytics: ...``, ``command: RESET``,
``quit: ...``; the tests wait on these lines.
"""

from __future__ import annotations

import contextlib
import os
import random
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any, TextIO

import grpc

from evtrain.unity import schema
from tests.standin import scenarios, wire
from tests.standin.world import Academy

COMMUNICATION_VERSION = "1.5.0"
PACKAGE_VERSION = "2.3.0-exp.3"
MAX_SILENT_STEPS = 10_000
"""Academy steps the player runs without any agent asking for a decision before it gives up."""


def parse(argv: list[str]) -> tuple[int | None, str | None, dict[str, str]]:
    """``(port, log file, options)`` from a build's command line; flags get the value ``"1"``."""
    port: int | None = None
    log: str | None = None
    options: dict[str, str] = {}
    index = 0
    while index < len(argv):
        arg = argv[index]
        value = argv[index + 1] if index + 1 < len(argv) else ""
        if arg == "--mlagents-port":
            port, index = int(value), index + 2
        elif arg.lower() == "-logfile":
            log, index = value, index + 2
        elif arg.startswith("--") and value and not value.startswith("-"):
            options[arg[2:]], index = value, index + 2
        else:
            options[arg.lstrip("-")], index = "1", index + 1
    return port, log, options


class Log:
    """The build's log file: one line per event, flushed at once (tests read it while it runs)."""

    def __init__(self, path: str | None) -> None:
        self.file: TextIO | None = None
        if path and path != "-":
            Path(path).parent.mkdir(parents=True, exist_ok=True)
            self.file = open(path, "a", encoding="utf-8")  # noqa: SIM115 (lives with the process)

    def line(self, text: str) -> None:
        if self.file is not None:
            self.file.write(text + "\n")
            self.file.flush()


class Player:
    """One connection to the trainer and the Academy it steps."""

    def __init__(self, port: int, options: dict[str, str], log: Log) -> None:
        self.port = port
        self.options = options
        self.log = log
        self.stub: Any = None
        self.outgoing = b""
        self.crash_after = int(options.get("crash-after", "0"))
        self.exchanges = 0

    def connect(self) -> bool:
        timeout = float(self.options.get("connect-timeout", "30"))
        channel = grpc.insecure_channel(
            f"127.0.0.1:{self.port}",
            options=[("grpc.max_receive_message_length", -1),
                     ("grpc.max_send_message_length", -1)],
        )  # fmt: skip
        try:
            grpc.channel_ready_future(channel).result(timeout=timeout)
        except grpc.FutureTimeoutError:
            self.log.line(f"quit: no trainer listening on 127.0.0.1:{self.port} after {timeout} s")
            return False
        self.stub = channel.unary_unary(
            schema.EXCHANGE_METHOD,
            request_serializer=schema.UnityMessageProto.SerializeToString,
            response_deserializer=schema.UnityMessageProto.FromString,
        )
        return True

    def exchange(self, output: Any | None, status: int = 200, timeout: float | None = None) -> Any:
        message = schema.UnityMessageProto()
        message.header.status = status
        if output is not None:
            message.unity_output.CopyFrom(output)
        return self.stub(message, timeout=timeout)

    def initialize(self, academy: Academy) -> Any:
        output = schema.UnityOutputProto()
        init = output.rl_initialization_output
        init.name = "AcademySingleton"
        init.communication_version = self.options.get(
            "communication-version", COMMUNICATION_VERSION
        )
        # Cameras laid out channels-first come from package 3.0 and later.
        default = "3.0.0" if self.options.get("layout") == "chw" else PACKAGE_VERSION
        init.package_version = self.options.get("package-version", default)
        init.log_path = self.options.get("logFile", "")
        caps = init.capabilities
        caps.baseRLCapabilities = caps.concatenatedPngObservations = True
        caps.compressedChannelMapping = caps.hybridActions = caps.trainingAnalytics = True
        caps.variableLengthObservation = caps.multiAgentGroups = True
        reply = self.exchange(output)
        params = reply.unity_input.rl_initialization_input
        self.log.line(
            f"init: communication_version={params.communication_version} "
            f"package_version={params.package_version} seed={params.seed} "
            f"num_areas={params.num_areas}"
        )
        academy.scenario.rng.seed(params.seed)
        academy.scenario.seed = params.seed
        return self.exchange(None)

    def run(self, academy: Academy) -> int:
        message = self.initialize(academy)
        while True:
            if message.header.status != 200:
                self.log.line(f"quit: status {message.header.status}")
                return 0
            rl_input = message.unity_input.rl_input
            self.receive(rl_input.side_channel)
            command = rl_input.command
            if command == schema.CommandProto["QUIT"]:
                self.log.line("command: QUIT")
                self.dispose()
                return 0
            if command == schema.CommandProto["RESET"]:
                self.log.line("command: RESET")
                academy.reset()
            else:
                academy.apply(rl_input)
                academy.act()
                self.exchanges += 1
                if self.crash_after and self.exchanges >= self.crash_after:
                    self.crash()
            self.advance(academy)
            side_channel = b"".join(academy.scenario.stats())
            message = self.exchange(academy.output(side_channel))

    def crash(self) -> None:
        """Die at once (as a crashed player: no goodbye), unless ``--crash-once``'s marker
        exists already."""
        self.crash_after = 0
        marker = self.options.get("crash-once")
        if marker is not None:
            try:
                Path(marker).open("x").close()
            except FileExistsError:
                return
        if self.options.get("crash-how", "exit") == "hang":  # alive, never answering
            self.log.line(f"hang: after {self.exchanges} steps")
            time.sleep(600.0)  # until the trainer kills it
        self.log.line(f"crash: after {self.exchanges} steps")
        os._exit(3)

    def advance(self, academy: Academy) -> None:
        """Academy steps until some agent asks for a decision (or ends an episode)."""
        for _ in range(MAX_SILENT_STEPS):
            if academy.collect():
                return
            academy.act()
        raise RuntimeError(f"no agent asked for a decision in {MAX_SILENT_STEPS} steps")

    def receive(self, data: bytes) -> None:
        for channel, payload in wire.side_channel_messages(data):
            if channel == wire.ENGINE_CONFIGURATION:
                self.log.line(f"engine: {wire.describe_engine_configuration(payload)}")
            elif channel == wire.ENVIRONMENT_PARAMETERS:
                key, value = wire.describe_environment_parameter(payload)
                self.log.line(f"env_param: {key}={value}")
            elif channel == wire.TRAINING_ANALYTICS:
                self.log.line(f"analytics: {wire.describe_training_analytics(payload)}")
            else:
                self.log.line(f"side_channel: {channel} {payload.hex()}")

    def dispose(self) -> None:
        """``RpcCommunicator.Dispose``: a last status-400 message; the trainer may be gone."""
        with contextlib.suppress(grpc.RpcError):
            self.exchange(None, status=400, timeout=2.0)


def never(log: Log) -> int:
    """A build that runs but never connects; it ends on SIGTERM (or after ten minutes)."""
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    log.line("never: not connecting")
    stop.wait(600.0)
    log.line("quit: SIGTERM" if stop.is_set() else "quit: ten minutes without connecting")
    return 0


def main(argv: list[str]) -> int:
    port, log_path, options = parse(argv)
    log = Log(log_path)
    log.line(f"args: {' '.join(argv)}")
    name = options.get("scenario", "corridor")
    again = options.get("never-again")
    if name == "never" or (again is not None and Path(again).exists()):
        return never(log)
    if port is None:
        log.line("quit: no --mlagents-port (a build started by hand runs in heuristic mode)")
        return 0
    if log_path:
        options["logFile"] = log_path
    scenario = scenarios.make(name, options, random.Random(0))
    player = Player(port, options, log)
    if not player.connect():
        return 1
    started = time.monotonic()
    try:
        return player.run(Academy(scenario))
    except grpc.RpcError as error:
        code = error.code() if isinstance(error, grpc.Call) else None
        log.line(f"quit: trainer went away ({code}) after {time.monotonic() - started:.1f} s")
        return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
