"""What the exporters and the check see of a policy module: its memory (a recurrent policy's),
the inputs it is traced with, the outputs it names, its device, and its weights.

A **recurrent** policy says so with a positive integer ``memory_size`` attribute: it takes the
memory ``[B, memory_size]`` after the observations and returns ``(action, next memory)``; its
graph has one input more, :data:`MEMORY_IN`, and one output more, :data:`MEMORY_OUT`.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from typing import Any

import numpy.typing as npt
import torch
from torch import nn

MEMORY_IN = "memory_in"
"""Name of a recurrent policy's memory input."""
MEMORY_OUT = "memory_out"
"""Name of a recurrent policy's memory output."""

Example = torch.Tensor | npt.NDArray[Any] | Mapping[str, torch.Tensor | npt.NDArray[Any]]
"""A batch of observations to export with: one tensor (the graph's one input), or a mapping
from input names to tensors (one graph input each, in the mapping's order)."""

Inputs = dict[str, torch.Tensor]
"""The graph's inputs by name, in order: the arguments of the module's ``forward``."""


@contextlib.contextmanager
def eval_mode(module: nn.Module) -> Iterator[None]:
    """``module.eval()`` for the export, then each submodule's own mode back.

    A policy is exported for inference (the exporter warns about a module in training mode);
    trainers' policy modules share submodules with the networks they train, so those must
    come back in the mode they were in.
    """
    modes = [(m, m.training) for m in module.modules()]
    module.eval()
    try:
        yield
    finally:
        for m, training in modes:
            m.train(training)


def device_of(module: nn.Module) -> torch.device:
    """Where ``module``'s tensors are (the CPU for a module without any)."""
    for tensor in (*module.parameters(), *module.buffers()):
        return tensor.device
    return torch.device("cpu")


def memory_size_of(policy: nn.Module) -> int:
    """The width of ``policy``'s memory, 0 for a feed-forward policy (see the module's docs).

    A recurrent policy says so with a positive ``memory_size`` attribute (an ``int``).
    """
    size = getattr(policy, "memory_size", 0)
    return size if isinstance(size, int) and not isinstance(size, bool) and size > 0 else 0


def traced_inputs(module: nn.Module, example: Inputs) -> Inputs:
    """What the module is traced with: the observations, and a recurrent policy's memory."""
    memory_size = memory_size_of(module)
    if not memory_size:
        return example
    first = next(iter(example.values()))
    return {**example, MEMORY_IN: first.new_zeros((first.shape[0], memory_size))}


def output_names(module: nn.Module, output_name: str) -> list[str]:
    """The graph's outputs: the actions, and a recurrent policy's next memory."""
    return [output_name, MEMORY_OUT] if memory_size_of(module) else [output_name]


def refuse_nonfinite(module: nn.Module) -> None:
    """:raises ValueError: a parameter or buffer of ``module`` is NaN or infinite (a policy
    that acts on NaN is no policy; nothing is written)."""
    named = [*module.named_parameters(), *module.named_buffers()]
    bad = [n for n, t in named if t.is_floating_point() and not bool(torch.isfinite(t).all())]
    if bad:
        raise ValueError(
            f"the policy's {', '.join(bad[:3])}{' and more' if len(bad) > 3 else ''} hold NaN "
            "or infinity, expected finite weights; not exported"
        )
