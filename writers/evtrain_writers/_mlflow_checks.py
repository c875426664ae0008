"""What the MLflow writer decides about errors: which MLflow failures are a permanent rejection
of one event (dead-lettered, see :class:`~evtrain.errors.PermanentDeliveryError`), and which
settings are wrong before a run starts (exit 2 naming the option) rather than an outage.

Transient (journaled, retried): a connection refused or reset, a timeout, a 5xx answer, any
error MLflow reports without one of :data:`PERMANENT_CODES`.  Permanent: MLflow's validation
errors and other 4xx-class codes.  At start, a malformed URI or an unknown scheme, credentials
the server refuses, and an experiment that cannot be created stop the run; a server that does
not answer is an outage: one warning, and the run trains while its events are journaled.
"""

from __future__ import annotations

import logging
import urllib.parse
from typing import TYPE_CHECKING

from evtrain.errors import ConfigError

if TYPE_CHECKING:
    from evtrain_writers._mlflow_options import MlflowOptions

logger = logging.getLogger("evtrain_writers.mlflow_writer")

PERMANENT_CODES = frozenset(
    {
        "INVALID_PARAMETER_VALUE",
        "RESOURCE_DOES_NOT_EXIST",
        "RESOURCE_ALREADY_EXISTS",
        "BAD_REQUEST",
        "INVALID_STATE",
        "MALFORMED_REQUEST",
    }
)
"""MLflow error codes (4xx-class) that no retry can change."""
CREDENTIAL_CODES = frozenset({"UNAUTHENTICATED", "PERMISSION_DENIED"})
START_TIMEOUT_S = 3.0
"""The longest the check at start waits for the server (then it is an outage)."""


def permanent(error: BaseException) -> str | None:
    """The reason ``error`` is a permanent rejection, or ``None`` for a transient failure."""
    from mlflow.exceptions import MlflowException

    if isinstance(error, MlflowException) and error.error_code in PERMANENT_CODES:
        return f"{error.error_code}: {_first_line(error.message)}"
    return None


def _first_line(text: object) -> str:
    return str(text).strip().splitlines()[0] if str(text).strip() else ""


def check_at_start(options: MlflowOptions) -> None:
    """Refuse settings that cannot work; warn once when the server does not answer.

    :raises ConfigError: the URI is malformed or of a scheme MLflow lacks, the server refuses
        the credentials, or the experiment cannot be created.
    """
    import mlflow
    from mlflow import MlflowClient
    from mlflow.exceptions import MlflowException

    from evtrain_writers._mlflow_requests import _bound_mlflow_requests, _limits

    uri = options.tracking_uri or mlflow.get_tracking_uri()
    option = "writers.mlflow.tracking_uri"
    expected = "expected http(s)://host:port, or a database URI such as sqlite:///mlflow.db"
    parsed = urllib.parse.urlparse(uri)
    if parsed.scheme in ("http", "https") and not parsed.netloc:
        raise ConfigError([f"{option}: {uri!r} has no host ({expected})"])
    try:
        client = MlflowClient(uri)
    except Exception as error:
        raise ConfigError(
            [f"{option}: {uri!r} is not a URI MLflow can use ({_first_line(error)}); {expected}"]
        ) from None
    _bound_mlflow_requests()
    try:
        with _limits(min(options.request_timeout, START_TIMEOUT_S), 0):
            if client.get_experiment_by_name(options.experiment) is None:
                try:
                    client.create_experiment(options.experiment)
                except MlflowException as error:
                    # Another process (another rank of this run) created it meanwhile.
                    made = client.get_experiment_by_name(options.experiment)
                    if made is not None and made.lifecycle_stage == "active":
                        return
                    if error.error_code in PERMANENT_CODES:
                        raise ConfigError(
                            [
                                f"writers.mlflow.experiment: {options.experiment!r} cannot be "
                                f"created on {uri} ({_first_line(error.message)}); choose "
                                "another name, or restore the deleted experiment"
                            ]
                        ) from None
                    raise
    except MlflowException as error:
        if error.error_code in CREDENTIAL_CODES:
            raise ConfigError(
                [
                    f"{option}: {uri} refused the credentials ({_first_line(error.message)}); "
                    "set MLFLOW_TRACKING_USERNAME and MLFLOW_TRACKING_PASSWORD, or "
                    "MLFLOW_TRACKING_TOKEN"
                ]
            ) from None
        logger.warning(
            "MLflow at %s does not answer (%s); its events are journaled and delivered once "
            "it does.",
            uri,
            _first_line(error.message),
        )
