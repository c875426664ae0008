"""Argument types the commands share: each turns a flag's text into its value, or tells
argparse what was expected (argparse then prints ``argument --trials: expected ...``)."""

from __future__ import annotations

import argparse


def positive_int(text: str) -> int:
    """A whole number of 1 or more (``--trials``, ``--reps``)."""
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number of 1 or more, got {text}")
    return value


def natural_int(text: str) -> int:
    """A whole number of 0 or more (a seed)."""
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected a whole number of 0 or more, got {text}")
    return value


def fraction(text: str) -> float:
    """A number strictly between 0 and 1 (a confidence level)."""
    value = float(text)
    if not 0 < value < 1:
        raise argparse.ArgumentTypeError(f"expected a number between 0 and 1, got {text}")
    return value
