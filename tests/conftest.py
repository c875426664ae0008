from __future__ import annotations

from collections.abc import Iterator

import pytest

from evtrain import Bus


@pytest.fixture
def bus() -> Iterator[Bus]:
    """A bus that raises subscriber errors in tests unless a test asks otherwise."""
    with Bus() as bus:
        yield bus
