"""``--inference``: a trainer runs its deterministic policy and learns nothing
(:meth:`Trainer.begin_inference <evtrain.trainers.base.Trainer.begin_inference>`, then
:meth:`~evtrain.trainers.base.Trainer.run_policy` instead of ``advance``), with the same
bookkeeping as in training."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from torch import nn

from evtrain.export import memory_size_of
from evtrain.trainers.bookkeeping import Bookkeeping
from evtrain.trainers.envs import AutoresetTracker
from evtrain.trainers.networks.action_heads import to_env
from evtrain.trainers.networks.memory import StatefulPolicy
from evtrain.trainers.observations import policy_inputs


def begin(
    policy_module: nn.Module,
    device: torch.device,
    bookkeeping: Bookkeeping,
) -> nn.Module | StatefulPolicy:
    """The policy to run, from the trainer's ``policy_module`` (a recurrent one carrying each
    environment's memory); the steps count afresh from 0 and summaries say ``Is Training`` 0
    from now on.  The caller waited for the update in flight."""
    # Buffers an export view makes (action bounds) start on the CPU; the parameters are
    # the trainer's own, on its device already.
    policy = policy_module.to(device)
    bookkeeping.restart()
    bookkeeping.training = False
    return StatefulPolicy(policy) if memory_size_of(policy) else policy


@torch.no_grad()
def step(
    envs: Any,
    obs: Any,
    policy: nn.Module | StatefulPolicy,
    device: torch.device,
    autoreset: AutoresetTracker,
    bookkeeping: Bookkeeping,
) -> Any:
    """Step every environment once with ``policy`` from observations ``obs``, record the step
    as training does and end the period; returns the next observations."""
    inputs = policy_inputs(envs.single_observation_space, obs).values()
    tensors = [torch.as_tensor(np.asarray(x, dtype=np.float32), device=device) for x in inputs]
    actions = to_env(envs.single_action_space, policy(*tensors).cpu().numpy())
    next_obs, rewards, terminated, truncated, infos = envs.step(actions)
    dones = terminated | truncated
    valid = autoreset.observe(dones, infos)
    bookkeeping.record_step(rewards, dones, valid)
    bookkeeping.record_infos(infos, dones, valid)
    if isinstance(policy, StatefulPolicy):
        # a new episode starts without memory (NEXT_STEP mode: after the autoreset step)
        policy.forget(dones | ~valid)
    bookkeeping.end_period()
    return next_obs
