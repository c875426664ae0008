"""Export a policy to ONNX, check that the file is right, and run exported policies.

A policy is a :class:`torch.nn.Module` from raw float32 observations ``[B, *obs_shape]`` to
deterministic actions (a trainer's ``policy_module()``).  :func:`export_onnx` writes it with
PyTorch's ``torch.export``-based ONNX exporter (the default since PyTorch 2.9; the TorchScript
exporter warns ``DeprecationWarning``, an error under our test settings) with a dynamic batch
axis, checks the model, runs it in onnxruntime against the module itself, and only then puts
the file in place atomically.  :func:`onnx_policy` runs an exported file (``--inference``).

``onnx``, ``onnxscript`` (which the exporter needs) and ``onnxruntime`` are imported only when
a function here is called: together they cost seconds of import time a run without export does
not need to pay.
"""

from __future__ import annotations

import contextlib
import logging
import re
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import torch
from torch import nn

from evtrain.atomic import StrPath, atomic_write

logger = logging.getLogger("evtrain.export")

_LEAFSPEC_WARNING = re.escape("`isinstance(treespec, LeafSpec)` is deprecated")
_TORCHVISION_NOTICE = "torchvision is not installed"
_REGISTRATION_LOGGER = "torch.onnx._internal.exporter._registration"


class _DropTorchvisionNotice(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith(_TORCHVISION_NOTICE)


@contextlib.contextmanager
def _quiet_exporter() -> Iterator[None]:
    """Silence the two things the exporter says about itself, not about our model.

    * PyTorch 2.13's ``ExportedProgram.run_decompositions`` deep-copies its module call graph,
      whose ``LeafSpec`` objects warn ``FutureWarning`` on construction: the warning is about
      torch's own code, and under ``-W error`` it aborts every export.  Only that message is
      ignored.  ``catch_warnings`` swaps the process-wide filter list, so a filter another
      thread installs during an export is lost; nothing in evtrain installs filters on threads.
    * Each export builds the operator registry anew, which logs four "torchvision is not
      installed" lines: noise at every checkpoint for a policy that uses no torchvision op.
    """
    registration = logging.getLogger(_REGISTRATION_LOGGER)
    notice_filter = _DropTorchvisionNotice()
    registration.addFilter(notice_filter)
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=_LEAFSPEC_WARNING, category=FutureWarning)
            yield
    finally:
        registration.removeFilter(notice_filter)


@contextlib.contextmanager
def _eval_mode(module: nn.Module) -> Iterator[None]:
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


def _device_of(module: nn.Module) -> torch.device:
    for tensor in (*module.parameters(), *module.buffers()):
        return tensor.device
    return torch.device("cpu")


def _session(model: str | bytes, threads: int | None = None) -> Any:
    import onnxruntime as ort  # type: ignore[import-untyped]  # ships no type information

    options = ort.SessionOptions()
    # Warnings and below are onnxruntime's notes about its own graph optimisations.
    options.log_severity_level = 3
    if threads is not None:
        options.intra_op_num_threads = threads
    return ort.InferenceSession(model, options, providers=["CPUExecutionProvider"])


def _verify(model: bytes, module: nn.Module, example: torch.Tensor, input_name: str) -> None:
    """Raise unless ``model`` is a valid ONNX model computing what ``module`` computes.

    It runs on a batch twice the size of the example (the example, then a shifted copy of
    it): that checks the batch axis is really dynamic, and a graph that baked the example's
    output in as a constant (possible when a forward leaves torch, e.g. through ``.numpy()``)
    fails the comparison.  The tolerance is loose on purpose: it is there to catch a wrong
    graph, not float rounding (TF32 on a GPU differs from onnxruntime's CPU by ~1e-3).
    """
    import onnx

    onnx.checker.check_model(onnx.load_from_string(model))
    batch = torch.cat([example, example * 1.5 + 0.25])
    with torch.no_grad():
        expected = module(batch)
    if not isinstance(expected, torch.Tensor):
        raise TypeError(f"a policy must return one tensor of actions, got {type(expected)}")
    want = expected.detach().cpu().numpy()
    got = np.asarray(_session(model, threads=1).run(None, {input_name: batch.cpu().numpy()})[0])
    if got.shape != want.shape:
        raise ValueError(
            f"the exported policy returns shape {got.shape} for a batch of {len(batch)}, the "
            f"module {want.shape}; is the batch axis dynamic?"
        )
    exact = np.issubdtype(want.dtype, np.integer) or want.dtype == np.bool_
    if not (np.array_equal(got, want) if exact else np.allclose(got, want, rtol=1e-3, atol=1e-3)):
        raise ValueError("the exported policy's actions differ from the module's")


