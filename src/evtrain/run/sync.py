"""``evtrain sync RUN_ID``: deliver what a run's journals still hold to their trackers.

A ``spool`` writer (MLflow, wandb) keeps every event in a journal under
``results/<run_id>/run_logs/journal/`` until its tracker acknowledged it.  A run that ended
while its tracker was down, or was killed, leaves the rest there; ``--resume`` delivers it
first, and this command delivers it without training: it builds the run's writers from the
run's own ``configuration.yaml``, connects those that have something journaled to a bus over
that journal, and closes the bus within ``timeout``.  Connecting a spool subscriber replays its
journal, so this is the same path a resumed run takes.  What the tracker still refuses stays in
the journal for the next try.

A run folder may come from elsewhere, so nothing in it decides what code runs: the journal holds
no pickles (:mod:`evtrain.bus.records`), and the plugin folders (``plugins.paths``) its
``configuration.yaml`` names are not imported — only those given with ``--plugins``.  Those it
names and the command line does not are said in one warning, and the sync goes on without them
(a writer of theirs keeps its journal for a sync that is given them; a plugin the run lists in
``plugins.required`` stops the sync with exit 2, as it would stop a run).
"""

from __future__ import annotations

import logging
import shlex
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import attrs

from evtrain.bus import Bus
from evtrain.bus.journal import check_journals, journal_backlog
from evtrain.bus.subscription import subscriber_name
from evtrain.config.names import name_problem
from evtrain.errors import ConfigError, RunFolderError
from evtrain.run.checkpoints.lock import RunLock
from evtrain.run.options import read_config
from evtrain.run.wiring import journal_folder, make_bus, register_stats_writer_plugins

logger = logging.getLogger("evtrain")


@attrs.frozen(kw_only=True)
class SyncReport:
    """What ``evtrain sync`` did, per writer (subscriber name)."""

    pending: dict[str, int]
    """Events journaled and not acknowledged before the sync."""
    left: dict[str, int]
    """Events still journaled after it (the tracker did not take them in time)."""
    refused: dict[str, int] = attrs.field(factory=dict)
    """Events the writer refused for good (dead-lettered, in ``run_logs/dead_letter/``): e.g.
    one naming a file to upload that evtrain did not write in the run folder."""

    @property
    def complete(self) -> bool:
        return not any(self.left.values())


def sync_run(
    run_id: str, results_dir: str | Path, timeout: float, plugins: Sequence[str] = ()
) -> SyncReport:
    """Replay run ``run_id``'s journals to their writers; wait at most ``timeout`` seconds.

    :param plugins: the plugin folders to import (``--plugins``), in place of the
        ``plugins.paths`` of the run's ``configuration.yaml``.

    :raises ConfigError: ``run_id`` is not a folder name (:mod:`evtrain.config.names`).
    :raises RunFolderError: there is no such run, or it has no configuration, or another
        process (a run, a sync) holds it.
    :raises ConfigError: its configuration is no longer valid (a writer plugin was removed).
    :raises JournalFormatError: a journal file is not one this evtrain reads.
    """
    problem = name_problem(run_id)
    if problem is not None:
        raise ConfigError([f"RUN_ID: {problem}"])
    folder = Path(results_dir) / run_id
    config = folder / "configuration.yaml"
    if not config.is_file():
        raise RunFolderError(
            f"no run {run_id!r} under {results_dir}: {config} does not exist. Give the run id "
            "evtrain learn was run with, and --results-dir if it was not results."
        )
    lock = RunLock.acquire(folder, run_id)  # a run still going delivers its journals itself
    try:
        return _sync(run_id, results_dir, timeout, folder, plugins)
    finally:
        lock.release()


def _sync(
    run_id: str, results_dir: str | Path, timeout: float, folder: Path, plugins: Sequence[str]
) -> SyncReport:
    """:func:`sync_run` once the run is locked."""
    from evtrain.run.options import options_from_data

    config = folder / "configuration.yaml"
    data = read_config(config)
    check_journals(folder / "run_logs" / "journal")  # before anything is imported or started
    data["plugins"] = _given_plugin_paths(config, data.get("plugins"), plugins)
    # The run's writers continue its tracker runs (ids kept in run_logs/), as on --resume.
    data["checkpoint_settings"] = {
        **data.get("checkpoint_settings", {}),
        "run_id": run_id,
        "results_dir": str(results_dir),
        "resume": True,
        "force": False,
    }
    options = options_from_data(data)
    journal = journal_folder(options)
    pending: dict[str, int] = {}
    bus: Bus = make_bus(options)
    with bus:
        for writer in register_stats_writer_plugins(options):
            name = subscriber_name(writer)
            backlog = journal_backlog(journal, name)
            if not backlog:
                writer.close()  # nothing of it waits: do not start it (a server, a session)
                continue
            pending[name] = backlog
            logger.info("Delivering %d journaled events to %s", backlog, name)
            bus.add_writer(writer, name=name)
        report = bus.close(timeout=timeout)
    left = {name: journal_backlog(journal, name) for name in pending}
    behind = {name: n for name, n in left.items() if n}
    if behind:
        logger.warning(
            "Still journaled, the tracker did not take them: %s",
            ", ".join(f"{name}: {n} events" for name, n in behind.items()),
        )
    refused = {name: n for name, n in report.dead_lettered.items() if name in pending}
    return SyncReport(pending=pending, left=left, refused=refused)


def _given_plugin_paths(config: Path, saved: Any, given: Sequence[str]) -> Any:
    """The run's ``plugins`` section with ``paths`` replaced by ``given``; warns when the run
    names folders that ``given`` does not."""
    if saved is None:
        saved = {}
    if not isinstance(saved, dict):
        return saved  # refused with its path by the options' validation
    named = saved.get("paths") or []
    if not isinstance(named, list):
        named = [named]
    chosen = {str(Path(p).resolve()) for p in given}
    left_out = [str(p) for p in named if str(Path(str(p)).resolve()) not in chosen]
    if left_out:
        logger.warning(
            "%s names plugin folders that evtrain sync does not import unless given on the "
            "command line: %s. If you trust them, add --plugins %s",
            config,
            ", ".join(left_out),
            shlex.join(left_out),
        )
    return {**saved, "paths": [str(p) for p in given]}
