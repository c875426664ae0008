"""``evtrain sweep``: Optuna over a config's ``sweep:`` section, each trial a real run.

The modules, in the order a sweep uses them: :mod:`~evtrain.sweep.space` (key paths, a
trial's values, its config), :mod:`~evtrain.sweep.study` (the journal file storage every
worker shares, and which trial runs next), :mod:`~evtrain.sweep.objective` (the bus
subscriber that reports a trial's values and asks the run to stop when the pruner says so),
:mod:`~evtrain.sweep.interrupt` (interrupts around the trials' runs),
:mod:`~evtrain.sweep.trials` (one worker's trials, each through :func:`evtrain.run.learn.learn`)
and :mod:`~evtrain.sweep.results` (the table and ``best.yaml``).  docs/sweeps.md is the
user's side.
"""
