"""``writers.mlflow``: the MLflow writer's options, checked when the run's options load (apart
from :mod:`evtrain_writers.mlflow_writer`, so the checks at start can name them without
importing the writer).
"""

from __future__ import annotations

from typing import Any

import attrs


def _positive(_: Any, attribute: attrs.Attribute[float], value: float) -> None:
    if value <= 0:
        raise ValueError(f"expected a number of seconds > 0, got {value!r}")


def _not_negative(_: Any, attribute: attrs.Attribute[int], value: int) -> None:
    if value < 0:
        raise ValueError(f"expected a count >= 0, got {value!r}")


@attrs.define(kw_only=True)
class MlflowOptions:
    """``writers.mlflow``."""

    tracking_uri: str | None = None
    """``http(s)://`` server, ``sqlite:///path.db`` or a folder; ``None`` is mlflow's own choice
    (``MLFLOW_TRACKING_URI``, else its default)."""
    experiment: str = "evtrain"
    """Experiment name; created when missing."""
    run_name: str | None = None
    """The MLflow run's name; ``None`` is the evtrain run id."""
    tags: dict[str, str] = attrs.field(factory=dict)
    """Tags set on the MLflow run when it is created."""
    upload_artifacts: bool = False
    """Upload checkpoints and exported models as artifacts (their paths are logged anyway)."""
    upload_videos: bool = False
    """Upload evaluation videos as artifacts (their paths are logged anyway)."""
    hidden_keys: list[str] = attrs.field(factory=list)
    """Stat keys not logged."""
    request_timeout: float = attrs.field(default=5.0, validator=_positive)
    """Seconds one tracking request may take (connect and read) before it fails."""
    request_retries: int = attrs.field(default=0, validator=_not_negative)
    """Retries of a failed tracking request by mlflow itself (0.5 s, 1 s, ... apart) before
    the writer's call fails and the bus's policy takes over."""
