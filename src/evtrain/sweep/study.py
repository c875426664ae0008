"""The study every worker shares: Optuna's journal file storage, and which trial runs next.

The storage is one append-only file (``JournalFileBackend``, file locks, no server), so
workers in several processes, or on several machines that share a disk, work on one study.
A worker takes its next trial under a lock of its own beside the journal
(``<journal>.next.lock`` of Optuna's ``JournalFileOpenLock``, NFS-safe), after counting the
trials the study already has: so the study gets exactly ``--trials`` trials however many
workers ask at once, and no trial runs twice (Optuna numbers each trial once).  Before a
process writes to the journal, :func:`check_journal` reads it whole: one that is not Optuna's
is refused, a torn last line cut off.

A trial cut short by SIGINT, SIGTERM or SIGHUP is recorded ``FAIL`` with the user attribute
``evtrain.interrupted``, and does not count; its values wait in the study (a ``WAITING``
trial, which does not count either), and the next trial a worker asks for runs them again.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from evtrain.config.sweep import SweepSettings
from evtrain.errors import ConfigError

if TYPE_CHECKING:
    import optuna

logger = logging.getLogger("evtrain")

INTERRUPTED = "evtrain.interrupted"
"""User attribute of a trial an interrupt cut short (recorded ``FAIL``; not counted)."""
STEPS = "evtrain.steps"
"""User attribute: the environment steps the trial's behavior took."""
ERROR = "evtrain.error"
"""User attribute: why a failed trial failed."""
RUN = "evtrain.run"
"""User attribute: the trial's run folder."""
RERUN_OF = "evtrain.rerun_of"
"""User attribute: the number of the interrupted trial whose values the trial runs again."""
WORKER = "evtrain.worker"
"""User attribute: the worker that ran the trial, ``host:pid``."""
CONFIG_DIGEST = "evtrain.config_sha256"
"""Study user attribute: the digest of the config the study was started from."""


def file_in_the_way(path: Path) -> Path | None:
    """The first of ``path`` and the folders above it that exists and is not a folder (where
    ``path`` could not be made a folder), or ``None``."""
    for part in (path, *path.parents):
        if part.exists():
            return None if part.is_dir() else part
    return None


def check_journal(path: Path) -> None:
    """Refuse a journal path that is a folder, or under a file, and a journal file that is
    not Optuna's, before anything is written: each line of a journal is one JSON object that
    ends with a newline.  A last line without one (a writer stopped as it wrote it, which
    Optuna never reads) is cut off, under the journal's own lock (no writer is half way), and
    said.

    :raises ConfigError: naming the file, the line, and what to do.
    """
    from optuna.storages.journal import JournalFileSymlinkLock

    if path.is_dir():
        raise ConfigError(
            [f"--storage: {path} is a folder; name the journal file, e.g. {path / 'study.journal'}"]
        )
    above = file_in_the_way(path.parent)
    if above is not None:
        raise ConfigError(
            [
                f"--storage: {above} is a file, not a folder; the journal {path} "
                "cannot be made under it"
            ]
        )
    if not path.exists():
        return
    lock = JournalFileSymlinkLock(str(path))
    lock.acquire()
    try:
        with path.open("rb+") as journal:
            lines = journal.read().split(b"\n")
            for number, line in enumerate(lines[:-1], 1):
                if not _is_entry(line):
                    raise ConfigError(
                        [
                            f"--storage: {path} line {number} is not an entry of an Optuna "
                            f"journal (expected one JSON object a line, got {line[:40]!r}); "
                            "nothing was written to it: restore it, or give another --storage "
                            "(or --study)"
                        ]
                    )
            if lines[-1]:
                journal.truncate(journal.tell() - len(lines[-1]))
                logger.warning(
                    "%s: its last line was cut short (%d bytes without an end of line: a "
                    "writer stopped as it wrote it); removed, as Optuna never read it",
                    path,
                    len(lines[-1]),
                )
    finally:
        lock.release()


def _is_entry(line: bytes) -> bool:
    try:
        entry = json.loads(line)
    except ValueError:
        return False
    return isinstance(entry, dict) and "op_code" in entry


def storage(path: Path) -> optuna.storages.JournalStorage:
    """Optuna's journal storage in the file ``path`` (its folder created)."""
    from optuna.storages import JournalStorage
    from optuna.storages.journal import JournalFileBackend

    path.parent.mkdir(parents=True, exist_ok=True)
    return JournalStorage(JournalFileBackend(str(path)))


def config_digest(data: Mapping[str, Any]) -> str:
    """A digest of what a sweep trains and searches: the config less ``checkpoint_settings``
    (where a run writes, which a worker on another machine may name differently)."""
    kept = {key: value for key, value in data.items() if key != "checkpoint_settings"}
    text = json.dumps(kept, sort_keys=True, default=repr)
    return hashlib.sha256(text.encode()).hexdigest()


