"""The ``evtrain`` process's start-up: its imports without the cyclic garbage collector.

Importing torch makes some 190,000 objects the collector tracks, and the collections its
allocations trigger walk them again and again: three full collections and some 400 younger
ones during ``import torch, gymnasium`` and evtrain's modules, 0.15-0.25 s of a start that
takes 1.3-1.6 s on a small machine.  :func:`evtrain.cli.entry` therefore switches the
collector off (:func:`pause_collector`) before the command imports what it needs (only
``evtrain.cli`` itself, without torch, is imported before it), and the command switches it
back on once its heavy modules are in (:func:`resume_collector`: ``evtrain learn`` right after
torch, which it imports only once the config is known good; the other commands before they
start).  Resuming first freezes what is alive (``gc.freeze``), so the run's own collections skip
those long-lived objects too; what the imports left as cyclic garbage (about 1.3 MB) is kept
for the life of the process.  ``evtrain.cli.main`` called from Python changes nothing of the
caller's collector.
"""

from __future__ import annotations

import gc

_paused = False


def pause_collector() -> None:
    """Switch the cyclic garbage collector off until :func:`resume_collector` (if it was on)."""
    global _paused
    if gc.isenabled():
        gc.disable()
        _paused = True


def resume_collector() -> None:
    """Freeze every object alive out of the collector's reach, then switch it back on, if
    :func:`pause_collector` switched it off; otherwise nothing."""
    global _paused
    if _paused:
        _paused = False
        gc.freeze()
        gc.enable()
