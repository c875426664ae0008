"""PPO's gradient step (Schulman et al. 2017): on one minibatch, the clipped surrogate
objective (the paper's eq. 7), the value loss (regression onto the GAE returns) and the entropy
bonus (eq. 9) make one loss, and one Adam step follows on its clipped gradient.  The epochs and
minibatches around it, and the optimizer step, are :class:`evtrain.trainers.ppo.algorithm.PPO`'s.

The gradients come from :mod:`~evtrain.trainers.ppo.gradients` where it supports the agent
(the same numbers written out by hand, without autograd's per-operation cost), else from
autograd (:func:`autograd_backward`).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from evtrain.trainers.algorithm import Sequences
from evtrain.trainers.loops.recurrent_rollout import evaluate_sequences
from evtrain.trainers.loops.rollout import Minibatch
from evtrain.trainers.networks.policies import ActorCritic
from evtrain.trainers.networks.recurrent import RecurrentActorCritic

__all__ = [
    "Minibatch",
    "autograd_backward",
    "clipped_surrogate_loss",
    "normalized",
]


def normalized(advantages: torch.Tensor) -> torch.Tensor:
    """Advantages shifted and scaled to mean 0 and standard deviation 1."""
    if advantages.numel() < 2:
        return advantages
    return (advantages - advantages.mean()) / (advantages.std() + 1e-8)


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
