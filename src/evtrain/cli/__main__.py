"""``python -m evtrain.cli`` is the ``evtrain`` command too (what scripts written when the
command line was one module still run)."""

from __future__ import annotations

from evtrain.cli import entry

entry()
