"""What the remote-tracker writers (``mlflow``, ``wandb``) share: importing their library only
when a run asks for them, the tracker-run record in ``run_logs/`` that ``--resume`` reopens,
flattening hyperparameters, the ledger that keeps a re-delivered event from being logged
twice, and the check that a file is one evtrain wrote in the run folder before it is uploaded.

A tracker writer is delivered like any writer, but the bus may call a method again with the
same event after it raised, and a journal replay after a crash may re-deliver events that were
already logged.  :class:`LoggedSteps` is the writer's memory of which ``(key, step)`` pairs the
tracker has: a writer logs only what it lacks, and marks it only once the tracker said yes.
"""

from __future__ import annotations

import importlib
import json
import time
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from types import ModuleType
from typing import Any

from evtrain.atomic import atomic_write
from evtrain.bus.inbox import Overflow
from evtrain.errors import ConfigError, PermanentDeliveryError
from evtrain.extras import install_hint

SPOOL = "spool"
"""The overflow policy of writers to a remote tracker: lossless, journaled, never blocks the
trainer, probes a failing tracker on a short fixed interval (``bus.retry_backoff_s``)."""


UPLOADED = {".pt": "checkpoint", ".onnx": "exported model", ".gif": "video", ".mp4": "video"}
"""The files evtrain writes in a run folder that a tracker writer uploads, by suffix."""


def run_file(path: Path, run_folder: Path) -> Path:
    """``path``, when it is a file evtrain wrote in ``run_folder`` and may be uploaded: it
    resolves (links followed) to a regular file inside the resolved ``run_folder`` whose suffix
    is one of :data:`UPLOADED`.

    An event may come from a journal that came from elsewhere (``evtrain sync`` of a copied or
    crafted run folder), so its path decides nothing: a path outside the run folder, or a link
    inside it that points out, would upload any file the user can read to the tracker.

    :raises PermanentDeliveryError: it is not (the event is dead-lettered, not uploaded).
    """
    resolved = path.resolve()
    if not resolved.is_relative_to(run_folder.resolve()):
        where = "it is" if resolved == path.absolute() else f"it leads to {resolved},"
        problem = f"{where} outside the run folder {run_folder}"
    elif not resolved.is_file():
        problem = "it is not a file"
    elif resolved.suffix not in UPLOADED:
        problem = f"{resolved.name} is not a checkpoint, an exported model or a video"
    else:
        return path
    kinds = ", ".join(f"{suffix} ({kind})" for suffix, kind in UPLOADED.items())
    raise PermanentDeliveryError(
        f"{path} is not uploaded: {problem}; only the files evtrain writes in the run folder "
        f"are: {kinds}"
    )


def remote_overflow() -> str | None:
    """``"spool"`` where the bus knows that policy, else ``None`` (the bus's own, ``block``).

    The ``spool`` policy lands in the bus separately; until it does, ``Overflow("spool")``
    raises and a writer asking for it could not be connected at all.
    """
    return SPOOL if SPOOL in {o.value for o in Overflow} else None


def require(module: str, writer: str, extra: str | None = None) -> ModuleType:
    """Import ``module`` for the writer ``writers.<writer>``.

    :raises ConfigError: the package is not installed; the message names the extra to install.
    """
    try:
        return importlib.import_module(module)
    except ImportError as error:
        package = module.split(".")[0]
        problem = f"writers.{writer}: needs the {package} package: {install_hint(extra or writer)}"
        if error.name not in (None, module, package):  # installed, but one of its imports failed
            problem += f" (importing it failed: {error})"
        raise ConfigError([problem]) from error


def flatten(value: Any, prefix: str = "") -> Iterator[tuple[str, Any]]:
    """``("a/b/c", leaf)`` for each leaf of nested mappings (``{"a": {"b": {"c": 1}}}``)."""
    if isinstance(value, Mapping) and value:
        for key, inner in value.items():
            yield from flatten(inner, f"{prefix}/{key}" if prefix else str(key))
    elif prefix:
        yield prefix, value


class TrackerRecord:
    """``run_logs/<name>.json``: which tracker run an evtrain run writes to, written atomically
    so a crash leaves the old record or the new one."""

    def __init__(self, run_logs: Path, name: str) -> None:
        self.path = run_logs / f"{name}.json"

    def read(self) -> dict[str, Any]:
        """The record; empty when there is none (or it is not a JSON object)."""
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
        except (FileNotFoundError, ValueError):
            return {}
        return data if isinstance(data, dict) else {}

    def write(self, data: Mapping[str, Any]) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        text = json.dumps(dict(data), indent=2, sort_keys=True).encode("utf-8")
        atomic_write(self.path, lambda f: f.write(text))


class LoggedSteps:
    """The last step logged per key, and the timestamps of events not yet logged.

    The writers take each period's time from its event (``write_stats_event``); a caller of
    plain ``write_stats`` has none, so there the first delivery of a period fixes its
    timestamp and a retry of that period reuses it: the tracker receives the same request
    again, which a tracker that stores ``(key, step, timestamp, value)`` rows (MLflow's SQL
    store) folds into the row it already has.
    """

    def __init__(self, last: Mapping[str, int] | None = None) -> None:
        self.last: dict[str, int] = dict(last or {})
        self._times: dict[tuple[str, int], float] = {}

    def missing(self, keys: Iterable[str], step: int) -> list[str]:
        """Those of ``keys`` not logged at ``step`` or later."""
        last = self.last
        return [key for key in keys if last.get(key, -1) < step]

    def timestamp(self, category: str, step: int) -> float:
        """The unix time of ``category``'s period at ``step``: fixed on its first delivery."""
        return self._times.setdefault((category, step), time.time())

    def mark(self, category: str, keys: Iterable[str], step: int) -> None:
        """The tracker has ``keys`` at ``step``."""
        for key in keys:
            if self.last.get(key, -1) < step:
                self.last[key] = step
        self._times.pop((category, step), None)
