"""``behaviors.<name>.stop``: the subscribers of :mod:`evtrain.stopping` a run connects for a
behavior's stop conditions (:class:`~evtrain.trainers.stop_settings.StopSettings`), on the
run's bus, disconnected with the run's other subscribers at its end."""

from __future__ import annotations

from evtrain.bus import Bus
from evtrain.bus.subscription import SubscriptionHandle
from evtrain.stopping import StopOnPlateau, StopOnReward
from evtrain.trainers.stop_settings import StopSettings


def connect_stops(
    bus: Bus, behavior: str, settings: StopSettings | None
) -> list[SubscriptionHandle]:
    """Connect ``behavior``'s stop conditions to ``bus``; their handles (none without any)."""
    if settings is None:
        return []
    handles = []
    if settings.reward is not None:
        reward = StopOnReward(settings.reward, stat=settings.reward_stat, behavior=behavior)
        handles.append(reward.connect(bus))
    plateau = settings.plateau
    if plateau is not None:
        watcher = StopOnPlateau(
            plateau.patience, plateau.min_delta, stat=plateau.stat, behavior=behavior
        )
        handles.append(watcher.connect(bus))
    return handles
