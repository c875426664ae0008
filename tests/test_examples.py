"""The examples work as their users will run them: as scripts, and installed with pip."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path

from tests.helpers import EXAMPLES, clean_env, python

# -- examples/custom_subscriber.py -----------------------------------------------------------

CUSTOM_SUBSCRIBER_OUTPUT = """\
subscriber_failed: broken raised KeyError: 'Losses/Value Loss' on 'stats' (failure 1, disabled: False)
subscriber_failed: broken raised KeyError: 'Losses/Value Loss' on 'stats' (failure 2, disabled: False)
subscriber_failed: broken raised KeyError: 'Losses/Value Loss' on 'stats' (failure 3, disabled: True)
best mean reward: CartPole 490.0 at step 5000
best mean reward: Walker 12.0 at step 4000
walker_only saw steps [1000, 2000, 3000, 4000, 5000]
dashboard drew steps [1000, 5000]
uploads.txt: CartPole step 5000 -> s3://example-bucket/CartPole-5000.pt
uploads.txt: Walker step 5000 -> s3://example-bucket/Walker-5000.pt
subscriber       delivered  dropped  failed  disabled
best_reward             10        0       0  False
walker_only              5        0       0  False
dashboard                2        3       0  False
broken                   3        7       3  True
failure_report           3        0       0  False
upload                   2        0       0  False
"""  # noqa: E501 - the script's exact output lines


def test_custom_subscriber_example_output(tmp_path: Path) -> None:
    result = python(str(EXAMPLES / "custom_subscriber.py"), "--out", str(tmp_path))
    assert result.returncode == 0, result.stderr
    assert result.stdout == CUSTOM_SUBSCRIBER_OUTPUT
    assert (tmp_path / "uploads.txt").read_text() == (
        "CartPole step 5000 -> s3://example-bucket/CartPole-5000.pt\n"
        "Walker step 5000 -> s3://example-bucket/Walker-5000.pt\n"
    )
    # The isolated failure is logged with its traceback, and the disabling said once.
    assert result.stderr.count("[ERROR] evtrain.bus: Subscriber 'broken' raised handling") == 2
    assert "KeyError: 'Losses/Value Loss'" in result.stderr
    assert result.stderr.count("failed 3 times in a row and is disabled") == 1


# -- examples/plugin, installed with pip -----------------------------------------------------


def test_evtrain_plugins_lists_the_installed_example(plugin_site: Path) -> None:
    result = python("-m", "evtrain", "plugins", env=clean_env(PYTHONPATH=str(plugin_site)))
    # Not the exit status: it also reports the default writers, which are not under test here.
    rows = [line.split() for line in result.stdout.splitlines()]
    ours = [row for row in rows if row[1:2] == ["evtrain-example-plugin"]]
    assert ours == [
        [
            "example_jsonl",
            "evtrain-example-plugin",
            "0.1.0",
            "evtrain_example_plugin.jsonl:get_jsonl_writers",
            "loaded",
        ],
        [
            "save_log",
            "evtrain-example-plugin",
            "0.1.0",
            "evtrain_example_plugin.save_log:connect_save_log",
            "loaded",
        ],
        [
            "dqn",
            "evtrain-example-plugin",
            "0.1.0",
            "evtrain_example_plugin.dqn:trainer_types",
            "loaded",
        ],
        [
            "reward_clip",
            "evtrain-example-plugin",
            "0.1.0",
            "evtrain_example_plugin.reward_clip:trainer_types",
            "loaded",
        ],
        [
            "slurm",
            "evtrain-example-plugin",
            "0.1.0",
            "evtrain_example_plugin.slurm:slurm_initializer",
            "loaded",
        ],
    ]
    lines = result.stdout.splitlines()
    groups = [line for line in lines if not line.startswith(" ")]
    assert groups == [
        "evtrain.stats_writer:",
        "evtrain.subscriber:",
        "evtrain.trainer:",
        "evtrain.initializer:",
    ]
    where = {row[0]: i for i, row in enumerate(rows) if len(row) > 1}
    bounds = [lines.index(group) for group in groups] + [len(lines)]
    expected = (
        ["default", "example_jsonl"],
        ["save_log"],
        ["ppo", "sac", "dqn", "reward_clip"],
        ["slurm", "torch"],
    )
    for group, names in enumerate(expected):
        assert all(bounds[group] < where[name] < bounds[group + 1] for name in names), names
    assert rows[where["ppo"]][3:] == ["evtrain.trainers.ppo:PPOTrainer", "built", "in"]


RUN_WITH_PLUGINS = """\
import json
import sys

