"""Evaluation of a training run's policies: what ``behaviors.<name>.evaluation`` says
(:mod:`~evtrain.evaluation.settings`) and videos of selected episodes
(:mod:`~evtrain.evaluation.video`).  The evaluator itself runs in the run layer
(:mod:`evtrain.run.evaluation.evaluations`, :mod:`evtrain.run.evaluation.evaluator`)."""
