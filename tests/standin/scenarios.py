"""The stand-in's scenes by name (``--scenario NAME``)."""

from __future__ import annotations

import random

from tests.standin.corridor import Corridor
from tests.standin.scenes import SAMPLES, Duel, Mixed, Multi
from tests.standin.world import Scenario

SCENES: dict[str, type[Scenario]] = {
    "corridor": Corridor,
    "crash": Corridor,
    "duel": Duel,
    "mixed": Mixed,
    "multi": Multi,
    **SAMPLES,
}
"""Scenario name -> scene; ``never`` has no scene (it never connects)."""

NAMES = (*SCENES, "never")


def make(name: str, options: dict[str, str], rng: random.Random) -> Scenario:
    if name not in SCENES:
        raise SystemExit(f"unknown scenario {name!r}; expected one of {', '.join(NAMES)}")
    if name == "crash":
        options.setdefault("crash-after", "10")
    return SCENES[name](options, rng)
