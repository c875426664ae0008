"""``ConsoleWriter``: ML-Agents' progress line, logged on every rank.

The line, logged at INFO on the ``evtrain`` logger::

    3DBall. Step: 5000. Time Elapsed: 12.345 s. Mean Reward: 1.000. Std of Reward: 0.000. Training.

Decisions where ML-Agents differs or is silent:

* ``Rank: R`` appears only when the job is distributed, i.e. its world size is above 1: the
  process group's size once ``torch.distributed`` is initialised, else the ``WORLD_SIZE``
  variable ``torchrun`` sets.  A one-process ``torchrun`` therefore shows no rank.  ML-Agents
  shows it whenever a rank exists, and only on lines with a reward; here it follows ``Time
  Elapsed`` on every line, because every rank prints and a line must say whose it is.
* Hyperparameters are logged once per category (a resumed or re-sent property repeats nothing),
  and only by rank 0: every rank trains with the same ones.
* Time elapsed counts from the writer's creation on a monotonic clock.
* An evaluation (not in ML-Agents) is one line of its own, with the mean and standard
  deviation of the episodes' returns: ``CartPole. Step: 10000. Evaluation of 10 episodes.
  Mean Return: 475.300 ± 12.100. Mean Episode Length: 475.3.``; ``(stochastic actions)``
  follows the episode count when they were not deterministic.  A video of one says where it
  is: ``CartPole. Step: 10000. Video: results/run/CartPole/videos/....gif.``
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from typing import Any, ClassVar

from evtrain.bus.writers import StatsWriter
from evtrain.events.payloads import (
    EVALUATION_MEAN_LENGTH,
    EVALUATION_MEAN_RETURN,
    ArtifactEvent,
    EvaluationEvent,
)
from evtrain.events.stats import CUMULATIVE_REWARD, StatsPropertyType, StatsSummary
from evtrain.ranks import get_rank, get_world_size
from evtrain_writers._format import render_nested

logger = logging.getLogger("evtrain")

GROUP_REWARD_KEY = "Environment/Group Cumulative Reward"
TRAINING_KEY = "Is Training"
ELO_KEY = "Self-play/ELO"


class ConsoleWriter(StatsWriter):
    """Logs one progress line per summary period, and each behavior's hyperparameters once.

    :param clock: seconds on a monotonic clock; tests pass a fake to fix ``Time Elapsed``.
    """

    ranks: ClassVar[frozenset[int] | None] = None

    def __init__(self, *, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._start = clock()
        self.self_play = False
        """Set by the SELF_PLAY property; adds ``ELO`` to lines that have it."""
        self._hyperparameters_logged: set[str] = set()

    def write_stats(self, category: str, values: Mapping[str, StatsSummary], step: int) -> None:
        """Log the progress line of ``category`` at ``step``."""
        parts = [category, f"Step: {step}", f"Time Elapsed: {self._clock() - self._start:0.3f} s"]
        if get_world_size() > 1:
            parts.append(f"Rank: {get_rank()}")
        is_training = values.get(TRAINING_KEY)
        training = (
            "Training"
            if is_training is not None and is_training.aggregated_value > 0
            else "Not Training"
        )
        reward = values.get(CUMULATIVE_REWARD)
        if reward is not None:
            parts.append(f"Mean Reward: {reward.mean:0.3f}")
            group = values.get(GROUP_REWARD_KEY)
            if group is not None:
                parts.append(f"Mean Group Reward: {group.mean:0.3f}")
            else:
                parts.append(f"Std of Reward: {reward.std:0.3f}")
            parts.append(training)
            elo = values.get(ELO_KEY)
            if self.self_play and elo is not None:
                parts.append(f"ELO: {elo.mean:0.3f}")
        else:
            parts.append("No episode was completed since last summary")
            parts.append(training)
        logger.info("%s.", ". ".join(parts))

    def on_evaluation(self, event: EvaluationEvent) -> None:
        """Log one line per evaluation: its episodes' mean return ± std and mean length, and
        each opponent's stats (a PettingZoo behavior's)."""
        values = event.stats()
        returns, lengths = values[EVALUATION_MEAN_RETURN], values[EVALUATION_MEAN_LENGTH]
        how = "" if event.deterministic else " (stochastic actions)"
        against = "".join(f" {key}: {value:0.3f}." for key, value in event.opponent_stats.items())
        logger.info(
            "%s. Step: %d. Evaluation of %d episodes%s. Mean Return: %0.3f \u00b1 %0.3f. "
            "Mean Episode Length: %0.1f.%s",
            event.category,
            event.step,
            len(event.returns),
            how,
            returns.mean,
            returns.std,
            lengths.mean,
            against,
        )

    def on_artifact(self, event: ArtifactEvent) -> None:
        """Log where an evaluation's video is."""
        if event.kind == "video":
            logger.info("%s. Step: %d. Video: %s.", event.category, event.step, event.path)

    def add_property(self, category: str, property_type: StatsPropertyType, value: Any) -> None:
        """Log hyperparameters (first time per category); SELF_PLAY turns on the ELO part.

        :raises TypeError: SELF_PLAY with a value that is not a bool.
        """
        if property_type is StatsPropertyType.SELF_PLAY:
            if not isinstance(value, bool):
                raise TypeError(f"SELF_PLAY property must be a bool, got {value!r}")
            self.self_play = value
        elif property_type is StatsPropertyType.HYPERPARAMETERS:
            if category in self._hyperparameters_logged or get_rank() != 0:
                return
            self._hyperparameters_logged.add(category)
            logger.info("Hyperparameters for behavior name %s:\n%s", category, render_nested(value))
