"""What the optional file writers share: their options, from the run's ``writers:`` section,
and a base class for writers of one file per behavior in the run folder."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar, TypeVar

import attrs

from evtrain.bus.writers import StatsWriter
from evtrain.config.converter import structure
from evtrain.events.stats import StatsSummary

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


@attrs.define(kw_only=True)
class FileWriterOptions:
    """``writers.csv`` and ``writers.jsonl``."""

    hidden_keys: list[str] = attrs.field(factory=list)
    """Stat keys left out of the file."""


class BehaviorFileWriter(StatsWriter):
    """A writer of one file per behavior, ``results/<run_id>/<Behavior>/<file>``, on rank 0.

    :param run_folder: ``results/<run_id>``.
    :param hidden_keys: stat keys left out.
    """

    ranks: ClassVar[frozenset[int] | None] = frozenset({0})

    def __init__(self, run_folder: str | Path, hidden_keys: list[str] | None = None) -> None:
        self.run_folder = Path(run_folder)
        self.hidden_keys = frozenset(hidden_keys or ())

    def visible(self, values: Mapping[str, StatsSummary]) -> Iterator[tuple[str, StatsSummary]]:
        """The summaries of ``values`` that are not hidden."""
        return ((k, s) for k, s in values.items() if k not in self.hidden_keys)


def file_writers(
    run_options: RunOptions, name: str, make: Callable[[Path, list[str]], StatsWriter]
) -> list[StatsWriter]:
    """The registration function of a :class:`BehaviorFileWriter` plugin ``name``: one writer,
    made by ``make(run folder, hidden keys)``, when the run's ``writers:`` asks for it."""
    options = writer_options(run_options, name, FileWriterOptions)
    if options is None:
        return []
    return [make(run_options.checkpoint_settings.write_path, options.hidden_keys)]
