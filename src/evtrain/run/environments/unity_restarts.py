"""When a Unity build instance that failed during the run may be started again: ML-Agents'
restart limits (``SubprocessEnvManager._worker_has_restart_quota``), the crashed log kept,
how the instances are started (:class:`Launch`) and what a failure is called.
:class:`~evtrain.run.environments.unity_builds.UnityBuilds` restarts them.

Per instance, over the run: ``max_lifetime_restarts`` restarts at most, and at most
``restarts_rate_limit_n`` within any ``restarts_rate_limit_period_s`` seconds (-1: no limit).
A failure is allowed a restart while both hold for the restarts made before it, so with
``max_lifetime_restarts: 1`` (or ``restarts_rate_limit_n: 1``) the first crash is restarted and
the second, within the period, stops the run.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import attrs

from evtrain.config.environment_settings import EngineSettings, EnvironmentSettings
from evtrain.errors import UnityError, UnityTimeoutError
from evtrain.unity.side_channels import EnvironmentParametersChannel

__all__ = ["Launch", "RestartQuota", "failure", "keep_crashed_log"]


@attrs.frozen
class Launch:
    """How the run starts its build instances (again, after one crashed)."""

    executable: Path
    settings: EnvironmentSettings
    engine: EngineSettings
    log_folder: Path
    parameters: Callable[[EnvironmentParametersChannel], None] | None = None
    """Queues the environment parameters on an instance's channel."""


class RestartQuota:
    """The restarts each of ``instances`` build instances has made, against ``settings``'
    limits.

    :param clock: seconds, monotonic (a test's own clock)."""

    def __init__(
        self,
        settings: EnvironmentSettings,
        instances: int,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.settings = settings
        self.clock = clock
        self.counts = [0] * instances
        """Restarts of each instance so far."""
        self._recent: list[list[float]] = [[] for _ in range(instances)]
        """When each instance's restarts of the last ``restarts_rate_limit_period_s`` were."""

    def limit_hit(self, k: int) -> str | None:
        """The limit (its key, its value, and the flag to raise it) that forbids restarting
        instance ``k`` now, or ``None``: it may be restarted."""
        s = self.settings
        since = self.clock() - s.restarts_rate_limit_period_s
        self._recent[k] = [t for t in self._recent[k] if t > since]
        if s.max_lifetime_restarts != -1 and self.counts[k] >= s.max_lifetime_restarts:
            return (
                f"env_settings.max_lifetime_restarts ({s.max_lifetime_restarts} per instance over "
                "the run; raise it, --max-lifetime-restarts, -1 for no limit)"
            )
        if s.restarts_rate_limit_n != -1 and len(self._recent[k]) >= s.restarts_rate_limit_n:
            return (
                f"env_settings.restarts_rate_limit_n ({s.restarts_rate_limit_n} within "
                f"restarts_rate_limit_period_s, {s.restarts_rate_limit_period_s:g} s; raise it, "
                "--restarts-rate-limit-n, -1 for no limit)"
            )
        return None

    def record(self, k: int) -> int:
        """Instance ``k`` is restarted now; its restarts so far, this one included."""
        self.counts[k] += 1
        self._recent[k].append(self.clock())
        return self.counts[k]


def keep_crashed_log(log: Path, restart: int) -> Path | None:
    """Rename instance log ``log`` (``Player-<i>.log``) to ``Player-<i>.crash-<restart>.log``
    before the instance starts again with the same ``-logFile`` (a build would write over it,
    or after it); ``None`` when the build wrote none."""
    kept = log.with_name(f"{log.stem}.crash-{restart}{log.suffix}")
    try:
        log.replace(kept)
    except FileNotFoundError:
        return None
    return kept


def failure(process: subprocess.Popen[bytes], error: UnityError) -> str:
    """What ``error`` says the instance of ``process`` did (for the log and the error)."""
    if process.poll() is not None:
        return f"exited during the run with status {process.returncode}"
    if isinstance(error, UnityTimeoutError):
        return f"stopped answering during the run ({error})"
    return "closed its connection during the run"
