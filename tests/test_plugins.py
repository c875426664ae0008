from __future__ import annotations

import logging
from pathlib import Path

import importlib_metadata
import pytest

from evtrain import Bus, PluginError, RunOptions, SaveEvent, signals
from evtrain.plugins import (
    STATS_WRITER,
    SUBSCRIBER,
    FailedPlugin,
    LoadedPlugin,
    Plugin,
    classify,
    discover,
    from_entry_point,
    load,
)
from evtrain.run.wiring import register_stats_writer_plugins, register_subscriber_plugins
from tests import plugin_fixtures
from tests.helpers import evtrain_main, python


def plugin(name: str, value: str, group: str = STATS_WRITER) -> Plugin:
    return from_entry_point(importlib_metadata.EntryPoint(name=name, value=value, group=group))


def options(**plugins: list[str]) -> RunOptions:
    return RunOptions.from_dict({"checkpoint_settings": {"run_id": "r1"}, "plugins": plugins})


def test_discover_finds_installed_default_writers_sorted() -> None:
    found = discover()
    default = [p for p in found if p.qualified == "evtrain.stats_writer:default"]
    assert [(p.value, p.distribution) for p in default] == [
        ("evtrain_writers:get_default_stats_writers", "evtrain")
    ]
    assert found == sorted(found, key=lambda p: (p.group, p.name, p.distribution or ""))


def test_load_and_classify() -> None:
    results = [
        load(plugin("good", "tests.plugin_fixtures:good")),
        load(plugin("missing", "no_such_module_xyz:fn")),
        load(plugin("number", "tests.plugin_fixtures:NOT_CALLABLE")),
    ]
    loaded, failed = classify(results)
    assert [r.plugin.name for r in loaded[STATS_WRITER]] == ["good"]
    assert isinstance(results[0], LoadedPlugin) and results[0].obj is plugin_fixtures.good
    assert [(f.plugin.name, f.reason) for f in failed] == [
        ("missing", "import failed: ModuleNotFoundError: No module named 'no_such_module_xyz'"),
        ("number", "tests.plugin_fixtures:NOT_CALLABLE is a int, not a function"),
    ]
    assert all(isinstance(f, FailedPlugin) for f in failed)


def test_broken_plugins_are_logged_and_skipped(caplog: pytest.LogCaptureFixture) -> None:
    found = [
        plugin("default", "tests.plugin_fixtures:good"),
        plugin("missing", "no_such_module_xyz:fn"),
        plugin("raises", "tests.plugin_fixtures:raises"),
        plugin("scalar", "tests.plugin_fixtures:not_a_list"),
        plugin("junk", "tests.plugin_fixtures:list_of_junk"),
    ]
    run_options = options()
    caplog.clear()  # structuring options loads the installed trainer plugins: not under test
    with caplog.at_level(logging.WARNING, logger="evtrain.plugins"):
        writers = register_stats_writer_plugins(run_options, found)
    assert [type(w).__name__ for w in writers] == ["ListWriter"]
    messages = [r.getMessage() for r in caplog.records]
    assert messages[:2] == [
        "Plugin 'missing' (evtrain.stats_writer) failed: import failed: ModuleNotFoundError: "
        "No module named 'no_such_module_xyz'. This plugin will not be used.",
        "Plugin 'raises' (evtrain.stats_writer) failed: raised OSError: disk is read-only. "
        "This plugin will not be used.",
    ]
    assert messages[2].startswith(
        "Plugin 'scalar' (evtrain.stats_writer) failed: returned <tests.plugin_fixtures.ListWriter"
    )
    assert messages[2].endswith(
        "expected a list of StatsWriter instances. This plugin will not be used."
    )
    assert messages[3] == (
        "Plugin 'junk' (evtrain.stats_writer) failed: returned [<built-in function print>], "
        "expected a list of StatsWriter instances. This plugin will not be used."
    )
    assert len(messages) == 4


def test_disabled_plugins_are_not_loaded() -> None:
    found = [plugin("default", "tests.plugin_fixtures:good"), plugin("boom", "nope_xyz:f")]
    writers = register_stats_writer_plugins(options(disabled=["evtrain.stats_writer:boom"]), found)
    assert len(writers) == 1
    assert register_stats_writer_plugins(options(disabled=["default", "boom"]), found) == []


def test_required_plugin_failure_stops_the_run() -> None:
    found = [
        plugin("default", "tests.plugin_fixtures:good"),
        plugin("boom", "tests.plugin_fixtures:raises"),
    ]
    expected = (
        r"Plugin 'boom' \(evtrain.stats_writer\) is required but failed: "
        r"raised OSError: disk is read-only"
    )
    with pytest.raises(PluginError, match=expected):
        register_stats_writer_plugins(options(required=["boom"]), found)
    with pytest.raises(PluginError, match="required plugin 'nosuch' is not installed"):
        register_stats_writer_plugins(options(required=["nosuch"]), found)


def test_keyboard_interrupt_in_a_plugin_is_not_swallowed() -> None:
    found = [
        plugin("default", "tests.plugin_fixtures:good"),
        plugin("ctrl-c", "tests.plugin_fixtures:interrupts"),
    ]
    with pytest.raises(KeyboardInterrupt):
        register_stats_writer_plugins(options(), found)


