"""``--inference``: a trainer runs its deterministic policy and learns nothing
(:meth:`Trainer.begin_inference <evtrain.trainers.base.Trainer.begin_inference>`, then
:meth:`~evtrain.trainers.base.Trainer.run_policy` instead of ``advance``), with the same
bookkeeping as in training."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from torch import nn

from evtrain.export import memory_size_of
from evtrain.trainers.networks.memory import StatefulPolicy
from evtrain.trainers.observations import policy_inputs

if TYPE_CHECKING:
    from evtrain.trainers.base import Trainer


def begin(trainer: Trainer) -> nn.Module | StatefulPolicy:
    """The policy to run (a recurrent one carrying each environment's memory); the steps
    count afresh from 0 and summaries say ``Is Training`` 0 from now on."""
    trainer.wait_for_update()
    # Buffers an export view makes (action bounds) start on the CPU; the parameters are
    # the trainer's own, on its device already.
    policy = trainer.policy_module().to(trainer.device)
    trainer.bookkeeping.restart()
    trainer.bookkeeping.training = False
    return StatefulPolicy(policy) if memory_size_of(policy) else policy


@torch.no_grad()
def step(trainer: Trainer, policy: nn.Module | StatefulPolicy) -> Any:
    """Step every environment once with ``policy``, record the step as training does and end
    the period; returns the next observations."""
    inputs = policy_inputs(trainer.envs.single_observation_space, trainer.next_obs).values()
    obs = [torch.as_tensor(np.asarray(x, dtype=np.float32), device=trainer.device) for x in inputs]
    actions = policy(*obs).cpu().numpy()
    next_obs, rewards, terminated, truncated, infos = trainer.envs.step(actions)
    dones = terminated | truncated
    valid = trainer.autoreset.observe(dones, infos)
    trainer.bookkeeping.record_step(rewards, dones, valid)
    trainer.bookkeeping.record_infos(infos, dones, valid)
    if isinstance(policy, StatefulPolicy):
        # a new episode starts without memory (NEXT_STEP mode: after the autoreset step)
        policy.forget(dones | ~valid)
    trainer.bookkeeping.end_period()
    return next_obs
