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
        ("save", "SaveEvent"),
        ("export", "ExportEvent"),
        ("run_finished", "RunFinished"),
        ("subscriber_failed", "SubscriberFailed"),
    ]
    assert signals.namespace["stats"] is signals.stats
    assert all(s.__doc__ for s in signals.ALL)
