from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import evtrain
from evtrain import signals
from tests.helpers import python


def test_all_is_sorted_and_complete() -> None:
    # `annotations` is the __future__ feature flag, not an export
    # dir(), not vars(): `learn` and `LearnResult` are imported on first use
    public = {n for n in dir(evtrain) if not n.startswith("_")} - {"annotations", "TYPE_CHECKING"}
    modules = {name for name in public if type(getattr(evtrain, name)).__name__ == "module"}
    assert evtrain.__all__ == sorted(evtrain.__all__)
    assert set(evtrain.__all__) == (public - modules) | {"signals"}


def test_signals_in_lifecycle_order_with_payload_types() -> None:
    assert [(s.name, s.payload_type.__name__) for s in signals.ALL] == [
        ("run_started", "RunStarted"),
        ("hyperparameters", "PropertyEvent"),
        ("stats", "StatsEvent"),
        ("lesson_changed", "LessonChanged"),
        ("evaluation", "EvaluationEvent"),
        ("artifact", "ArtifactEvent"),
        ("save", "SaveEvent"),
        ("export", "ExportEvent"),
        ("run_finished", "RunFinished"),
        ("subscriber_failed", "SubscriberFailed"),
        ("subscriber_stalled", "SubscriberStalled"),
    ]
    assert signals.namespace["stats"] is signals.stats
    assert all(s.__doc__ for s in signals.ALL)


def test_the_documented_module_paths_still_work() -> None:
    """Paths docs, entry points and plugins name: the package tree may change under them."""
    import importlib

    import importlib_metadata

    from evtrain.distributed import Initializer, World, torch_initializer
    from evtrain.export import PolicyExporter
    from evtrain.timers import hierarchical_timer
    from evtrain.trainers.base import Trainer
    from evtrain.trainers.ppo import PPOTrainer
    from evtrain.trainers.sac import SACTrainer
    from evtrain.trainers.settings import PPOSettings, SACSettings, TrainerSettings

    assert isinstance(torch_initializer(), Initializer)
    assert World().size == 1
    assert issubclass(PPOTrainer, Trainer) and issubclass(SACTrainer, Trainer)
    assert PPOSettings().batch_size and SACSettings().batch_size and TrainerSettings()
    assert callable(hierarchical_timer) and callable(PolicyExporter)
    # every entry point evtrain itself declares resolves
    ours = importlib_metadata.distribution("evtrain").entry_points
    assert {(e.group, e.value) for e in ours} >= {
        ("evtrain.initializer", "evtrain.distributed:torch_initializer"),
        ("evtrain.stats_writer", "evtrain_writers:get_default_stats_writers"),
    }
    for entry_point in ours:
        if entry_point.group.startswith("evtrain."):
            assert callable(entry_point.load())
    assert callable(importlib.import_module("evtrain").learn)
    assert callable(evtrain.learn) and evtrain.LearnResult.__name__ == "LearnResult"


WITHOUT_TORCH = textwrap.dedent(
    """
    import sys
    from collections.abc import Mapping

    import evtrain
    from evtrain import Bus, StatsReporter, StatsSummary, StatsWriter, signals

    handled = []
    written = []

    class Writer(StatsWriter):
        def write_stats(self, category: str, values: Mapping[str, StatsSummary], step: int) -> None:
            written.append((category, step, values["Losses/Policy Loss"].mean))

    bus = Bus()
    bus.connect(signals.stats, lambda event: handled.append((event.category, event.step)))
    bus.add_writer(Writer())
    reporter = StatsReporter(bus, "CartPole")
    reporter.add_stat("Losses/Policy Loss", 1.0)
    reporter.add_stat("Losses/Policy Loss", 2.0)
    reporter.write_stats(64)
    bus.close()
    assert handled == [("CartPole", 64)], handled
    assert written == [("CartPole", 64, 1.5)], written
    print(sorted(m for m in ("torch", "tensorboard", "onnx", "gymnasium") if m in sys.modules))
    assert "learn" in dir(evtrain) and "torch" not in sys.modules
    """
)


def test_import_evtrain_and_its_bus_load_no_torch() -> None:
    """A process that only subscribes handlers and writers to a bus never imports torch."""
    result = subprocess.run(
        [sys.executable, "-W", "error", "-c", WITHOUT_TORCH],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout == "[]\n"


def test_the_cli_lists_plugins_and_reports_a_config_error_without_torch(tmp_path: Path) -> None:
    config = tmp_path / "bad.yaml"
    config.write_text("behaviors:\n  CartPole:\n    trainer_type: ppo\n    bogus: 1\n")
    commands = "(main(['plugins']), main(['learn', sys.argv[1]]))"
    code = f"import sys; from evtrain.cli import main; print({commands}, 'torch' in sys.modules)"
    result = python("-c", code, str(config))
    assert result.stdout.endswith("(0, 2) False\n"), result.stderr
    assert "evtrain: error: behaviors.CartPole.bogus: unknown key" in result.stderr
