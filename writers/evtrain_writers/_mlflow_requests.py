"""Bounding the MLflow writer's own requests, and only those: mlflow's ``http_request`` is
wrapped once, and the wrapper adds the writer's timeout and retries inside the writer's calls
(a context variable); every other call, on any thread, passes through unchanged."""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Iterator
from contextvars import ContextVar
from typing import Any

_LIMITS: ContextVar[tuple[float, int] | None] = ContextVar("evtrain_mlflow_limits", default=None)


def _bound_mlflow_requests() -> bool:
    """Wrap ``mlflow.utils.rest_utils.http_request`` (once) so that calls made inside
    :func:`_limits` get its timeout and retries; ``False`` when mlflow has no such function."""
    from mlflow.utils import rest_utils

    original = getattr(rest_utils, "http_request", None)
    if original is None:
        return False
    if getattr(original, "evtrain_bounded", False):
        return True

    @functools.wraps(original)
    def http_request(*args: Any, **kwargs: Any) -> Any:
        for name, value in request_limits().items():
            if kwargs.get(name) is None:
                kwargs[name] = value
        return original(*args, **kwargs)

    http_request.evtrain_bounded = True  # type: ignore[attr-defined]
    rest_utils.http_request = http_request
    return True


def request_limits() -> dict[str, Any]:
    """What the wrapped ``http_request`` adds to a request made now: the limits of the writer
    whose call this is, nothing outside a writer's call (or on another thread)."""
    limits = _LIMITS.get()
    if limits is None:
        return {}
    timeout, retries = limits
    return {
        "timeout": timeout,
        "max_retries": retries,
        "backoff_factor": 0.5,
        "backoff_jitter": 0.0,
        "retry_timeout_seconds": max(1, round(timeout * (retries + 1))),
    }


@contextlib.contextmanager
def _limits(timeout: float, retries: int) -> Iterator[None]:
    token = _LIMITS.set((timeout, retries))
    try:
        yield
    finally:
        _LIMITS.reset(token)
