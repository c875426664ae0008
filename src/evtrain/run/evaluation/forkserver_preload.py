"""The last module the evaluation workers' forkserver preloads (:func:`evtrain.run.evaluation.
evaluator._context`): importing it freezes every object the server holds by then, torch's among
them (``gc.freeze``), as :func:`evtrain.cli.entry` does before the command exits.

The server lives until the run's process ends, then exits; without the freeze, the collections
of its interpreter's shutdown walk the whole of torch's object graph first (about half a second
of CPU), and whatever reads the run's output to its end (``evtrain learn | tee``) waits for them,
since the server holds the run's stdout and stderr.  The workers it forks inherit the frozen
objects (they end with ``os._exit``, without collections); their own objects are collected as
usual.  Imported nowhere else: in another process the freeze would keep that process's
cyclic garbage of the moment for good.
"""

from __future__ import annotations

import gc

gc.freeze()
