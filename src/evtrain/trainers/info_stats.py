"""Statistics from the environment's ``info``: the keys a behavior names in ``info_stats``
(:mod:`evtrain.trainers.info_stat_settings`), read from every vector step and recorded through
the trainer's :class:`~evtrain.bus.reporter.StatsReporter` with their aggregation.

A vector environment's ``infos`` hold, per key, one value per sub-environment and a mask
``_key`` of those that reported it (Gymnasium's layout; :class:`~evtrain.multiagent.slots.
AgentSlots` gives each agent slot its agent's PettingZoo info the same way).  Only the info of
a real transition counts, never a reset's:

* ``SAME_STEP`` (Gymnasium): a finished sub-environment's info of its last step is in
  ``infos["final_info"]`` (mask ``_final_info``); the top-level entry of that row is then the
  new episode's reset info, and is skipped.
* ``NEXT_STEP``: the autoreset step (not a transition) carries the reset info; skipped.
* Agent slots: a slot whose agent did not act (``active`` false) reports nothing.

``at: episode_end`` reads only the rows whose episode ended in the step.  A value that is not
a number (a string, an array) is not recorded: one warning per key says so, and the run goes
on.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

import numpy as np
import numpy.typing as npt

from evtrain.bus.reporter import StatsReporter
from evtrain.events.stats import StatsAggregationMethod
from evtrain.trainers.info_stat_settings import InfoStat

logger = logging.getLogger("evtrain.trainers")

FINAL_INFO = "final_info"
"""Gymnasium ``SAME_STEP``: the infos of the finished sub-environments' last steps."""

BoolArray = npt.NDArray[np.bool_]


class InfoStats:
    """Records a behavior's ``info_stats`` from each vector step's ``infos``.

    :param settings: the behavior's ``info_stats`` (``None`` or empty: nothing is read).
    :param reporter: the trainer's reporter.
    :param behavior: names the behavior in the warning about a non-numeric value.
    """

    def __init__(
        self, settings: Mapping[str, InfoStat] | None, reporter: StatsReporter, behavior: str
    ) -> None:
        self.reporter = reporter
        self.behavior = behavior
        self._keys: list[tuple[str, str, StatsAggregationMethod, bool]] = [
            (key, stat.stat_key(key), stat.method, stat.at == "episode_end")
            for key, stat in (settings or {}).items()
        ]
        """(info key, stat key, aggregation, episode ends only) of each configured key."""
        self._warned: set[str] = set()

    def record(self, infos: Mapping[str, Any], dones: BoolArray, valid: BoolArray) -> None:
        """Record the configured keys of one vector step (``dones``: terminated or truncated,
        ``valid``: a real transition, per sub-environment)."""
        if not self._keys:
            return
        final = infos.get(FINAL_INFO)
        finished = infos.get("_" + FINAL_INFO)
        for key, stat, method, at_end in self._keys:
            rows = valid & dones if at_end else valid
            if isinstance(final, Mapping) and finished is not None:  # their own info is there
                self._add(key, stat, method, final, rows & finished)
                rows = rows & ~finished
            self._add(key, stat, method, infos, rows)

    def _add(
        self,
        key: str,
        stat: str,
        method: StatsAggregationMethod,
        infos: Mapping[str, Any],
        rows: BoolArray,
    ) -> None:
        """Add ``infos[key]``'s values of ``rows`` (where its mask says they were reported)."""
        if key not in infos or not rows.any():
            return
        mask = infos.get("_" + key)
        if mask is not None:
            rows = rows & np.asarray(mask, dtype=np.bool_)
        values = self._numbers(key, np.asarray(infos[key])[rows])
        for value in values:
            self.reporter.add_stat(stat, value, method)

    def _numbers(self, key: str, values: npt.NDArray[Any]) -> list[float]:
        """``values`` as floats; a value that is not one number is left out and warned
        about once per key."""
        if values.ndim == 1 and values.dtype.kind in "biuf":
            return values.astype(np.float64).tolist()  # type: ignore[no-any-return]
        numbers: list[float] = []
        for value in values:
            if isinstance(value, (bool, int, float, np.bool_, np.number)):
                numbers.append(float(value))
            elif key not in self._warned:
                self._warned.add(key)
                logger.warning(
                    "%s: info_stats key %r has a value that is not a number (%s %.60r); such "
                    "values are not recorded. Report one number per step under that key, or "
                    "remove it from behaviors.%s.info_stats.",
                    self.behavior,
                    key,
                    type(value).__name__,
                    value,
                    self.behavior,
                )
        return numbers
