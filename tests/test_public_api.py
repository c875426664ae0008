from __future__ import annotations

import evtrain
from evtrain import signals


def test_all_is_sorted_and_complete() -> None:
    # `annotations` is the __future__ feature flag, not an export
    public = {n for n in vars(evtrain) if not n.startswith("_")} - {"annotations"}
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
