"""What the trainers' optimisers share: Adam as evtrain builds it, and the learning-rate floor.

Each algorithm keeps its own schedules; only the learning rate's floor is common to them.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

LEARNING_RATE_FLOOR = 1.0e-10
"""Where a linear learning-rate schedule ends at ``max_steps`` (ML-Agents' value)."""


class FlatAdam:
    """Adam on one parameter tensor (a :func:`~evtrain.trainers.networks.mlp.flatten_parameters`
    buffer, or a scalar such as SAC's log alpha), without ``torch.optim``.

    The update is ``torch.optim.Adam(fused=True)``'s: on the CPU and CUDA it calls the same
    fused kernel with the same state, so training is bit for bit what it was with
    ``torch.optim.Adam``; elsewhere (e.g. MPS) it runs Adam's textbook in-place steps.  Why
    not ``torch.optim``: its first ``step`` or ``state_dict`` imports ``torch._dynamo``, about
    2 s of a run's start-up on a small machine, and its per-call grouping of tensors by device
    costs more than the arithmetic on one small tensor.

    :meth:`state_dict` has ``torch.optim.Adam``'s layout (one parameter, index 0), so
    checkpoints written with either load into the other.
    """

    def __init__(
        self,
        param: nn.Parameter,
        lr: float,
        *,
        eps: float = 1e-8,
        betas: tuple[float, float] = (0.9, 0.999),
    ) -> None:
        self.param = param
        self.lr = lr
        """The step size of the next :meth:`step` (schedules set it)."""
        self.eps = eps
        self.betas = betas
        self._fused = param.device.type in ("cpu", "cuda")
        scalar = torch.float32 if self._fused else torch.float64
        self.step_count = torch.zeros((), dtype=scalar, device=param.device)
        """Steps taken (a tensor, as the fused kernel reads and torch.optim stores it)."""
        self.exp_avg = torch.zeros_like(param, memory_format=torch.preserve_format)
        self.exp_avg_sq = torch.zeros_like(param, memory_format=torch.preserve_format)

    @torch.no_grad()
    def step(self) -> None:
        """One Adam step from ``param.grad``; nothing when it has no gradient (as torch.optim)."""
        grad = self.param.grad
        if grad is None:
            return
        beta1, beta2 = self.betas
        self.step_count.add_(1)
        if self._fused:
            torch._fused_adam_(
                [self.param],
                [grad],
                [self.exp_avg],
                [self.exp_avg_sq],
                [],
                [self.step_count],
                lr=self.lr,
                beta1=beta1,
                beta2=beta2,
                weight_decay=0.0,
                eps=self.eps,
                amsgrad=False,
                maximize=False,
            )
            return
        step = float(self.step_count)
        self.exp_avg.lerp_(grad, 1 - beta1)
        self.exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
        bias_correction2_sqrt = (1 - beta2**step) ** 0.5
        denom = (self.exp_avg_sq.sqrt() / bias_correction2_sqrt).add_(self.eps)
        self.param.addcdiv_(self.exp_avg, denom, value=-self.lr / (1 - beta1**step))

    def zero_grad(self) -> None:
        """Drop the gradient (``set_to_none``); for a flat buffer use ``zero_grad_`` instead,
        which keeps the views of its module's parameters attached."""
        self.param.grad = None

    def state_dict(self) -> dict[str, Any]:
        """``torch.optim.Adam``'s layout: ``state`` of parameter 0, one ``param_groups`` entry.

        The tensors are copies: a checkpoint written from another thread while training goes
        on holds this step's state, not a later one's.
        """
        state = {}
        if int(self.step_count) > 0:  # torch.optim creates its state at the first step
            state[0] = {
                "step": self.step_count.clone(),
                "exp_avg": self.exp_avg.clone(),
                "exp_avg_sq": self.exp_avg_sq.clone(),
            }
        group = {
            "lr": self.lr,
            "betas": self.betas,
            "eps": self.eps,
            "weight_decay": 0.0,
            "amsgrad": False,
            "maximize": False,
            "foreach": None,
            "capturable": False,
            "differentiable": False,
            "fused": self._fused,
            "decoupled_weight_decay": False,
            "params": [0],
        }
        return {"state": state, "param_groups": [group]}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Take a :meth:`state_dict` (or ``torch.optim.Adam``'s of one parameter), copying it.

        :raises ValueError: it is not the state of one parameter of this shape.
        """
        groups = state["param_groups"]
        if len(groups) != 1 or len(groups[0]["params"]) != 1:
            raise ValueError("expected the optimizer state of exactly one parameter")
        group = groups[0]
        self.lr, self.eps = float(group["lr"]), float(group["eps"])
        self.betas = (float(group["betas"][0]), float(group["betas"][1]))
        saved = state["state"].get(group["params"][0])
        with torch.no_grad():
            if saved is None:
                self.step_count.zero_()
                self.exp_avg.zero_()
                self.exp_avg_sq.zero_()
                return
            for name, tensor in (("exp_avg", self.exp_avg), ("exp_avg_sq", self.exp_avg_sq)):
                if saved[name].shape != tensor.shape:
                    raise ValueError(
                        f"optimizer state {name} has shape {tuple(saved[name].shape)}, the "
                        f"parameter {tuple(tensor.shape)}"
                    )
                tensor.copy_(saved[name])
            self.step_count.fill_(float(saved["step"]))


def make_adam(param: nn.Parameter, lr: float, eps: float = 1e-8) -> FlatAdam:
    """Adam as the trainers use it: :class:`FlatAdam` on one parameter tensor."""
    return FlatAdam(param, lr, eps=eps)
