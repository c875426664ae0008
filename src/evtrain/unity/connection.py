"""One Unity build, connected: the handshake, then resets and steps (ML-Agents' API 1.5.0).

The exchanges, as a build makes them (it is the gRPC client, :mod:`evtrain.unity.server`):

1. the build sends its name, API and package versions and capabilities; evtrain answers with
   its own (:meth:`UnityConnection.handshake`: an incompatible API version is refused with a
   quit);
2. the build sends an empty message, which waits for the first command;
3. each command (``RESET`` or ``STEP`` with the actions of the agents that asked for a
   decision) answers the build's last message, and the build's next message brings the agents'
   data (and, the first time a behavior's agents appear, its action spec).

So one exchange is *answer the pending call, then wait for the next*:
:meth:`UnityConnection.step_begin` answers and :meth:`UnityConnection.step_end` waits, so a run
with several builds answers them all before it waits on any.  Side-channel messages ride on every
exchange.  :meth:`UnityConnection.close` answers with a quit.
"""

from __future__ import annotations

import logging
import queue
import time
from collections.abc import Callable, Sequence
from typing import Any

import attrs
import numpy as np

from evtrain.errors import (
    UnityBuildExitedError,
    UnityCommunicationError,
    UnityTimeoutError,
    UnityVersionError,
)
from evtrain.unity import schema
from evtrain.unity.channel_messages import SideChannel, SideChannelRouter
from evtrain.unity.commands import API_VERSION, command, init_reply, step_message
from evtrain.unity.server import HUNG_UP, Call, ExchangeServer, quit_message
from evtrain.unity.specs import BehaviorSpec, behavior_spec_from_proto
from evtrain.unity.steps import ActionTuple, DecisionSteps, TerminalSteps, steps_from_proto

__all__ = ["API_VERSION", "CAPABILITIES", "BuildInfo", "Steps", "UnityConnection", "compatible"]

_log = logging.getLogger(__name__)

CAPABILITIES = (
    "baseRLCapabilities",
    "concatenatedPngObservations",
    "compressedChannelMapping",
    "hybridActions",
    "trainingAnalytics",
    "variableLengthObservation",
    "multiAgentGroups",
)
"""What evtrain tells a build it can do: everything API 1.5.0 has."""
_ALIVE_POLL_S = 0.25

Steps = dict[str, tuple[DecisionSteps, TerminalSteps]]


@attrs.frozen
class BuildInfo:
    """What a build said of itself in the handshake."""

    name: str
    communication_version: str
    package_version: str
    """Its com.unity.ml-agents package's version."""
    capabilities: dict[str, bool]
    log_path: str


def _version(text: str) -> tuple[int, ...] | None:
    parts = text.split(".")
    return tuple(int(p) for p in parts) if all(p.isdigit() for p in parts) else None


def compatible(unity_version: str, api_version: str = API_VERSION) -> bool:
    """ML-Agents' rule: the same major version, and for major 0 the same minor."""
    unity, ours = _version(unity_version), _version(api_version)
    if unity is None or ours is None or unity[0] != ours[0]:
        return False
    return unity[0] != 0 or unity[1:2] == ours[1:2]


