"""The run folder: ``results/<run_id>/``, the run's alone.

Checked against ``--resume``/``--force``, locked for the run's whole life
(:mod:`evtrain.run.checkpoints.lock`), marked as evtrain's (``.evtrain-run``) and stamped with the
resolved options before the first step.  Run ids and behavior names are folder names
(:mod:`evtrain.config.names`), so nothing here reaches outside ``results_dir/<run_id>``; ``--force``
removes only a folder evtrain made as a run, never what a symbolic link points to, and never the run
the new one is to start from.  A run that continues a folder (``--resume``, inference) refuses one
holding a symbolic link, so it never writes or rotates files through one.
"""

from __future__ import annotations

import logging
import os
import shutil
from pathlib import Path
from types import TracebackType

import yaml

from evtrain.atomic import atomic_write
from evtrain.config.options import RunOptions
from evtrain.errors import RunFolderError
from evtrain.run.checkpoints.lock import LOCK, RunLock

logger = logging.getLogger("evtrain")

CONFIGURATION = "configuration.yaml"
MARKER = ".evtrain-run"
"""Written into every run folder evtrain creates (or resumes): what ``--force`` may remove."""


class RunFolder:
    """The run folder as one run holds it: locked until :meth:`release` (or the ``with`` block
    ends), and removed again by a run that fails before its first step when it held nothing
    worth keeping before (:attr:`fresh`).

    :param fresh: the folder was created, emptied by ``--force``, or empty, for this run.
    :param created: this call created the folder itself (so :meth:`discard` removes it).
    """

    def __init__(self, path: Path, lock: RunLock | None, *, fresh: bool, created: bool) -> None:
        self.path = path
        self.lock = lock
        self.fresh = fresh
        self.created = created
        self.stepped = False
        """Set by the runner once a behavior took a step: the folder is then the run's."""

    def discard(self) -> None:
        """Remove what this run put in a :attr:`fresh` folder, so that the same command can
        be given again (a no-op for a folder that held a run before, or without the lock)."""
        if not self.fresh or self.lock is None or self.stepped:
            return
        logger.debug("The run failed before its first step: removing %s", self.path)
        _clear(self.path)
        if self.created:
            (self.path / LOCK).unlink(missing_ok=True)
            self.path.rmdir()

    def release(self) -> None:
        """Let another process take the run folder."""
        if self.lock is not None:
            self.lock.release()

    def __enter__(self) -> RunFolder:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        try:
            if error is not None:
                try:
                    self.discard()
                except OSError as problem:  # the run's own error is the one to show
                    logger.warning("Could not remove %s again: %s", self.path, problem)
        finally:
            self.release()


def prepare_run_folder(options: RunOptions) -> RunFolder:
    """Take ``write_path`` for this run as the flags say: create it (or reuse it with
    ``--resume``, or empty it with ``--force``), lock it, mark it; return it, locked.

    Nothing is removed before the lock is held, and no refusal removes anything.

    :raises RunFolderError: the run exists and neither ``resume`` nor ``force`` is set;
        ``resume`` is set and there is nothing to resume; the folder holds something else than
        an evtrain run; another process holds the run; ``initialize_from`` names a run that
        does not exist, or (with ``force``) it or an ``init_path`` lies in the run to remove;
        the folder cannot be written; without ``force``, the folder holds a symbolic link.
    """
    cs = options.checkpoint_settings
    path = cs.write_path
    if cs.resume and cs.force:
        raise RunFolderError("--resume and --force contradict each other: choose one")
    if cs.resume and not _content(path):
        raise RunFolderError(
            f"cannot resume run {cs.run_id!r}: {path} does not exist. Start it without --resume."
        )
    init = cs.maybe_init_path
    if init is not None and not init.is_dir():
        raise RunFolderError(
            f"--initialize-from {cs.initialize_from!r}: {init} does not exist; give the run id "
            f"of an earlier run in {cs.results_dir}"
        )
    if cs.force:
        _check_not_initialized_from_itself(options)
        if path.is_symlink():
            logger.warning("--force: removing the link %s (not the folder it points to)", path)
            path.unlink()
    created = not path.is_dir()
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise unwritable(options, error) from None
    new_lock = not (path / LOCK).exists()
    lock = RunLock.acquire(path, cs.run_id)  # before anything is removed or written
    try:
        content = _content(path)
        _check_content(options, content)
        if content and not cs.force:  # --force removes links, never what they point to
            _refuse_links(options)
        if cs.force and content:
            logger.warning("--force: removing the earlier run in %s", path)
            _clear(path)
        atomic_write(path / MARKER, lambda f: f.write(b"an evtrain run folder\n"))
    except BaseException as error:
        # A refusal leaves the folder as it was: only what this call created goes.
        if created:
            _clear(path)
        if new_lock:
            (path / LOCK).unlink(missing_ok=True)
        if created:
            path.rmdir()
        lock.release()
        if isinstance(error, OSError) and not isinstance(error, RunFolderError):
            raise unwritable(options, error) from None
        raise
    return RunFolder(path, lock, fresh=cs.force or not content, created=created)


