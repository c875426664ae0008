"""``behaviors.<name>.stop``: the subscribers of :mod:`evtrain.stopping` a run connects for a
behavior's stop conditions (:class:`~evtrain.trainers.stop_settings.StopSettings`), on the
run's bus, disconnected with the run's other subscribers at its end."""

from __future__ import annotations

import logging

from evtrain.bus import Bus
from evtrain.bus.subscription import SubscriptionHandle
from evtrain.stopping import StopOnPlateau, StopOnReward
from evtrain.trainers.settings import TrainerSettings

logger = logging.getLogger("evtrain.run")

EVALUATION_PREFIX = "Evaluation/"
"""The stats of the ``evaluation`` events: there only when the behavior evaluates."""


def connect_stops(bus: Bus, behavior: str, settings: TrainerSettings) -> list[SubscriptionHandle]:
    """Connect ``behavior``'s stop conditions to ``bus``; their handles (none without any).

    A condition on an ``Evaluation/`` stat of a behavior without ``evaluation`` settings could
    never stop the run: a warning says so."""
    stop = settings.stop
    if stop is None:
        return []
    watchers: list[StopOnReward | StopOnPlateau] = []
    if stop.reward is not None:
        watchers.append(StopOnReward(stop.reward, stat=stop.reward_stat, behavior=behavior))
    plateau = stop.plateau
    if plateau is not None:
        watchers.append(
            StopOnPlateau(plateau.patience, plateau.min_delta, stat=plateau.stat, behavior=behavior)
        )
    evaluates = getattr(settings, "evaluation", None) is not None
    for watcher in watchers:
        if watcher.stat.startswith(EVALUATION_PREFIX) and not evaluates:
            key = "reward_stat" if isinstance(watcher, StopOnReward) else "plateau.stat"
            logger.warning(
                "behaviors.%s.stop.%s is %r, but behavior %s has no evaluation settings: "
                "that stat is never reported, and this condition never stops the run. Set "
                "behaviors.%s.evaluation, or watch a stats key (%s: Environment/Cumulative "
                "Reward).",
                behavior,
                key,
                watcher.stat,
                behavior,
                behavior,
                key,
            )
    return [watcher.connect(bus) for watcher in watchers]
