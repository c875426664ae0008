"""The hyperparameters of the group trainers, ``trainer_type: poca`` and ``trainer_type: mappo``
(re-exported by :mod:`evtrain.trainers.settings`), and what they refuse.

Both take PPO's keys, as ML-Agents' ``POCASettings`` does (its own class, with PPO's
``OnPolicyHyperparamSettings`` fields and defaults, and without ``shared_critic``: the critic of
a group trainer is shared by construction), plus evtrain's own PPO keys ``normalize_advantage``,
``max_grad_norm`` and ``vf_coef``.  The trainers are in :mod:`evtrain.trainers.poca` and
:mod:`evtrain.trainers.mappo`.
"""

from __future__ import annotations

from collections.abc import Iterable

import attrs

from evtrain.trainers.on_policy_settings import OnPolicySettings

GROUP_TRAINER_TYPES = ("poca", "mappo")
"""The trainer types whose critic sees a group of agents."""


@attrs.define(kw_only=True)
class GroupSettings(OnPolicySettings):
    """What :class:`POCASettings` and :class:`MAPPOSettings` share: PPO's keys and defaults
    (:class:`~evtrain.trainers.on_policy_settings.OnPolicySettings`), without ``shared_critic``."""


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
