"""Fixtures of the trainer tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch

from evtrain import Bus
from tests.trainers.helpers import Recording


@pytest.fixture(autouse=True)
def one_torch_thread() -> Iterator[None]:
    """Tests share two cores; one intra-op thread is also what the runner uses."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture
def recording(bus: Bus) -> Recording:
    """Stats and hyperparameter events of behavior ``"Test"``, recorded on the test's bus."""
    return Recording(bus, "Test")
