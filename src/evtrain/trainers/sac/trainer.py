"""Soft Actor-Critic (Haarnoja et al. 2018, "SAC: Algorithms and Applications") for ``Box``
actions on a Gymnasium vector environment; ``Discrete`` and ``MultiDiscrete`` actions with the
categorical policy and per-action critics of :mod:`evtrain.trainers.sac.discrete`.

Twin Q networks with Polyak-averaged targets (clipped double-Q), a tanh-squashed Gaussian
policy rescaled to the action bounds, and automatic tuning of the entropy coefficient
``alpha`` (starting at ``init_entcoef``) towards ``target_entropy``.  :class:`SACTrainer` is
the off-policy loop (:mod:`evtrain.trainers.loops.off_policy`: one
:meth:`~evtrain.trainers.loops.off_policy.OffPolicyLoop.advance` steps every environment once,
stores the transitions, and makes one gradient step per ``steps_per_update`` environment steps
once ``buffer_init_steps`` random-action steps have been collected) driving the algorithm
:class:`~evtrain.trainers.sac.algorithm.SAC`.  Intrinsic reward providers (gail, curiosity,
rnd) and behavioral cloning: :mod:`evtrain.trainers.sac.reward_providers`.

With ``threaded: true`` (:mod:`evtrain.trainers.threaded`) the gradient steps due after one
environment step run on the update thread while the environments take the next step, acting
with a copy of the normaliser and actor from before those gradient steps; the transitions of
that step are stored once they are done.  As many gradient steps are taken as unthreaded, at
the same environment steps: only the acting actor lags, by one batch of gradient steps.

With ``network_settings.memory`` the policy and the critics are recurrent and learn from
sequences of a replay buffer of sequences (:mod:`evtrain.trainers.sac.memory`).

An ``action_mask`` observation (:mod:`evtrain.trainers.networks.masks`) masks a ``Discrete``
policy, warm-up's random actions included; a recurrent SAC refuses it (not supported yet).
"""

from __future__ import annotations

from typing import Any

import numpy.typing as npt

from evtrain.timers import hierarchical_timer
from evtrain.trainers.algorithm import AlgorithmSpec
from evtrain.trainers.loops.off_policy import OffPolicyLoop
from evtrain.trainers.sac.algorithm import SAC
from evtrain.trainers.settings import SACSettings


class SACTrainer(OffPolicyLoop):
    """SAC for bounded ``Box``, ``Discrete`` and ``MultiDiscrete`` action spaces: the
    off-policy loop with :class:`~evtrain.trainers.sac.algorithm.SAC`, and its reward
    providers' statistics reported."""

    settings_type = SACSettings
    algorithm: SAC

    def build_algorithm(self, spec: AlgorithmSpec) -> SAC:
        return SAC(spec)

    def _observed(self, *step: npt.NDArray[Any]) -> None:
        providers = self.algorithm.reward_providers
        if providers:
            for key, value in providers.observe(*step):
                self.reporter.add_stat(key, value)

    def _updates_always(self) -> bool:
        return bool(self.algorithm.reward_providers)

    def _after_updates(self, step: int) -> None:
        providers = self.algorithm.reward_providers
        if providers:
            with hierarchical_timer("reward_signals"):
                for key, value in providers.update(step, self.replay, self.rng):
                    self.reporter.add_stat(key, value)
