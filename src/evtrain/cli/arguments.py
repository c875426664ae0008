"""Argument types the commands share: each turns a flag's text into its value, or tells
argparse what was expected (argparse then prints ``argument --trials: expected ...``)."""

from __future__ import annotations

import argparse
from collections.abc import Callable

from evtrain.run.options import MAX_INTEGER_DIGITS as MAX_DIGITS


def integer(text: str) -> int:
    """A whole number of at most :data:`MAX_DIGITS` digits (``--seed``, ``--num-envs``)."""
    digits = sum(character.isdigit() for character in text)
    if digits > MAX_DIGITS:
        raise argparse.ArgumentTypeError(
            f"expected a whole number of at most {MAX_DIGITS} digits, got one of {digits:,} "
            f"digits ({text[:MAX_DIGITS]}…)"
        )
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None


def positive_int(text: str) -> int:
    """A whole number of 1 or more (``--trials``, ``--reps``)."""
    value = integer(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number of 1 or more, got {text}")
    return value


def positive_int_at_most(limit: int) -> Callable[[str], int]:
    """A whole number from 1 to ``limit`` (``--reps``)."""

    def check(text: str) -> int:
        value = integer(text)
        if not 1 <= value <= limit:
            raise argparse.ArgumentTypeError(
                f"expected a whole number from 1 to {limit:,}, got {text}"
            )
        return value

    return check


def natural_int(text: str) -> int:
    """A whole number of 0 or more (a seed)."""
    value = integer(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected a whole number of 0 or more, got {text}")
    return value


def fraction(text: str) -> float:
    """A number strictly between 0 and 1 (a confidence level)."""
    value = float(text)
    if not 0 < value < 1:
        raise argparse.ArgumentTypeError(f"expected a number between 0 and 1, got {text}")
    return value