def export_onnx(
    module: nn.Module,
    example_obs: torch.Tensor,
    path: StrPath,
    *,
    input_name: str = "obs",
    output_name: str = "action",
    opset_version: int | None = None,
) -> Path:
    """Export ``module`` to the ONNX file ``path``, checked, and return ``path``.

    The file appears (atomically replacing an older one) only once the model passes
    ``onnx.checker`` and onnxruntime computes the module's actions on a batch derived from
    ``example_obs``; on any failure nothing is written and the old file, if any, is intact.
    The module is exported in eval mode and left in the modes it came in.

    :param module: maps float32 observations ``[B, *obs_shape]`` to one action tensor ``[B, ...]``.
    :param example_obs: a batch of observations to trace with (moved to the module's device).
    :param input_name: name of the graph input; its first axis is the dynamic ``batch``.
    :param output_name: name of the graph output.
    :param opset_version: ONNX opset; ``None`` is the exporter's default.
    :raises ValueError: ``example_obs`` is not a non-empty batch, or the exported model
        computes something else than ``module``.
    :raises ImportError: ``onnx``, ``onnxscript`` or ``onnxruntime`` is not installed.
    :raises Exception: whatever the exporter or onnxruntime raise for a module they cannot handle.
    """
    path = Path(path)
    if example_obs.ndim < 2 or example_obs.shape[0] == 0:
        raise ValueError(
            f"example_obs must be a batch [B, *obs_shape] with B >= 1, got shape "
            f"{tuple(example_obs.shape)}"
        )
    example = example_obs.detach().to(device=_device_of(module), dtype=torch.float32)
    with _eval_mode(module):
        with _quiet_exporter():
            program = torch.onnx.export(
                module,
                (example,),
                dynamo=True,
                input_names=[input_name],
                output_names=[output_name],
                # A tuple, not a dict: the dict form is keyed by forward's argument name.
                dynamic_shapes=({0: torch.export.Dim("batch")},),
                opset_version=opset_version,
                verbose=False,
            )
        if program is None:  # only the TorchScript exporter returns None
            raise RuntimeError("torch.onnx.export returned no program")
        # Serialise ourselves instead of passing a path to torch.onnx.export: that path is
        # written in place (not atomically), with the weights in a separate ``.onnx.data``
        # file by default, and the model would reach the disk before it was checked.
        model = program.model_proto.SerializeToString()
        _verify(model, module, example, input_name)
    return atomic_write(path, lambda f: f.write(model))


def onnx_policy(
    path: StrPath, *, threads: int | None = None
) -> Callable[[npt.ArrayLike], npt.NDArray[Any]]:
    """Load an exported policy and return a function from observations to actions.

    The function takes a batch ``[B, *obs_shape]`` (or one observation ``obs_shape``, answered
    with one action), casts it to float32, and returns the graph's first output as numpy.

    :param threads: onnxruntime intra-op threads; ``None`` lets onnxruntime decide.
    """
    session = _session(str(path), threads)
    graph_input = session.get_inputs()[0]
    name: str = graph_input.name
    rank = len(graph_input.shape)

    def act(obs: npt.ArrayLike) -> npt.NDArray[Any]:
        x = np.asarray(obs, dtype=np.float32)
        single = x.ndim == rank - 1
        out = np.asarray(session.run(None, {name: x[None] if single else x})[0])
        return out[0] if single else out

    return act
