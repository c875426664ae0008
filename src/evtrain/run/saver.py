"""A path the docs named before ``evtrain.run`` had rooms; the module is now
:mod:`evtrain.run.checkpoints.saver`."""

from __future__ import annotations

from evtrain.run.checkpoints.saver import BackgroundSaver, snapshot

__all__ = ["BackgroundSaver", "snapshot"]
