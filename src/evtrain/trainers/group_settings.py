"""The hyperparameters of the group trainers, ``trainer_type: poca`` and ``trainer_type: mappo``
(re-exported by :mod:`evtrain.trainers.settings`), and what they refuse.

Both take PPO's keys, as ML-Agents' ``POCASettings`` does (its own class, with PPO's
``OnPolicyHyperparamSettings`` fields and defaults, and without ``shared_critic``: the critic of
a group trainer is shared by construction), plus evtrain's own PPO keys ``normalize_advantage``,
``max_grad_norm`` and ``vf_coef``.  The trainers are in :mod:`evtrain.trainers.poca` and
:mod:`evtrain.trainers.mappo`.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any, Literal

import attrs
from attrs import validators as v

_schedule = v.in_(("linear", "constant"))
_positive_int = [v.instance_of(int), v.gt(0)]

GROUP_TRAINER_TYPES = ("poca", "mappo")
"""The trainer types whose critic sees a group of agents."""


def _follow_learning_rate_schedule(instance: Any) -> Literal["linear", "constant"]:
    # ML-Agents: a schedule left unset takes learning_rate_schedule's value.
    return instance.learning_rate_schedule  # type: ignore[no-any-return]


@attrs.define(kw_only=True)
class GroupSettings:
    """What :class:`POCASettings` and :class:`MAPPOSettings` share: PPO's keys and defaults."""

    batch_size: int = attrs.field(default=1024, validator=_positive_int)
    """Agent experiences per gradient step (minibatch size).  The update cuts whole group
    steps (every agent of one environment copy at one step) into minibatches."""
    buffer_size: int = attrs.field(default=10240, validator=_positive_int)
    """Agent experiences (over all agent slots) collected before each update, rounded up as
    PPO's is (:meth:`rollout_buffer_size`)."""
    learning_rate: float = attrs.field(default=3.0e-4, validator=v.gt(0.0))
    """Adam step size at step 0 (policy and critic alike)."""
    learning_rate_schedule: Literal["linear", "constant"] = attrs.field(
        default="linear", validator=_schedule
    )
    beta: float = attrs.field(default=5.0e-3, validator=v.ge(0.0))
    """Entropy bonus coefficient."""
    beta_schedule: Literal["linear", "constant"] = attrs.field(
        default=attrs.Factory(_follow_learning_rate_schedule, takes_self=True), validator=_schedule
    )
    epsilon: float = attrs.field(default=0.2, validator=[v.gt(0.0), v.le(1.0)])
    """Clipping range of the probability ratio, and of the critic's change per update (the
    trust region of ML-Agents' POCA value loss)."""
    epsilon_schedule: Literal["linear", "constant"] = attrs.field(
        default=attrs.Factory(_follow_learning_rate_schedule, takes_self=True), validator=_schedule
    )
    lambd: float = attrs.field(default=0.95, validator=[v.ge(0.0), v.le(1.0)])
    """Lambda of the returns (POCA's lambda-returns, MAPPO's GAE)."""
    num_epoch: int = attrs.field(default=3, validator=_positive_int)
    """Passes over the buffer per update."""
    normalize_advantage: bool = attrs.field(default=True, validator=v.instance_of(bool))
    """Standardise the acting agents' advantages within each minibatch."""
    max_grad_norm: float = attrs.field(default=0.5, validator=v.gt(0.0))
    """Global gradient-norm clip (policy and critic together)."""
    vf_coef: float = attrs.field(default=0.5, validator=v.ge(0.0))
    """Weight of the critic's loss in the total loss (ML-Agents' fixed 0.5)."""

    def rollout_buffer_size(self, num_envs: int) -> int:
        """``buffer_size`` rounded up to a multiple of ``batch_size`` and of the number of
        agent slots ``num_envs`` (PPO's rule)."""
        step = math.lcm(self.batch_size, num_envs)
        return -(-self.buffer_size // step) * step


@attrs.define(kw_only=True)
class POCASettings(GroupSettings):
    """MA-POCA hyperparameters (``trainer_type: poca``): ML-Agents' ``POCASettings``."""


@attrs.define(kw_only=True)
class MAPPOSettings(GroupSettings):
    """MAPPO hyperparameters (``trainer_type: mappo``): ML-Agents' ``MAPPOSettings``."""


def group_trainer_refusals(
    trainer_type: str,
    *,
    memory: object | None,
    intrinsic: Iterable[str],
    behavioral_cloning: object | None,
) -> None:
    """Refuse what the group trainers do not support, naming the key (called by
    :class:`~evtrain.trainers.settings.TrainerSettings` as it is built).

    :raises ValueError: ``"<key>: ..."``, which the config layer prefixes with the behavior's
        path.
    """
    if trainer_type not in GROUP_TRAINER_TYPES:
        return
    if memory is not None:
        raise ValueError(
            f"network_settings: memory (a recurrent policy and critic) with trainer_type "
            f"{trainer_type} is not supported by evtrain yet; remove memory, or use "
            "trainer_type: ppo"
        )
    signals = list(intrinsic)
    if signals:
        raise ValueError(
            f"reward_signals: {', '.join(signals)} with trainer_type {trainer_type} is not "
            "supported by evtrain (the group's returns are extrinsic only); remove "
            f"reward_signals.{signals[0]}, or use trainer_type: ppo"
        )
    if behavioral_cloning is not None:
        raise ValueError(
            f"behavioral_cloning: with trainer_type {trainer_type} is not supported by evtrain "
            "yet; remove behavioral_cloning, or use trainer_type: ppo"
        )
