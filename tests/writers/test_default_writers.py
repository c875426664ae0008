"""The ``evtrain.stats_writer`` entry point ``default`` and the writers it returns."""

from __future__ import annotations

import types
from pathlib import Path

import importlib_metadata
import pytest

import evtrain_writers
from evtrain import RunOptions
from evtrain.run.wiring import register_stats_writer_plugins
from evtrain_writers import (
    ConsoleWriter,
    GaugeWriter,
    TensorboardWriter,
    get_default_stats_writers,
)


def test_public_names() -> None:
    assert evtrain_writers.__all__ == sorted(evtrain_writers.__all__)
    public = {name for name in vars(evtrain_writers) if not name.startswith("_")}
    # submodules (imported by whichever test or plugin loaded them) and typing helpers
    modules = {n for n in public if isinstance(getattr(evtrain_writers, n), types.ModuleType)}
    assert public - modules - {"annotations", "TYPE_CHECKING"} == set(evtrain_writers.__all__)


def test_registered_as_the_default_entry_point() -> None:
    (entry_point,) = importlib_metadata.entry_points(group="evtrain.stats_writer", name="default")
    assert entry_point.value == "evtrain_writers:get_default_stats_writers"
    assert entry_point.load() is get_default_stats_writers


@pytest.mark.parametrize("resume", [False, True])
def test_default_writers(tmp_path: Path, resume: bool) -> None:
    options = RunOptions.from_dict(
        {
            "checkpoint_settings": {
                "run_id": "run",
                "results_dir": str(tmp_path),
                "resume": resume,
            }
        }
    )
    tensorboard, gauge, console = get_default_stats_writers(options)

    assert isinstance(tensorboard, TensorboardWriter)
    assert tensorboard.base_dir == tmp_path / "run"
    assert tensorboard.clear_past_data is not resume
    assert tensorboard.hidden_keys == frozenset({"Is Training", "Step"})
    assert tensorboard.hparams
    assert isinstance(gauge, GaugeWriter)
    assert gauge.path == tmp_path / "run" / "run_logs" / "timers.json"
    assert isinstance(console, ConsoleWriter)
    for writer in (tensorboard, gauge, console):
        writer.close()


def test_a_plugin_folder_can_replace_them_without_hparams(tmp_path: Path) -> None:
    # The recipe of docs/trackers.md, "TensorBoard hyperparameters".
    (tmp_path / "plugins").mkdir()
    (tmp_path / "plugins" / "evtrain_test_no_hparams.py").write_text(
        "from evtrain_writers import get_default_stats_writers\n"
        "def writers(run_options):\n"
        "    return get_default_stats_writers(run_options, hparams=False)\n"
        'EVTRAIN_PLUGINS = {"evtrain.stats_writer": {"no_hparams": writers}}\n'
    )
    options = RunOptions.from_dict(
        {
            "checkpoint_settings": {"run_id": "run", "results_dir": str(tmp_path / "results")},
            "plugins": {
                "paths": [str(tmp_path / "plugins")],
                "disabled": ["evtrain.stats_writer:default"],
            },
        }
    )
    tensorboard, gauge, console = register_stats_writer_plugins(options)

    assert isinstance(tensorboard, TensorboardWriter)
    assert not tensorboard.hparams
    assert (type(gauge), type(console)) == (GaugeWriter, ConsoleWriter)
    for writer in (tensorboard, gauge, console):
        writer.close()
