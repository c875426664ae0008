from __future__ import annotations

import sys
from collections.abc import Iterator

import pytest

from evtrain import Bus


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
