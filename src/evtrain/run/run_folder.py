"""The run folder: ``results/<run_id>/``, checked against ``--resume``/``--force`` and stamped
with the resolved options before the first step."""

from __future__ import annotations

import logging
import shutil
from pathlib import Path

import yaml

from evtrain.atomic import atomic_write
from evtrain.config.options import RunOptions
from evtrain.errors import RunFolderError

logger = logging.getLogger("evtrain")

CONFIGURATION = "configuration.yaml"


def prepare_run_folder(options: RunOptions) -> Path:
    """Create (or reuse, or clear) ``write_path`` as the flags say; return it.

    :raises RunFolderError: the run exists and neither ``resume`` nor ``force`` is set;
        ``resume`` is set and there is nothing to resume; ``initialize_from`` names a run
        that does not exist; the folder cannot be written.
    """
    cs = options.checkpoint_settings
    path = cs.write_path
    exists = path.is_dir() and any(path.iterdir())
    if cs.resume and cs.force:
        raise RunFolderError("--resume and --force contradict each other: choose one")
    if cs.resume and not exists:
        raise RunFolderError(
            f"cannot resume run {cs.run_id!r}: {path} does not exist. Start it without --resume."
        )
    if exists and not (cs.resume or cs.force or cs.inference):
        raise RunFolderError(
            f"run {cs.run_id!r} already exists in {path}. Use --resume to continue it, --force "
            "to overwrite it, or choose another --run-id."
        )
    init = cs.maybe_init_path
    if init is not None and not init.is_dir():
        raise RunFolderError(
            f"--initialize-from {cs.initialize_from!r}: {init} does not exist; give the run id "
            f"of an earlier run in {cs.results_dir}"
        )
    try:
        if cs.force and exists:
            logger.warning("--force: removing the earlier run in %s", path)
            shutil.rmtree(path)
        path.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise unwritable(options, error) from None
    return path


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
