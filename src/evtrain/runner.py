"""Wiring a run's bus from its options: the bus itself, then writer and subscriber plugins."""

from __future__ import annotations

from evtrain.bus import Bus
from evtrain.plugins import register_stats_writer_plugins, register_subscriber_plugins
from evtrain.settings import RunOptions
from evtrain.subscription import SubscriptionHandle


def make_bus(options: RunOptions) -> Bus:
    """A bus with the delivery settings of ``options.bus``."""
    settings = options.bus
    return Bus(
        capacity=settings.capacity,
        overflow=settings.overflow,
        on_error=settings.on_error,
        max_consecutive_failures=settings.max_consecutive_failures,
        subscribers=settings.subscribers,
    )


def attach_plugins(options: RunOptions, bus: Bus) -> list[SubscriptionHandle]:
    """Connect every stats-writer plugin's writers and let subscriber plugins connect.

    :raises PluginError: a plugin listed in ``plugins.required`` failed.
    """
    handles = [bus.add_writer(writer) for writer in register_stats_writer_plugins(options)]
    register_subscriber_plugins(options, bus)
    return handles