class UnityConnection:
    """The gRPC server one build connects to on ``host:port``, and the exchanges with it.

    :param side_channels: the channels whose messages ride on the exchanges.
    :param seed: sent to the build in the handshake (its ``Academy`` seeds its random numbers).
    :param num_areas: training areas the build is to make (ML-Agents' ``--num-areas``).
    :param timeout: how long :meth:`reset` and :meth:`step` wait for the build's answer, in
        seconds (``env_settings.timeout_wait``).
    """

    def __init__(
        self,
        port: int,
        *,
        host: str = "127.0.0.1",
        side_channels: Sequence[SideChannel] = (),
        seed: int = 0,
        num_areas: int = 1,
        timeout: float = 60.0,
    ) -> None:
        self.port = port
        self.host = host
        self.seed = seed
        self.num_areas = num_areas
        self.timeout = timeout
        self.side_channels = SideChannelRouter(side_channels)
        self.behavior_specs: dict[str, BehaviorSpec] = {}
        """Every behavior seen so far, by its full name (``"Soccer?team=1"``)."""
        self.build: BuildInfo | None = None
        """What the build said in the handshake."""
        self.latest: Steps = {}
        """Each behavior's steps of the last reset or step."""
        self._server = ExchangeServer(port, host)
        self._pending: Call | None = None
        """The build's call to answer with the next command."""
        self._awaiting = False
        """A command went out, the build's answer has not been taken yet."""
        self._actions: dict[str, ActionTuple] = {}
        self._alive: Callable[[], bool] | None = None
        self._deprecated_actions = False
        self._closed = False

    # -- the lifetime ---------------------------------------------------------------------------

    def open(self) -> UnityConnection:
        """Bind the server; the build can connect from now on.

        :raises UnityPortInUseError: the port is taken.
        """
        self._server.start()
        return self

    def handshake(self, timeout: float, alive: Callable[[], bool] | None = None) -> BuildInfo:
        """Wait for the build to connect, and agree on the protocol.

        :param alive: False once the build's process has ended (checked while waiting, here
            and in later exchanges).
        :raises UnityTimeoutError: no build connected within ``timeout`` seconds.
        :raises UnityBuildExitedError: ``alive()`` turned False first.
        :raises UnityVersionError: the build speaks an API version evtrain does not.
        """
        self._alive = alive
        first = self._receive(timeout, "to connect")
        init = first.request.unity_output.rl_initialization_output
        capabilities = {name: bool(getattr(init.capabilities, name)) for name in CAPABILITIES}
        self.build = BuildInfo(
            name=str(init.name),
            communication_version=str(init.communication_version),
            package_version=str(init.package_version),
            capabilities=capabilities,
            log_path=str(init.log_path),
        )
        if not compatible(self.build.communication_version):
            first.answer(quit_message())
            raise UnityVersionError(_version_message(self.build))
        version = _version(self.build.communication_version) or (1, 5)
        self._deprecated_actions = version < (1, 3)
        if not capabilities["baseRLCapabilities"]:
            _log.warning("the Unity build %r lacks ML-Agents' base RL capabilities", init.name)
        first.answer(init_reply(self.seed, self.num_areas, CAPABILITIES))
        self._pending = self._receive(timeout, "after the handshake")
        _log.info(
            "connected to Unity build %r on port %d: com.unity.ml-agents %s, API %s",
            self.build.name,
            self.port,
            self.build.package_version,
            self.build.communication_version,
        )
        return self.build

    def close(self) -> None:
        """Tell the build to quit (when it is connected) and stop the server; idempotent."""
        if self._closed:
            return
        self._closed = True
        try:
            if self._pending is None and self._awaiting:
                self._pending = self._receive(1.0, "to quit")
        except (UnityTimeoutError, UnityCommunicationError):
            pass
        finally:
            if self._pending is not None:
                self._pending.answer(quit_message())
                self._pending = None
            self._server.stop()

    def __enter__(self) -> UnityConnection:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # -- the exchanges --------------------------------------------------------------------------

    def reset(self, timeout: float | None = None) -> Steps:
        """Start new episodes: every behavior's first steps."""
        message = command("RESET", self.side_channels.outgoing())
        self._take_pending("reset").answer(message)
        self._awaiting = True
        return self._collect(timeout, "a reset")

    def set_actions(self, behavior: str, actions: ActionTuple) -> None:
        """The actions of ``behavior``'s agents that asked for a decision, one row each in the
        order of its last :class:`DecisionSteps` (behaviors without: zeros).

        :raises KeyError: no such behavior.
        :raises ValueError: the shapes do not fit its action spec or its agents.
        """
        spec = self.behavior_specs.get(behavior)
        if spec is None:
            raise KeyError(f"the Unity build has no behavior {behavior!r}: {self._names()}")
        n = len(self.latest[behavior][0]) if behavior in self.latest else 0
        continuous = np.asarray(actions.continuous, dtype=np.float32)
        discrete = np.asarray(actions.discrete, dtype=np.int32)
        action = spec.action_spec
        for name, array, width in (
            ("continuous", continuous, action.continuous_size),
            ("discrete", discrete, action.discrete_size),
        ):
            if width and array.shape != (n, width):
                raise ValueError(
                    f"behavior {behavior!r}: expected {name} actions of shape {(n, width)} "
                    f"({n} agents asked for a decision), got {array.shape}"
                )
        self._actions[behavior] = ActionTuple(continuous, discrete)

    def step_begin(self) -> None:
        """Send the actions set (and the side channels' messages): the build steps."""
        message = step_message(
            self.latest,
            self._actions,
            self.behavior_specs,
            self.side_channels.outgoing(),
            deprecated=self._deprecated_actions,
        )
        self._take_pending("step").answer(message)
        self._awaiting = True

    def step_end(self, timeout: float | None = None) -> Steps:
        """Wait for the build's next data after :meth:`step_begin`.

        :raises UnityTimeoutError: no answer within ``timeout`` (default :attr:`timeout`).
        :raises UnityCommunicationError: the build hung up (:class:`UnityBuildExitedError`:
            its process ended).
        """
        return self._collect(timeout, "a step")

    def step(self, timeout: float | None = None) -> Steps:
        """:meth:`step_begin` and :meth:`step_end`."""
        self.step_begin()
        return self.step_end(timeout)

    # -- inside -----------------------------------------------------------------------------------

    def _take_pending(self, doing: str) -> Call:
        pending, self._pending = self._pending, None
        if pending is None:
            state = "closed" if self._closed else "not connected, or its answer not taken"
            raise UnityCommunicationError(
                f"cannot {doing} the Unity build on port {self.port}: the connection is {state} "
                "(handshake first; after step_begin, step_end)"
            )
        return pending

    def _collect(self, timeout: float | None, doing: str) -> Steps:
        call = self._receive(self.timeout if timeout is None else timeout, f"after {doing}")
        self._awaiting = False
        self._pending = call
        output = call.request.unity_output
        if output.HasField("rl_initialization_output"):
            self._new_behaviors(output)
        rl = output.rl_output
        steps: Steps = {}
        for name, spec in self.behavior_specs.items():
            infos = rl.agentInfos[name].value if name in rl.agentInfos else ()
            steps[name] = steps_from_proto(infos, spec, name)
        self.side_channels.incoming(rl.side_channel)
        self._actions.clear()
        self.latest = steps
        return steps

    def _new_behaviors(self, output: Any) -> None:
        for brain in output.rl_initialization_output.brain_parameters:
            name = brain.brain_name
            infos = output.rl_output.agentInfos
            if name in infos and len(infos[name].value) and name not in self.behavior_specs:
                self.behavior_specs[name] = behavior_spec_from_proto(brain, infos[name].value[0])
                _log.info("Unity build on port %d: behavior %r connected", self.port, name)

    def _receive(self, timeout: float, doing: str) -> Call:
        """The build's next call, within ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise UnityTimeoutError(self._timeout_message(timeout, doing))
            wait = left if self._alive is None else min(left, _ALIVE_POLL_S)
            try:
                call = self._server.calls.get(timeout=wait)
            except queue.Empty:
                self._check_alive(doing)
                continue
            if call is HUNG_UP:
                self._hung_up(doing)
            assert call is not None
            if call.request.header.status != 200:
                call.answer(schema.UnityMessageProto())
                self._awaiting = False  # nothing more will come
                raise UnityCommunicationError(
                    f"the Unity build on port {self.port} quit (status "
                    f"{call.request.header.status}) while evtrain waited for it {doing}"
                )
            return call

    def _check_alive(self, doing: str) -> None:
        if self._alive is not None and not self._alive():
            raise UnityBuildExitedError(
                f"the Unity build for port {self.port} exited while evtrain waited for it "
                f"{doing}; its log says why"
            )

    def _hung_up(self, doing: str) -> None:
        self._awaiting = False  # nothing more will come
        deadline = time.monotonic() + 1.0  # its process may take a moment to be seen ended
        while self._alive is not None and time.monotonic() < deadline:
            self._check_alive(doing)
            time.sleep(0.02)
        raise UnityCommunicationError(
            f"the Unity build on port {self.port} closed the connection while evtrain waited "
            f"for it {doing}: it quit or crashed (its log says why)"
        )

    def _timeout_message(self, timeout: float, doing: str) -> str:
        if doing == "to connect":
            return (
                f"no Unity build connected to port {self.port} within {timeout:g} s; expected "
                f"one started with --mlagents-port {self.port} (Behavior Type: Default); check "
                "its log, or raise env_settings.timeout_wait (--timeout-wait)"
            )
        return (
            f"the Unity build on port {self.port} did not answer within {timeout:g} s {doing}; "
            "check its log, or raise env_settings.timeout_wait (--timeout-wait)"
        )

    def _names(self) -> str:
        return ", ".join(map(repr, self.behavior_specs)) or "none yet"


def _version_message(build: BuildInfo) -> str:
    theirs = _version(build.communication_version)
    if theirs is not None and theirs[0] > 1:
        fix = f"upgrade evtrain to a version that speaks API {theirs[0]}.x"
    else:
        fix = "upgrade the project's com.unity.ml-agents package to 2.0 or later and rebuild"
    return (
        f"the Unity build {build.name!r} speaks ML-Agents communication API "
        f"{build.communication_version} (com.unity.ml-agents {build.package_version}), evtrain "
        f"speaks {API_VERSION}, and they are not compatible: {fix}"
    )
