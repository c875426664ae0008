"""PPO's gradient step (Schulman et al. 2017): on one minibatch, the clipped surrogate
objective (the paper's eq. 7), the value loss (regression onto the GAE returns) and the entropy
bonus (eq. 9) make one loss, and one Adam step follows on its clipped gradient.  The epochs and
minibatches around it are :meth:`evtrain.trainers.ppo.algorithm.PPO.update`'s.

The gradients come from :mod:`~evtrain.trainers.ppo.gradients` where it supports the agent
(the same numbers written out by hand, without autograd's per-operation cost), else from
autograd (:func:`autograd_backward`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F

from evtrain.trainers.algorithm import Sequences
from evtrain.trainers.loops.on_policy import Minibatch, normalized
from evtrain.trainers.loops.recurrent_rollout import evaluate_sequences
from evtrain.trainers.networks.mlp import clip_grad_norm_, zero_grad_
from evtrain.trainers.networks.policies import ActorCritic
from evtrain.trainers.networks.recurrent import RecurrentActorCritic
from evtrain.trainers.ppo.gradients import ppo_gradients

if TYPE_CHECKING:
    from evtrain.trainers.ppo.algorithm import PPO

__all__ = [
    "Minibatch",
    "autograd_backward",
    "clipped_surrogate_loss",
    "gradient_step",
    "normalized",
]


def clipped_surrogate_loss(
    new_logprob: torch.Tensor,
    old_logprob: torch.Tensor,
    advantages: torch.Tensor,
    clip_coef: float,
) -> torch.Tensor:
    """The negated clipped surrogate objective ``-E[min(r A, clip(r, 1-eps, 1+eps) A)]``.

    ``r = exp(new_logprob - old_logprob)`` is the probability ratio of the taken actions.
    """
    ratio = torch.exp(new_logprob - old_logprob)
    surr1 = ratio * advantages
    surr2 = torch.clamp(ratio, 1.0 - clip_coef, 1.0 + clip_coef) * advantages
    return -torch.min(surr1, surr2).mean()


def gradient_step(
    ppo: PPO,
    mb: Minibatch,
    sequences: Sequences | None,
    step: int,
    clip_coef: float,
    ent_coef: float,
    *,
    with_entropy: bool,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """One optimizer step of ``ppo`` on minibatch ``mb`` (with memory, of ``sequences``);
    returns ``pg_loss``, ``v_loss`` and the mean entropy (``None`` unless ``with_entropy``),
    detached.  ``step`` is what the non-finite guard reports.

    The gradients come from :mod:`~evtrain.trainers.ppo.gradients` where it supports the
    agent (the same numbers, without autograd's per-operation cost), else from autograd.
    """
    flat_params, hp = ppo.flat_params, ppo.hp
    zero_grad_(flat_params)
    if ppo.analytic_gradients and isinstance(ppo.agent, ActorCritic):
        pg_loss, v_loss, entropy_loss = ppo_gradients(
            ppo.agent,
            mb,
            clip_coef=clip_coef,
            vf_coef=hp.vf_coef,
            ent_coef=ent_coef,
            with_entropy=with_entropy,
        )
    else:
        pg_loss, v_loss, entropy_loss = autograd_backward(
            ppo.agent,
            mb,
            sequences,
            clip_coef=clip_coef,
            vf_coef=hp.vf_coef,
            ent_coef=ent_coef,
            with_entropy=with_entropy,
        )
    ppo.spec.world.average_(flat_params.grad)  # data parallel: the mean over ranks
    grad_norm = clip_grad_norm_(flat_params, hp.max_grad_norm)
    if ppo.spec.finite.update(step, pg_loss + v_loss, grad_norm):
        ppo.optimizer.step()
    return pg_loss, v_loss, entropy_loss


def autograd_backward(
    agent: ActorCritic | RecurrentActorCritic,
    mb: Minibatch,
    sequences: Sequences | None,
    *,
    clip_coef: float,
    vf_coef: float,
    ent_coef: float,
    with_entropy: bool,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """``agent``'s loss on minibatch ``mb`` (with memory, of ``sequences``) and its gradients
    through autograd (into the zeroed ``.grad`` buffers); returns the detached ``pg_loss``,
    ``v_loss`` and mean entropy."""
    mb_obs, mb_actions, mb_logprobs, mb_advantages, mb_returns = mb[:5]
    if isinstance(agent, ActorCritic):
        newlogprob, entropy, newvalue = agent.evaluate(
            mb_obs, mb_actions, entropy=with_entropy, entropy_grad=ent_coef > 0.0
        )
    else:  # with memory: the minibatch's sequences, from their recorded memories
        if sequences is None:
            raise RuntimeError("a recurrent agent trains on sequences: the batch has none")
        newlogprob, entropy, newvalue = evaluate_sequences(
            agent, sequences, mb_actions, entropy=with_entropy, entropy_grad=ent_coef > 0.0
        )

    # -- policy loss: clipped surrogate objective (paper eq. 7)
    pg_loss = clipped_surrogate_loss(newlogprob, mb_logprobs, mb_advantages, clip_coef)
    # -- value loss: regression onto the GAE returns
    v_loss = F.mse_loss(newvalue, mb_returns)
    loss = pg_loss + vf_coef * v_loss
    # -- entropy bonus (paper eq. 9)
    entropy_loss = None
    if entropy is not None:
        entropy_loss = entropy.mean()
        if ent_coef > 0.0:
            loss = loss - ent_coef * entropy_loss

    torch.autograd.backward(loss)
    return (
        pg_loss.detach(),
        v_loss.detach(),
        None if entropy_loss is None else entropy_loss.detach(),
    )
