"""PPO's gradient step written out for the MLP actor-critic, without autograd.

A CartPole-sized update is thousands of gradient steps of a 64-unit network on 256 samples:
each matrix product takes microseconds, and autograd's per-operation bookkeeping (recording
the graph, one engine task per node, accumulating into each leaf) costs as much as the
arithmetic.  :func:`ppo_gradients` computes the same loss and writes the same gradients into
the parameters' ``.grad`` by the chain rule, in the operations autograd itself would run:
``aten::tanh_backward`` and ``aten::_log_softmax_backward_data`` for the nonlinearities,
``grad.T @ x`` for the weights (autograd's ``AddmmBackward0``), the mean's
``-1 / B``, and ``minimum``'s and ``clamp``'s masks as ``derivatives.yaml`` defines them.  For
a categorical policy without the entropy bonus the gradients are bit for bit autograd's (the
tests compare them with ``torch.equal``), so training gives the same numbers either way;
elsewhere they agree to float rounding.

:func:`supports` says which agents it applies to (tanh or relu MLPs as
:class:`~evtrain.trainers.networks.policies.ActorCritic` builds them); the trainer falls back to
autograd for anything else.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from typing import cast

import numpy as np
import torch
from torch import nn

from evtrain.trainers.networks.mlp import MLP
from evtrain.trainers.networks.policies import ActorCritic

_LOG_SQRT_2PI = 0.5 * math.log(2.0 * math.pi)
_ACTIVATIONS: dict[Callable[[torch.Tensor], torch.Tensor], str] = {
    torch.tanh: "tanh",
    torch.relu: "relu",
}
"""Hidden-layer nonlinearities whose derivative is written out here."""
_ALIGNMENT = 64
"""Bytes: the alignment of a tensor torch allocates on the CPU."""


@functools.lru_cache(maxsize=8)
def _scalar(value: float) -> torch.Tensor:
    """``torch.tensor(value)``, made once (the loss's coefficients, read and never written)."""
    return torch.tensor(value)


def supports(agent: nn.Module) -> bool:
    """Whether :func:`ppo_gradients` can compute ``agent``'s gradients: an
    :class:`ActorCritic` of vector observations (no image encoders, no action mask) whose
    actor and critic are separate (no ``shared_critic``) plain :class:`MLP` s with tanh or
    relu layers."""
    return (
        type(agent) is ActorCritic
        and not agent.shared_critic
        and agent.mask is None
        and agent.heads.written_out  # a Box or a Discrete, not branches or hybrid actions
        and agent.actor_encoder is None  # vector observations: the MLPs take the row itself
        and agent.critic_encoder is None
        and type(agent.actor) is MLP
        and type(agent.critic) is MLP
        and agent.actor.activation in _ACTIVATIONS
        and agent.critic.activation in _ACTIVATIONS
    )


class _Tape:
    """One MLP's forward pass with the activations the backward pass needs."""

    def __init__(self, mlp: MLP, x: torch.Tensor) -> None:
        self.layers = [*cast("list[nn.Linear]", mlp.hidden), mlp.out]
        self.relu = _ACTIVATIONS[mlp.activation] == "relu"
        self.inputs = [x]
        """The input of each layer: ``x``, then each hidden layer's activation."""
        for layer in self.layers[:-1]:
            # F.linear's own operation, so the values are the forward pass's bit for bit
            z = torch.addmm(layer.bias, self.inputs[-1], layer.weight.t())
            self.inputs.append(z.relu_() if self.relu else z.tanh_())
        last = self.layers[-1]
        self.out = torch.addmm(last.bias, self.inputs[-1], last.weight.t())

    def backward(self, grad_out: torch.Tensor) -> None:
        """Write ``d loss / d parameter`` into each parameter's ``.grad``, given
        ``d loss / d out``."""
        grad = grad_out
        for i in range(len(self.layers) - 1, -1, -1):
            layer, x = self.layers[i], self.inputs[i]
            weight_grad, bias_grad = layer.weight.grad, layer.bias.grad
            assert weight_grad is not None and bias_grad is not None  # flatten_parameters' views
            # AddmmBackward0's product for a weight stored (out, in) and used transposed,
            # written into the gradient buffer itself where that is aligned as a new tensor
            # is (BLAS may take another code path, with other last bits, for other addresses)
            if weight_grad.data_ptr() % _ALIGNMENT == 0:
                torch.mm(grad.t(), x, out=weight_grad)
            else:
                weight_grad.copy_(torch.mm(grad.t(), x))
            torch.sum(grad, 0, out=bias_grad)
            if i > 0:
                grad = torch.mm(grad, layer.weight)
                if self.relu:
                    grad = torch.ops.aten.threshold_backward(grad, x, 0.0)
                else:
                    grad = torch.ops.aten.tanh_backward(grad, x)


def _surrogate_grad(
    new_logprob: torch.Tensor,
    old_logprob: torch.Tensor,
    advantages: torch.Tensor,
    clip_coef: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The clipped surrogate loss ``-E[min(r A, clip(r) A)]`` and its gradient with respect to
    ``new_logprob`` (as :func:`~evtrain.trainers.ppo.clipped_surrogate_loss` computes it).

    The gradient is autograd's, in fewer operations.  Autograd sends the mean's ``-1/B`` to
    ``minimum``'s smaller side (half to each on a tie), and ``clamp`` passes it inside
    ``[1 - eps, 1 + eps]`` only.  Inside, ``clip(r) = r``: the two sides tie, and the halves
    add up to all of it, exactly (``-1/(2B) A`` is ``-1/B A`` halved).  Outside, the clamped
    side passes nothing, so ``r A`` gets all of it when it is the smaller and nothing when it
    is the larger (on a tie outside, ``A = 0``: zero either way).  So the gradient with
    respect to ``r`` is ``-A/B`` where ``r A <= clip(r) A``, else 0, and ``r`` times that with
    respect to ``log r``.  (The zeros' signs may differ from autograd's; they vanish when
    added to the zeros :func:`_categorical` scatters them into.)
    """
    ratio = torch.exp(new_logprob - old_logprob)
    surr1 = ratio * advantages
    surr2 = torch.clamp(ratio, 1.0 - clip_coef, 1.0 + clip_coef) * advantages
    loss = -torch.minimum(surr1, surr2).mean()
    # d loss / d min: the mean's -1/B, as float32 computes it (exact for a power of two)
    grad_min = float(np.float32(-1.0) / np.float32(ratio.numel()))
    grad = (advantages * grad_min).mul_(ratio).masked_fill_(surr1 > surr2, 0.0)
    return loss, grad


def ppo_gradients(
    agent: ActorCritic,
    mb: tuple[torch.Tensor, ...],
    *,
    clip_coef: float,
    vf_coef: float,
    ent_coef: float,
    with_entropy: bool,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """Write the gradient of PPO's loss on minibatch ``mb`` into the agent's ``.grad`` (every
    parameter's: the buffers need no zeroing first).

    The loss is ``pg_loss + vf_coef * v_loss - ent_coef * entropy`` with ``mb`` =
    (obs, actions, old log-probs, advantages, returns, ...), as
    :meth:`~evtrain.trainers.ppo.PPOTrainer._gradient_step` defines it.  Returns
    ``(pg_loss, v_loss, mean entropy)``; the entropy is ``None`` unless ``with_entropy`` or a
    nonzero ``ent_coef`` asks for it.
    """
    mb_obs, mb_actions, mb_logprobs, mb_advantages, mb_returns = mb[:5]
    with torch.no_grad():
        actor = _Tape(agent.actor, mb_obs)
        critic = _Tape(agent.critic, mb_obs)
        # -- value loss: mean squared error, scaled by vf_coef in the total loss
        value = critic.out.squeeze(-1) if critic.out.shape[-1] == 1 else critic.out
        # F.mse_loss's kernel without its Python checks; 1 is "mean" (the stub says str)
        v_loss = torch._C._nn.mse_loss(value, mb_returns, 1)  # type: ignore[arg-type]
        value_grad = torch.ops.aten.mse_loss_backward(_scalar(vf_coef), value, mb_returns, 1)
        critic.backward(value_grad.view_as(critic.out))
        if agent.discrete:
            pg_loss, entropy, logits_grad = _categorical(
                actor.out, mb_actions, mb_logprobs, mb_advantages, clip_coef, ent_coef, with_entropy
            )
        else:
            pg_loss, entropy, logits_grad = _gaussian(
                agent, actor.out, mb_actions, mb_logprobs, mb_advantages, clip_coef, ent_coef,
                with_entropy,
            )  # fmt: skip
        actor.backward(logits_grad)
    return pg_loss, v_loss, entropy


def _categorical(
    logits: torch.Tensor,
    actions: torch.Tensor,
    old_logprob: torch.Tensor,
    advantages: torch.Tensor,
    clip_coef: float,
    ent_coef: float,
    with_entropy: bool,
) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor]:
    """``(pg_loss, mean entropy, d loss / d logits)`` of a categorical policy."""
    log_probs = torch.log_softmax(logits, dim=-1)
    index = actions.unsqueeze(-1)
    new_logprob = log_probs.gather(-1, index).squeeze(-1)
    pg_loss, logprob_grad = _surrogate_grad(new_logprob, old_logprob, advantages, clip_coef)
    log_probs_grad = torch.zeros_like(log_probs).scatter_add_(-1, index, logprob_grad[:, None])
    entropy = None
    if with_entropy or ent_coef > 0.0:
        probs = log_probs.exp()
        per_sample = -(probs * log_probs).sum(-1)
        entropy = per_sample.mean()
        if ent_coef > 0.0:
            # d(-ent_coef * mean(H)) / d log_probs, through H = -sum(p log p) and p = exp(log p)
            grad_h = torch.full_like(per_sample, -ent_coef).div_(per_sample.numel())
            grad_plogp = (-grad_h)[:, None].expand_as(log_probs)
            log_probs_grad += grad_plogp * probs + (grad_plogp * log_probs) * probs
    logits_grad = torch._log_softmax_backward_data(log_probs_grad, log_probs, -1, log_probs.dtype)
    return pg_loss, entropy, logits_grad


def _gaussian(
    agent: ActorCritic,
    mean: torch.Tensor,
    actions: torch.Tensor,
    old_logprob: torch.Tensor,
    advantages: torch.Tensor,
    clip_coef: float,
    ent_coef: float,
    with_entropy: bool,
) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor]:
    """``(pg_loss, mean entropy, d loss / d mean)`` of a diagonal Gaussian policy with a
    state-independent log standard deviation (whose gradient goes to ``agent.log_std.grad``)."""
    log_std = agent.log_std
    inv_std = torch.exp(-log_std)
    diff = actions - mean
    z = diff * inv_std
    new_logprob = (-0.5 * z.square() - log_std - _LOG_SQRT_2PI).sum(-1)
    pg_loss, logprob_grad = _surrogate_grad(new_logprob, old_logprob, advantages, clip_coef)
    # log p = sum(-z^2 / 2 - log_std - c), z = (a - mean) * exp(-log_std)
    grad_terms = logprob_grad[:, None].expand_as(z)
    z_grad = (grad_terms * -0.5) * (2.0 * z)
    mean_grad = -(z_grad * inv_std)
    inv_std_grad = (z_grad * diff).sum(0)
    log_std_grad = -(inv_std_grad * inv_std) - grad_terms.sum(0)
    entropy = None
    if with_entropy or ent_coef > 0.0:
        # the statistic as ActorCritic.evaluate computes it: the same value for every sample
        entropy = (0.5 + _LOG_SQRT_2PI + log_std).sum().expand(mean.shape[0]).mean()
        if ent_coef > 0.0:
            log_std_grad = log_std_grad - ent_coef
    assert log_std.grad is not None  # a view into flatten_parameters' buffer
    log_std.grad.copy_(log_std_grad)
    return pg_loss, entropy, mean_grad
