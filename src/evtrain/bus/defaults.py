"""A bus's own settings: the defaults its subscribers get unless they say otherwise, and its
time limits — checked once, when the bus is made (``Bus(...)`` takes them as keywords and
documents each).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import attrs

from evtrain.bus.delivery import FailureContext, FailurePolicy
from evtrain.bus.settings import Overflow


def _at_least_one(_: object, field: attrs.Attribute[int], value: int) -> None:
    if value < 1:
        raise ValueError(f"{field.name} must be at least 1, got {value}")


def _seconds(_: object, field: attrs.Attribute[float], value: float) -> None:
    if not value > 0:  # NaN too
        raise ValueError(f"{field.name} must be a number of seconds above 0, got {value}")


def _path(value: str | os.PathLike[str] | None) -> Path | None:
    return None if value is None else Path(value)


@attrs.frozen(kw_only=True)
class BusDefaults:
    """What ``Bus(...)`` was given, converted and checked (a ``ValueError`` names the bad
    value).  The fields are in the order they are checked."""

    capacity: int = attrs.field(default=10_000, validator=_at_least_one)
    overflow: Overflow = attrs.field(default=Overflow.BLOCK, converter=Overflow)
    on_error: FailurePolicy = attrs.field(default=FailurePolicy.DISABLE, converter=FailurePolicy)
    max_consecutive_failures: int = attrs.field(default=100, validator=_at_least_one)
    stall_timeout: float = attrs.field(default=10.0, validator=_seconds)
    block_timeout: float = attrs.field(default=10.0, validator=_seconds)
    drain_timeout: float = attrs.field(default=30.0, validator=_seconds)
    journal_dir: Path | None = attrs.field(default=None, converter=_path)
    journal_fsync_s: float = attrs.field(default=1.0, validator=_seconds)
    retry_backoff_s: float = attrs.field(default=0.5, validator=_seconds)
    retry_backoff_max_s: float = attrs.field(default=30.0, validator=_seconds)
    journal_max_bytes: int = attrs.field(default=1 << 30, validator=_at_least_one)

    def failures(
        self,
        report: Callable[[Any], None],
        raise_later: Callable[[str, str, BaseException], None],
        request_stop: Callable[[str, str], None],
    ) -> FailureContext:
        """What the isolation wrapper applies when a subscriber raises or stalls: this bus's
        policy, and where it reports (``subscriber_failed``/``subscriber_stalled``); and where
        a subscriber's returned ``StopRun`` goes."""
        return FailureContext(
            policy=self.on_error,
            max_consecutive_failures=self.max_consecutive_failures,
            report=report,
            raise_later=raise_later,
            report_stall=report,
            retry_backoff_s=min(self.retry_backoff_s, self.retry_backoff_max_s),
            request_stop=request_stop,
        )
