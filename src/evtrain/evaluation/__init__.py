"""Evaluation of a behavior's policy during training: its settings (``settings``) and the
videos of its episodes (``video``).  The evaluator itself runs in the run layer
(:mod:`evtrain.run.evaluator`)."""