def test_a_missing_default_entry_point_is_an_install_error(tmp_path: Path) -> None:
    run = RunOptions.from_dict({"checkpoint_settings": {"results_dir": str(tmp_path)}})
    with pytest.raises(PluginError) as info:
        register_stats_writer_plugins(run, found=[])
    assert str(info.value) == (
        "evtrain's default writers are not registered: no 'evtrain.stats_writer:default' entry "
        "point is installed, so the evtrain installation is incomplete or stale. Reinstall it "
        "(pip install evtrain, or pip install -e . in a checkout), or run without them with "
        "plugins.disabled: [evtrain.stats_writer:default]."
    )
    disabled = RunOptions.from_dict({"plugins": {"disabled": ["evtrain.stats_writer:default"]}})
    assert register_stats_writer_plugins(disabled, found=[]) == []


def test_subscriber_plugins_connect_to_the_bus() -> None:
    found = [
        plugin("save", "tests.plugin_fixtures:save_subscriber", SUBSCRIBER),
        plugin("bad", "tests.plugin_fixtures:raises", SUBSCRIBER),
    ]
    plugin_fixtures.saved.clear()
    with Bus() as bus:
        registered = register_subscriber_plugins(options(), bus, found)
        assert [p.name for p in registered] == ["save"]
        bus.emit(signals.save, SaveEvent(category="C", step=7, path=Path("c.pt")))
    assert plugin_fixtures.saved == [7]


def test_cli_lists_plugins_per_group() -> None:
    """Exactly evtrain's own: the tests' interpreter hides other installed plugins."""
    result = python("-m", "evtrain", "plugins")
    assert result.returncode == 0, result.stderr
    assert [line.split() for line in result.stdout.splitlines()] == [
        ["evtrain.stats_writer:"],
        ["csv", "evtrain", "0.1.0", "evtrain_writers.csv_file:get_csv_writers", "loaded"],
        ["default", "evtrain", "0.1.0", "evtrain_writers:get_default_stats_writers", "loaded"],
        ["jsonl", "evtrain", "0.1.0", "evtrain_writers.jsonl:get_jsonl_writers", "loaded"],
        [
            "mlflow",
            "evtrain",
            "0.1.0",
            "evtrain_writers.mlflow_writer:get_mlflow_writers",
            "loaded",
        ],
        [
            "prometheus",
            "evtrain",
            "0.1.0",
            "evtrain_writers.prometheus_writer:get_prometheus_writers",
            "loaded",
        ],
        ["wandb", "evtrain", "0.1.0", "evtrain_writers.wandb_writer:get_wandb_writers", "loaded"],
        ["evtrain.subscriber:"],
        ["(none)"],
        ["evtrain.trainer:"],
        ["ppo", "evtrain", "0.1.0", "evtrain.trainers.ppo:PPOTrainer", "built", "in"],
        ["sac", "evtrain", "0.1.0", "evtrain.trainers.sac:SACTrainer", "built", "in"],
        ["poca", "evtrain", "0.1.0", "evtrain.trainers.poca:POCATrainer", "built", "in"],
        ["mappo", "evtrain", "0.1.0", "evtrain.trainers.mappo:MAPPOTrainer", "built", "in"],
        ["evtrain.initializer:"],
        ["torch", "evtrain", "0.1.0", "evtrain.distributed:torch_initializer", "loaded"],
    ]


PATH_PLUGIN = """
from evtrain import StatsWriter


class PathWriter(StatsWriter):
    def write_stats(self, category, values, step):
        pass


def writers(run_options):
    return [PathWriter()]


EVTRAIN_PLUGINS = {"evtrain.stats_writer": {"from_path": writers}}
"""


def test_plugins_paths_register_through_the_same_functions(tmp_path: Path) -> None:
    (tmp_path / "my_path_plugin.py").write_text(PATH_PLUGIN)
    (tmp_path / "broken_path_plugin.py").write_text("raise ImportError('nope')\n")
    run = RunOptions.from_dict(
        {"plugins": {"paths": [str(tmp_path)], "disabled": ["evtrain.stats_writer:default"]}}
    )
    writers = register_stats_writer_plugins(run)
    assert [type(w).__name__ for w in writers] == ["PathWriter"]
    listing = python(
        "-m", "evtrain", "plugins", "--group", STATS_WRITER, "--plugins", str(tmp_path)
    )
    rows = [line.split() for line in listing.stdout.splitlines()]
    assert ["from_path", f"path:{tmp_path}", "my_path_plugin:writers", "loaded"] in rows
    assert "Plugin module 'broken_path_plugin'" in listing.stderr


@pytest.mark.parametrize("command", ["plugins", "learn"])
def test_plugins_path_that_is_not_a_folder_is_a_config_error(tmp_path: Path, command: str) -> None:
    (tmp_path / "run.yaml").write_text("behaviors: {CartPole: {}}\n")
    (tmp_path / "afile").write_text("")
    config = ["run.yaml"] if command == "learn" else []
    for path, what in [("does/not/exist", "does not exist"), ("afile", "is not a folder")]:
        result = evtrain_main(command, *config, "--plugins", path, cwd=tmp_path)
        assert (result.returncode, result.stdout, result.stderr) == (
            2,
            "",
            f"evtrain: error: plugins.paths: {path!r} {what}; give a folder of plugin modules "
            "(--plugins PATH)\n",
        )
    assert not (tmp_path / "results").exists()