from evtrain import ExportEvent, RunOptions, SaveEvent, StatsPropertyType, StatsReporter, signals
from evtrain.run.wiring import attach_plugins, make_bus

options = RunOptions.from_dict(
    {
        "checkpoint_settings": {"run_id": "run1", "results_dir": sys.argv[1]},
        "plugins": json.loads(sys.argv[2]),
    }
)
run = options.checkpoint_settings.write_path
bus = make_bus(options)
try:
    attach_plugins(options, bus)
    reporter = StatsReporter(bus, "CartPole")
    reporter.add_property(StatsPropertyType.HYPERPARAMETERS, {"learning_rate": 0.0003})
    for step, returns in ((1000, (1.0, 2.0)), (2000, (4.0,))):
        for value in returns:
            reporter.add_stat("Environment/Cumulative Reward", value)
        reporter.write_stats(step)
    checkpoint = run / "CartPole" / "CartPole-2000.pt"
    bus.emit(signals.save, SaveEvent(category="CartPole", step=2000, path=checkpoint, reward=4.0))
    model = run / "CartPole.onnx"
    bus.emit(signals.export, ExportEvent(category="CartPole", step=2000, path=model))
finally:
    report = bus.close()
print("clean:", report.clean)
for name, metrics in bus.metrics().items():
    print(name, metrics.delivered, metrics.failed)
"""


def run_with_plugins(site: Path, results: Path, plugins: Mapping[str, list[str]]) -> str:
    result = python(
        "-c",
        RUN_WITH_PLUGINS,
        str(results),
        json.dumps(plugins),
        env=clean_env(PYTHONPATH=str(site)),
    )
    assert result.returncode == 0, result.stderr
    # A skipped plugin would only be logged; nothing may have been skipped.
    assert "will not be used" not in result.stderr, result.stderr
    return result.stdout


NO_DEFAULTS = "evtrain.stats_writer:default"
# Required by qualified name: each group applies an unqualified required name to itself.
JSONL = "evtrain.stats_writer:example_jsonl"
SAVE_LOG = "evtrain.subscriber:save_log"


def test_a_run_loads_the_installed_plugins(plugin_site: Path, tmp_path: Path) -> None:
    stdout = run_with_plugins(
        plugin_site, tmp_path, {"disabled": [NO_DEFAULTS], "required": [JSONL, SAVE_LOG]}
    )
    assert stdout.splitlines() == [
        "clean: True",
        # a writer sees the whole lifecycle: 1 property + 2 stats + the save and the export
        "evtrain_example_plugin.jsonl.JsonLinesWriter 5 0",
        "evtrain_example_plugin.save_log 2 0",
    ]
    run = tmp_path / "run1"
    assert (run / "stats.jsonl").read_text() == (
        '{"category": "CartPole", "hyperparameters": {"learning_rate": 0.0003}}\n'
        '{"category": "CartPole", "step": 1000, "values": {"Environment/Cumulative Reward": '
        '{"mean": 1.5, "std": 0.5, "num": 2, "sum": 3.0, "aggregated": 1.5}}}\n'
        '{"category": "CartPole", "step": 2000, "values": {"Environment/Cumulative Reward": '
        '{"mean": 4.0, "std": 0.0, "num": 1, "sum": 4.0, "aggregated": 4.0}}}\n'
    )
    assert (run / "artifacts.jsonl").read_text() == (
        f'{{"signal": "save", "category": "CartPole", "step": 2000, '
        f'"path": "{run}/CartPole/CartPole-2000.pt", "reward": 4.0}}\n'
        f'{{"signal": "export", "category": "CartPole", "step": 2000, '
        f'"path": "{run}/CartPole.onnx", "format": "onnx"}}\n'
    )


def test_a_disabled_plugin_writes_nothing(plugin_site: Path, tmp_path: Path) -> None:
    stdout = run_with_plugins(
        plugin_site, tmp_path, {"disabled": [NO_DEFAULTS, "example_jsonl"], "required": [SAVE_LOG]}
    )
    assert stdout.splitlines() == ["clean: True", "evtrain_example_plugin.save_log 2 0"]
    assert sorted(p.name for p in (tmp_path / "run1").iterdir()) == ["artifacts.jsonl"]
