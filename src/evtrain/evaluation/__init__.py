"""Evaluation of a training run's policies: episodes on environments of their own, the best
model, and videos of selected episodes (:mod:`evtrain.evaluation.video`)."""
