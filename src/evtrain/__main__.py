"""``python -m evtrain`` is the ``evtrain`` command."""

from __future__ import annotations

from evtrain.cli import entry

entry()