def trial_seed(seed: int, number: int) -> int:
    """The seed of trial ``number``'s draws in a sweep seeded ``seed``: a mix of the two
    (NumPy's ``SeedSequence``), so trials 0, 1, 2... of a study draw from streams of their
    own, whichever process or machine runs them."""
    import numpy as np

    return int(np.random.SeedSequence([seed, number]).generate_state(1)[0])


def sampler(settings: SweepSettings, number: int) -> optuna.samplers.BaseSampler:
    """The sampler that draws the values of trial ``number``: seeded from ``seed`` and the
    number the study gave the trial (:func:`trial_seed`), never from the process, so that a
    ``--resume``, a second ``evtrain sweep`` on the study or a worker on another machine
    draws new values, and a study started again from the same config draws the same ones
    (with TPE, given the same finished trials).  TPE with ``constant_liar`` (Optuna's advice
    for parallel workers: a running trial counts as a poor one, so that workers asking at
    once do not all try the same region)."""
    import optuna

    seed = trial_seed(settings.seed, number)
    if settings.sampler == "random":
        return optuna.samplers.RandomSampler(seed=seed)
    return optuna.samplers.TPESampler(seed=seed, constant_liar=True)


def pruner(settings: SweepSettings) -> optuna.pruners.BasePruner:
    import optuna

    p = settings.pruner
    if p is None or p.type == "none":
        return optuna.pruners.NopPruner()
    return optuna.pruners.MedianPruner(
        n_startup_trials=p.n_startup_trials,
        n_warmup_steps=p.n_warmup_steps,
        interval_steps=p.interval_steps,
    )


def open_study(
    name: str,
    path: Path,
    settings: SweepSettings,
    digest: str,
    *,
    create: bool,
) -> optuna.Study:
    """The study ``name`` in the journal ``path``: created (``create``, or when it is not
    there yet), else loaded.  Its sampler is the one of trial 0: :func:`draw` sets each
    trial's before its values are drawn.

    :raises ConfigError: the journal is refused (:func:`check_journal`), ``create`` without
        ``--resume`` and the study exists, or the study was started from another config.
    """
    import optuna

    check_journal(path)
    store = storage(path)
    exists = name in {s.study_name for s in store.get_all_studies()}
    if exists and create:
        raise ConfigError(
            [
                f"--study {name}: the study already exists in {path}; continue it with "
                "--resume, or choose another --study"
            ]
        )
    if not exists:
        direction = settings.objective.direction
        study = optuna.create_study(
            study_name=name,
            storage=store,
            direction=direction,
            sampler=sampler(settings, 0),
            pruner=pruner(settings),
            load_if_exists=True,  # another machine's worker may create it at the same moment
        )
        if CONFIG_DIGEST not in study.user_attrs:
            study.set_user_attr(CONFIG_DIGEST, digest)
    study = optuna.load_study(
        study_name=name, storage=store, sampler=sampler(settings, 0), pruner=pruner(settings)
    )
    if study.user_attrs.get(CONFIG_DIGEST, digest) != digest:
        raise ConfigError(
            [
                f"--study {name}: the study in {path} was started from another config (its "
                "sweep or training options differ); use the config it was started with, or "
                "choose another --study"
            ]
        )
    return study


def counted(study: optuna.Study) -> int:
    """The trials that count towards ``--trials``: all but those interrupted, and those
    waiting (an interrupted trial's values, put back to run again)."""
    import optuna

    waiting = optuna.trial.TrialState.WAITING
    trials = study.get_trials(deepcopy=False)
    return sum(1 for t in trials if t.state is not waiting and not t.user_attrs.get(INTERRUPTED))


def next_trial(study: optuna.Study, path: Path, wanted: int) -> optuna.Trial | None:
    """A new trial of ``study``, or ``None`` once it has ``wanted`` trials that count.

    :param path: the journal: its lock is taken while counting and asking.
    """
    from optuna.storages.journal import JournalFileOpenLock

    lock = JournalFileOpenLock(str(path.with_name(path.name + ".next")))
    lock.acquire()
    try:
        if counted(study) >= wanted:
            return None
        return study.ask()
    finally:
        lock.release()


def draw(study: optuna.Study, settings: SweepSettings, trial: optuna.Trial) -> dict[str, Any]:
    """``trial``'s values of the sweep's parameters, by key path, drawn by the sampler of its
    number (:func:`sampler`; Optuna draws a value when it is first suggested, so the study's
    sampler is set first: one trial at a time in a process)."""
    from evtrain.sweep.space import suggest

    study.sampler = sampler(settings, trial.number)
    return {path: suggest(trial, path, p) for path, p in settings.parameters.items()}
