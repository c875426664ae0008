"""The check every exported graph passes before its file is written: ``onnx.checker``, then
onnxruntime's answers equal to the module's on a fresh batch."""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt
import torch
from torch import nn

from evtrain.export.policy import MEMORY_IN, Inputs, memory_size_of


def session_of(model: str | bytes, threads: int | None = None) -> Any:
    import onnxruntime as ort  # type: ignore[import-untyped]  # ships no type information

    options = ort.SessionOptions()
    # Warnings and below are onnxruntime's notes about its own graph optimisations.
    options.log_severity_level = 3
    if threads is not None:
        options.intra_op_num_threads = threads
    return ort.InferenceSession(model, options, providers=["CPUExecutionProvider"])


def verify(model: bytes, module: nn.Module, example: Inputs) -> None:
    """Raise unless ``model`` is a valid ONNX model computing what ``module`` computes.

    It runs on a batch twice the size of the example (the example, then a shifted copy of
    it): that checks the batch axis is really dynamic, and a graph that baked the example's
    output in as a constant (possible when a forward leaves torch, e.g. through ``.numpy()``)
    fails the comparison.  A recurrent policy runs two steps on it, from a zero memory and
    then from the memory the first step returned, its memory compared as its actions are.
    The tolerance is loose on purpose: it is there to catch a wrong graph, not float rounding
    (TF32 on a GPU differs from onnxruntime's CPU by ~1e-3).
    """
    import onnx

    onnx.checker.check_model(onnx.load_from_string(model))
    batch = {name: torch.cat([x, x * 1.5 + 0.25]) for name, x in example.items()}
    size = len(next(iter(batch.values())))
    session = session_of(model, threads=1)
    feeds = {name: x.cpu().numpy() for name, x in batch.items()}
    memory_size = memory_size_of(module)
    if not memory_size:
        with torch.no_grad():
            expected = module(*batch.values())
        if not isinstance(expected, torch.Tensor):
            raise TypeError(f"a policy must return one tensor of actions, got {type(expected)}")
        _compare(np.asarray(session.run(None, feeds)[0]), expected, "actions", size)
        return
    memory = next(iter(batch.values())).new_zeros((size, memory_size))
    for _ in range(2):
        with torch.no_grad():
            expected = module(*batch.values(), memory)
        if not (isinstance(expected, tuple) and len(expected) == 2):
            raise TypeError(f"a recurrent policy must return (actions, memory), got {expected!r}")
        action, next_memory = expected
        got_action, got_memory = session.run(None, {**feeds, MEMORY_IN: memory.cpu().numpy()})
        _compare(np.asarray(got_action), action, "actions", size)
        _compare(np.asarray(got_memory), next_memory, "memory", size)
        memory = next_memory


def _compare(got: npt.NDArray[Any], expected: torch.Tensor, what: str, size: int) -> None:
    want = expected.detach().cpu().numpy()
    if got.shape != want.shape:
        raise ValueError(
            f"the exported policy returns {what} of shape {got.shape} for a batch of {size}, "
            f"the module {want.shape}; is the batch axis dynamic?"
        )
    exact = np.issubdtype(want.dtype, np.integer) or want.dtype == np.bool_
    if not (np.array_equal(got, want) if exact else np.allclose(got, want, rtol=1e-3, atol=1e-3)):
        raise ValueError(f"the exported policy's {what} differ from the module's")
