"""The hyperparameters every on-policy trainer takes: PPO's keys, with ML-Agents' names and
defaults (its ``OnPolicyHyperparamSettings``), shared by
:class:`~evtrain.trainers.settings.PPOSettings` and the group trainers'
:class:`~evtrain.trainers.group_settings.GroupSettings`.

Schedules follow ML-Agents: ``"linear"`` decays a value from its initial setting towards a
floor at ``max_steps``, ``"constant"`` keeps it; when only ``learning_rate_schedule`` is given,
``beta_schedule`` and ``epsilon_schedule`` follow it (ML-Agents' ``check_hyperparam_schedules``).
"""

from __future__ import annotations

import math
from typing import Any, Literal

import attrs
from attrs import validators as v

from evtrain.trainers.limits import MAX_EPOCHS, MAX_EXPERIENCES, at_most

Schedule = Literal["linear", "constant"]
"""How a hyperparameter changes over training: decayed linearly to its floor, or kept."""

SCHEDULES = v.in_(("linear", "constant"))
POSITIVE_INT = [v.instance_of(int), v.gt(0)]
_unit_open = [v.gt(0.0), v.le(1.0)]
_AT_MOST_EXPERIENCES = at_most(MAX_EXPERIENCES, "experiences")
AT_MOST_EPOCHS = at_most(MAX_EPOCHS, "epochs")


def _follow_learning_rate_schedule(instance: Any) -> Schedule:
    # ML-Agents: a schedule left unset takes learning_rate_schedule's value.
    return instance.learning_rate_schedule  # type: ignore[no-any-return]


@attrs.define(kw_only=True)
class OnPolicySettings:
    """PPO's hyperparameter keys and defaults, for every on-policy trainer."""

    batch_size: int = attrs.field(default=1024, validator=[*POSITIVE_INT, _AT_MOST_EXPERIENCES])
    """Experiences per gradient step (minibatch size); the group trainers cut whole group steps
    (every agent of one environment copy at one step) into minibatches."""
    buffer_size: int = attrs.field(default=10240, validator=[*POSITIVE_INT, _AT_MOST_EXPERIENCES])
    """Experiences collected, over all environments (agent slots), before each update.  Any
    positive value is accepted, as in ML-Agents (which validates no relation to
    ``batch_size``): the rollout uses :meth:`rollout_buffer_size`, this rounded up to a
    multiple of ``batch_size`` (so at least one minibatch) and of the number of environments."""
    learning_rate: float = attrs.field(default=3.0e-4, validator=v.gt(0.0))
    """Adam step size at step 0."""
    learning_rate_schedule: Schedule = attrs.field(default="linear", validator=SCHEDULES)
    beta: float = attrs.field(default=5.0e-3, validator=v.ge(0.0))
    """Entropy bonus coefficient."""
    beta_schedule: Schedule = attrs.field(
        default=attrs.Factory(_follow_learning_rate_schedule, takes_self=True), validator=SCHEDULES
    )
    epsilon: float = attrs.field(default=0.2, validator=_unit_open)
    """Clipping range of the probability ratio (``clip_coef`` in the paper's terms); for the
    group trainers also of the critic's change per update (the trust region of ML-Agents' POCA
    value loss)."""
    epsilon_schedule: Schedule = attrs.field(
        default=attrs.Factory(_follow_learning_rate_schedule, takes_self=True), validator=SCHEDULES
    )
    lambd: float = attrs.field(default=0.95, validator=[v.ge(0.0), v.le(1.0)])
    """Lambda of GAE (POCA: of its lambda-returns)."""
    num_epoch: int = attrs.field(default=3, validator=[*POSITIVE_INT, AT_MOST_EPOCHS])
    """Passes over the buffer per update."""
    normalize_advantage: bool = attrs.field(default=True, validator=v.instance_of(bool))
    """Standardise advantages within each minibatch (the group trainers: the acting agents')."""
    max_grad_norm: float = attrs.field(default=0.5, validator=v.gt(0.0))
    """Global gradient-norm clip."""
    vf_coef: float = attrs.field(default=0.5, validator=v.ge(0.0))
    """Weight of the value loss in the total loss."""

    def rollout_buffer_size(self, num_envs: int) -> int:
        """``buffer_size`` rounded up to the next multiple of both ``batch_size`` (whole
        minibatches; a ``buffer_size`` below ``batch_size`` becomes one or more of them) and
        ``num_envs`` (every environment steps ``buffer_size / num_envs`` times per rollout)."""
        step = math.lcm(self.batch_size, num_envs)
        return -(-self.buffer_size // step) * step
