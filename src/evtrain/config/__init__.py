"""Run options: attrs classes (:mod:`~evtrain.config.options`) structured from plain data by
evtrain's strict cattrs converter (:mod:`~evtrain.config.converter`), against the trainer
types known at the time (:mod:`evtrain.trainers.registry`).  Structuring is pure: it loads no
plugin; :mod:`evtrain.run.options` does that before structuring a run's config."""
