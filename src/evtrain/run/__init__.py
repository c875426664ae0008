"""The run layer: what ``evtrain learn`` does with a config, from the run folder to shutdown.

Its lifecycle, options, wiring and loop are modules here; four rooms hold the rest:
:mod:`~evtrain.run.checkpoints` (the run folder and what is saved in it),
:mod:`~evtrain.run.environments`, :mod:`~evtrain.run.parameters` (``environment_parameters``
and the curriculum) and :mod:`~evtrain.run.evaluation` (evaluations and ``--inference``).
"""
