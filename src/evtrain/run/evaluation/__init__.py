"""A run's evaluations and policies played without learning: when evaluations start and
what they emit, the worker process that plays them, their videos, the best model, and
``--inference``."""