def _check_content(options: RunOptions, content: list[Path]) -> None:
    """Refuse a folder that holds a run without the flag that says what to do with it, or
    that holds something evtrain did not write as a run."""
    cs = options.checkpoint_settings
    path = cs.write_path
    if cs.resume and not content:  # it went between the first look and the lock
        raise RunFolderError(
            f"cannot resume run {cs.run_id!r}: {path} does not exist. Start it without --resume."
        )
    if content and not (cs.resume or cs.force or cs.inference):
        raise RunFolderError(
            f"run {cs.run_id!r} already exists in {path}. Use --resume "
            "(checkpoint_settings.resume) to continue it, --force (checkpoint_settings.force) "
            "to overwrite it, or choose another --run-id (checkpoint_settings.run_id)."
        )
    if content and not is_run_folder(path):
        raise RunFolderError(
            f"{path} is not an evtrain run folder (it has no {MARKER}, and no {CONFIGURATION} "
            f"with run_logs/ as runs of earlier evtrain versions have), so evtrain will not "
            "use or remove it. Choose another --run-id or --results-dir, or move it away "
            "yourself."
        )


WANDB = "wandb"
"""wandb's own folder in a run (``writers.wandb``): wandb links its latest run there, and
evtrain writes nothing in it."""


def _refuse_links(options: RunOptions) -> None:
    """Refuse a run folder that holds a symbolic link, anywhere but in wandb's own folder.

    The run writes, replaces and deletes files in its folder (checkpoints and their rotation,
    the best model, videos, TensorBoard, ``progress.csv``, ``run_logs/``); through a link —
    a behavior folder that points elsewhere — it would write and delete outside the run.
    """
    cs = options.checkpoint_settings
    root = cs.write_path
    for folder, dirs, files in os.walk(root):  # links are listed, never followed
        here = Path(folder)
        if here == root and WANDB in dirs and not (root / WANDB).is_symlink():
            dirs.remove(WANDB)  # its inside is wandb's; a link in its place is refused
        for name in sorted([*dirs, *files]):
            entry = here / name
            if entry.is_symlink():
                raise RunFolderError(
                    f"{entry} is a symbolic link (to {os.readlink(entry)}) in run "
                    f"{cs.run_id!r}: evtrain writes and removes files in its run folder and "
                    "never through a link. Replace the link with the folder or file itself "
                    "(or remove it), then run again."
                )


def is_run_folder(path: Path) -> bool:
    """Whether ``path`` is a folder evtrain wrote as a run: it holds the marker, or (a run of
    an evtrain from before the marker) ``configuration.yaml`` and ``run_logs/``."""
    return (path / MARKER).is_file() or (
        (path / CONFIGURATION).is_file() and (path / "run_logs").is_dir()
    )


def _check_not_initialized_from_itself(options: RunOptions) -> None:
    """``--force`` removes the run first: refuse when what it is to start from lies in it."""
    cs = options.checkpoint_settings
    run = cs.write_path.resolve()
    sources: list[tuple[str, Path]] = []
    if cs.maybe_init_path is not None:
        sources.append((f"--initialize-from {cs.initialize_from!r}", cs.maybe_init_path))
    for name, settings in options.behaviors.items():
        if settings.init_path is not None:
            init_path = Path(settings.init_path).expanduser()
            if cs.maybe_init_path is not None and init_path.parent == Path():
                init_path = cs.maybe_init_path / name / init_path  # as the run will read it
            sources.append((f"behaviors.{name}.init_path {settings.init_path!r}", init_path))
    for what, source in sources:
        if source.resolve().is_relative_to(run):
            raise RunFolderError(
                f"{what} lies in run {cs.run_id!r}, which --force would remove before "
                "starting from it. Start the new run under another --run-id, or --resume "
                f"{cs.run_id!r}."
            )


def _content(path: Path) -> list[Path]:
    """What ``path`` holds besides the lock and the marker ([] if it is no folder)."""
    if not path.is_dir():
        return []
    return [p for p in path.iterdir() if p.name not in (LOCK, MARKER)]


def _clear(path: Path) -> None:
    """Remove everything in ``path`` but the lock file, following no symbolic link: a link is
    removed, not what it points to (``shutil.rmtree`` does not follow links either)."""
    for entry in path.iterdir():
        if entry.name == LOCK:
            continue  # another process must keep finding the file this process holds
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry)
        else:
            entry.unlink()


def unwritable(options: RunOptions, error: OSError) -> RunFolderError:
    """The error for a run folder the OS refuses to create or write (a file in the way, no
    permission, a read-only disk)."""
    cs = options.checkpoint_settings
    where = f": {error.filename}" if error.filename else ""
    return RunFolderError(
        f"cannot write the run folder {cs.write_path} ({error.strerror or error}{where}). "
        f"Choose another --results-dir, or make {cs.results_dir} a folder you can write to."
    )


def write_configuration(options: RunOptions) -> Path:
    """Write the resolved options to ``configuration.yaml`` (atomically, at the start).

    :raises RunFolderError: the folder cannot be written.
    """
    target = options.checkpoint_settings.write_path / CONFIGURATION
    text = yaml.safe_dump(options.as_dict(), sort_keys=False)
    try:
        atomic_write(target, lambda f: f.write(text.encode()))
    except OSError as error:
        raise unwritable(options, error) from None
    return target
