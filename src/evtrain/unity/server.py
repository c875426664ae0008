"""The gRPC server a Unity build connects to, turned into a queue of calls to answer.

A build is the *client* of ML-Agents' one method, ``UnityToExternalProto.Exchange``: it sends
its agents' data and blocks until the trainer's answer (the actions) comes back.  The
:class:`ExchangeServer` takes each call on a gRPC thread, puts it in :attr:`ExchangeServer.calls`
as a :class:`Call`, and holds the gRPC thread until :meth:`Call.answer` is called (by the
connection, on its own thread) or the build hangs up.  A call whose build hung up before it was
answered puts :data:`HUNG_UP` in the queue.

Binds ``127.0.0.1`` by default (mlagents-envs binds every interface) and lifts gRPC's 4 MiB
message limit both ways (mlagents-envs drops a build whose batch is bigger).
"""

from __future__ import annotations

import queue
import socket
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import grpc

from evtrain.errors import UnityPortInUseError
from evtrain.unity import schema

__all__ = ["HUNG_UP", "Call", "ExchangeServer"]

HUNG_UP = None
"""Put in :attr:`ExchangeServer.calls` when a build hung up on a call not yet answered."""

_OPTIONS = (
    ("grpc.max_send_message_length", -1),
    ("grpc.max_receive_message_length", -1),
    ("grpc.so_reuseport", 0),  # a second server on the same port must fail, not share it
)
_HANG_UP_POLL_S = 0.25
"""How often a gRPC thread that waits for its answer checks that its build is still there."""


class Call:
    """One ``Exchange`` call of the build: its :attr:`request`, waiting for its answer."""

    __slots__ = ("_answered", "_reply", "request")

    def __init__(self, request: Any) -> None:
        self.request = request
        """The ``UnityMessageProto`` the build sent."""
        self._reply: Any = None
        self._answered = threading.Event()

    def answer(self, reply: Any) -> None:
        """Send ``reply`` (a ``UnityMessageProto``) back to the build (once; later calls do
        nothing)."""
        if not self._answered.is_set():
            self._reply = reply
            self._answered.set()

    @property
    def answered(self) -> bool:
        return self._answered.is_set()

    def wait(self, context: grpc.ServicerContext) -> Any:
        """(The gRPC thread.)  The answer, once given; a quit if the build hangs up first."""
        while not self._answered.wait(_HANG_UP_POLL_S):
            if not context.is_active():
                return quit_message()
        return self._reply


def quit_message() -> Any:
    """What tells a build to quit: status 400 (what ML-Agents' trainer sends at close) with the
    ``QUIT`` command."""
    message = schema.UnityMessageProto()
    message.header.status = 400
    message.unity_input.rl_input.command = schema.CommandProto["QUIT"]
    return message


class _Handler(grpc.GenericRpcHandler):  # type: ignore[misc]  # grpc ships no types
    def __init__(self, server: ExchangeServer) -> None:
        self._method = grpc.unary_unary_rpc_method_handler(
            server.exchange,
            request_deserializer=schema.UnityMessageProto.FromString,
            response_serializer=schema.UnityMessageProto.SerializeToString,
        )

    def service(self, handler_call_details: grpc.HandlerCallDetails) -> Any:
        if handler_call_details.method == schema.EXCHANGE_METHOD:
            return self._method
        return None


class ExchangeServer:
    """A gRPC server of ``Exchange`` on ``host:port`` (see the module's docs)."""

    def __init__(self, port: int, host: str = "127.0.0.1") -> None:
        self.port = port
        self.host = host
        self.calls: queue.SimpleQueue[Call | None] = queue.SimpleQueue()
        """The build's calls, oldest first (and :data:`HUNG_UP` marks)."""
        self._server: grpc.Server | None = None

    def start(self) -> None:
        """Bind and serve.

        :raises UnityPortInUseError: the port is taken.
        """
        self._check_port()
        server = grpc.server(ThreadPoolExecutor(max_workers=4), options=_OPTIONS)
        server.add_generic_rpc_handlers((_Handler(self),))
        try:
            bound = server.add_insecure_port(f"{self.host}:{self.port}")
        except RuntimeError:
            bound = 0
        if bound == 0:
            raise UnityPortInUseError(self._in_use())
        server.start()
        self._server = server

    def exchange(self, request: Any, context: grpc.ServicerContext) -> Any:
        """(A gRPC thread.)  One call of the build: queued, answered when the connection says."""
        call = Call(request)

        def ended() -> None:
            if not call.answered:
                self.calls.put(HUNG_UP)

        context.add_callback(ended)
        self.calls.put(call)
        return call.wait(context)

    def stop(self, grace: float = 1.0) -> None:
        """Stop serving (the calls in flight get ``grace`` seconds); idempotent."""
        server, self._server = self._server, None
        if server is not None:
            server.stop(grace).wait(grace + 1.0)
        while True:  # nothing waits on a call no one will answer
            try:
                call = self.calls.get_nowait()
            except queue.Empty:
                return
            if call is not None:
                call.answer(quit_message())

    def _check_port(self) -> None:
        """Fail early, and in one line, where gRPC would log its own error first."""
        probe = socket.socket(socket.AF_INET6 if ":" in self.host else socket.AF_INET)
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as gRPC binds
        try:
            probe.bind((self.host, self.port))
        except OSError:
            raise UnityPortInUseError(self._in_use()) from None
        finally:
            probe.close()

    def _in_use(self) -> str:
        return (
            f"port {self.port} on {self.host} is in use, expected it free for a Unity build to "
            "connect to: another run, build or Unity Editor holds it; stop it or choose "
            "another env_settings.base_port (--base-port)"
        )
