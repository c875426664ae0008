"""Rank filters for distributed runs: file writers run on rank 0 only (see
:mod:`evtrain.ranks` for how the rank is found)."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from evtrain.ranks import get_rank


class RankFilter:
    """Wraps a subscriber so it only acts on the given ranks.

    ``Bus.connect`` reads ``ranks`` and does not connect it at all on other ranks (zero cost);
    called directly, it checks the rank at call time.
    """

    def __init__(self, subscriber: Callable[[Any], Any], ranks: Iterable[int]) -> None:
        self.subscriber = subscriber
        self.ranks = frozenset(ranks)

    def __call__(self, payload: Any) -> Any:
        if get_rank() in self.ranks:
            return self.subscriber(payload)
        return None

    def __repr__(self) -> str:
        return f"RankFilter({self.subscriber!r}, ranks={sorted(self.ranks)})"


def rank_zero_only(subscriber: Callable[[Any], Any]) -> RankFilter:
    """``RankFilter(subscriber, {0})``, for anything that writes files."""
    return RankFilter(subscriber, {0})
