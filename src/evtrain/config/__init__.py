"""Run options: attrs classes (:mod:`~evtrain.config.options`) structured from plain data by
evtrain's strict cattrs converter (:mod:`~evtrain.config.converter`), against the trainer
types known at the time (:mod:`evtrain.trainers.registry`); every bad key is reported with its
full path (:mod:`~evtrain.config.problems`), a ``default_settings`` one once
(:mod:`~evtrain.config.defaults`).  Structuring is pure: it loads no plugin;
:mod:`evtrain.run.options` does that before structuring a run's config."""
