from __future__ import annotations

import socket
from collections.abc import Iterator

import pytest

from evtrain.unity.connection import UnityConnection


@pytest.fixture
def port() -> int:
    """A port free a moment ago, on 127.0.0.1."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        found: int = probe.getsockname()[1]
        return found


@pytest.fixture
def connection(port: int) -> Iterator[UnityConnection]:
    """An open connection on ``port``, closed after the test."""
    opened = UnityConnection(port, timeout=20.0).open()
    yield opened
    opened.close()
