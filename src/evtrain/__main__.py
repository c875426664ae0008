"""``python -m evtrain`` is the ``evtrain`` command."""

from __future__ import annotations

import sys

from evtrain.cli import main

sys.exit(main())
