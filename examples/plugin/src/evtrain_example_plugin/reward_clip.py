"""A trainer plugin: PPO that clips every reward to ``[-reward_clip, reward_clip]`` before GAE.

Reward clipping is the Atari recipe of Mnih et al. (2015) that PPO's paper kept: it bounds the
scale of the advantages when the environment's rewards vary wildly.  The algorithm is the
built-in PPO; the plugin adds one hyperparameter and one line.  What it shows:

* a trainer type is a :class:`~evtrain.trainers.base.Trainer` subclass whose ``settings_type``
  is an attrs class: ``behaviors.<name>.hyperparameters`` of a behavior with
  ``trainer_type: ppo_reward_clip`` are structured (and checked) as :class:`RewardClipSettings`,
  so a misspelt ``reward_clip`` is a config error naming the key;
* the registration function (:func:`trainer_types`) returns ``{name: class}``; evtrain calls it
  before reading the config's behaviors;
* subclassing a built-in trainer keeps everything evtrain's trainers do, data-parallel
  training under ``torchrun`` included;
* :meth:`~evtrain.trainers.loops.on_policy.OnPolicyTrainer.end_rollout` is a public step of
  the on-policy loop PPO runs on (:class:`~evtrain.trainers.loops.on_policy.OnPolicyTrainer`):
  a plugin changes one step of the loop by overriding it, here to clip the rewards of the
  loop's :attr:`rollout` before they are valued (:mod:`evtrain_example_plugin.a2c` writes a
  whole algorithm for the loop);
* a plugin's own phases appear in ``run_logs/timers.json`` through
  :func:`evtrain.timers.hierarchical_timer` (here ``reward_clip``, under ``advance``).
"""

from __future__ import annotations

import attrs

from evtrain.timers import hierarchical_timer
from evtrain.trainers.algorithm import OnPolicyBatch
from evtrain.trainers.base import Trainer
from evtrain.trainers.ppo import PPOTrainer
from evtrain.trainers.settings import PPOSettings


def _positive(_: object, attribute: attrs.Attribute[float], value: float) -> None:
    if not value > 0:
        raise ValueError(f"{attribute.name}: expected a number above 0, got {value}")


@attrs.define(kw_only=True)
class RewardClipSettings(PPOSettings):
    """PPO's hyperparameters and ``reward_clip``."""

    reward_clip: float = attrs.field(default=1.0, validator=_positive)
    """Rewards are clipped to ``[-reward_clip, reward_clip]`` before advantages are computed."""


class RewardClipPPO(PPOTrainer):
    """PPO on clipped rewards (``trainer_type: ppo_reward_clip``).

    The episode returns it reports are the environment's own, unclipped: clipping changes what
    the agent learns from, not what it is measured by.
    """

    settings_type = RewardClipSettings

    def end_rollout(self) -> OnPolicyBatch | None:
        clip = self.hp.reward_clip  # type: ignore[attr-defined]  # RewardClipSettings
        with hierarchical_timer("reward_clip"):
            rewards = self.rollout.rewards
            rewards.clip(-clip, clip, out=rewards)
        return super().end_rollout()


def trainer_types() -> dict[str, type[Trainer]]:
    """Registration function of the ``evtrain.trainer`` entry point ``reward_clip``: this
    module's trainer, and A2C on the on-policy loop (:mod:`evtrain_example_plugin.a2c`)."""
    from evtrain_example_plugin.a2c import A2CTrainer

    return {"ppo_reward_clip": RewardClipPPO, "a2c": A2CTrainer}
