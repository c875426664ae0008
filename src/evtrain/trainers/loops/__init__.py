"""The training loops an algorithm plugs its update into: on-policy (rollouts, GAE,
minibatches) and off-policy (replay, warm-up, updates-to-data).  A loop knows no algorithm:
nothing here imports :mod:`evtrain.trainers.ppo` or :mod:`evtrain.trainers.sac` (the layer
test, tests/test_architecture.py, holds it to that)."""
