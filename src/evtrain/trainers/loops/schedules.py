"""The scheduled values of an on-policy update (PPO's and the group trainers'): learning rate,
clip range and entropy coefficient, each constant or decayed linearly to its floor at
``max_steps`` (ML-Agents' ``DecayedValue`` with power 1), and how they are reported.

They are taken at update time, from the step count that includes the rollout just collected,
as ML-Agents' optimizer (``get_current_step()`` in ``update``) and SB3 (``progress_remaining``
after ``collect_rollouts``) both do: the first update already runs slightly decayed, the one
that reaches ``max_steps`` at the floor.
"""

from __future__ import annotations

from typing import NamedTuple

from evtrain.bus.reporter import StatsReporter
from evtrain.trainers.base import linear_decay
from evtrain.trainers.on_policy_settings import OnPolicySettings
from evtrain.trainers.optim import LEARNING_RATE_FLOOR

EPSILON_FLOOR = 0.1
"""Where a linear clip-range schedule ends (ML-Agents' value)."""
BETA_FLOOR = 1.0e-5
"""Where a linear entropy-coefficient schedule ends (ML-Agents' value)."""


class Scheduled(NamedTuple):
    """One update's values."""

    learning_rate: float
    epsilon: float
    """The clip range."""
    beta: float
    """The entropy coefficient."""


def scheduled(hp: OnPolicySettings, step: int, max_steps: int) -> Scheduled:
    """``hp``'s values at ``step`` of ``max_steps``."""

    def value(initial: float, schedule: str, floor: float) -> float:
        return initial if schedule == "constant" else linear_decay(initial, floor, step, max_steps)

    return Scheduled(
        value(hp.learning_rate, hp.learning_rate_schedule, LEARNING_RATE_FLOOR),
        value(hp.epsilon, hp.epsilon_schedule, EPSILON_FLOOR),
        value(hp.beta, hp.beta_schedule, BETA_FLOOR),
    )


def report_scheduled(reporter: StatsReporter, values: Scheduled) -> None:
    """``Policy/Learning Rate``, ``Policy/Epsilon`` and ``Policy/Beta``, ML-Agents' names."""
    reporter.add_stat("Policy/Learning Rate", values.learning_rate)
    reporter.add_stat("Policy/Epsilon", values.epsilon)
    reporter.add_stat("Policy/Beta", values.beta)
