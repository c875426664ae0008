"""The vocabulary of a run: signals, their payloads and ML-Agents' statistics.

This layer knows nothing of delivery: the bus (:mod:`evtrain.bus`) carries these.
"""
