"""Fixtures of the trainer tests."""

from __future__ import annotations

import pytest

from evtrain import Bus
from tests.trainers.helpers import Recording


@pytest.fixture
def recording(bus: Bus) -> Recording:
    """Stats and hyperparameter events of behavior ``"Test"``, recorded on the test's bus."""
    return Recording(bus, "Test")
