"""The options of an optional writer, from the run's ``writers:`` section."""

from __future__ import annotations

from typing import TYPE_CHECKING, TypeVar

from evtrain.config.converter import structure

if TYPE_CHECKING:
    from evtrain.config.options import RunOptions

T = TypeVar("T")


def writer_options(run_options: RunOptions, name: str, cls: type[T]) -> T | None:
    """``writers.<name>`` structured as ``cls`` (an attrs class of that writer's options), or
    ``None`` when the run does not ask for the writer.

    :raises ConfigError: naming the bad key under ``writers.<name>``.
    """
    if name not in run_options.writers:
        return None
    return structure(run_options.writers[name] or {}, cls, root=f"writers.{name}")
