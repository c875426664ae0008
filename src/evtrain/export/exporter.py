"""The exporters: :func:`export_onnx` and :class:`PolicyExporter`, which trace a policy with one
of PyTorch's ONNX exporters (or reuse a traced graph), check it, and write it atomically."""

from __future__ import annotations

import contextlib
import copy
import inspect
import io
import logging
import re
import warnings
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, Literal

import torch
from torch import nn

from evtrain.atomic import StrPath, atomic_write
from evtrain.export.check import verify
from evtrain.export.policy import (
    Example,
    Inputs,
    device_of,
    eval_mode,
    output_names,
    refuse_nonfinite,
    traced_inputs,
)

logger = logging.getLogger("evtrain.export")

_LEAFSPEC_WARNING = re.escape("`isinstance(treespec, LeafSpec)` is deprecated")
_SHARED_AXIS_WARNING = r"# The axis name: \w+ will not be used, since it shares the same shape"
_TORCHVISION_NOTICE = "torchvision is not installed"
_REGISTRATION_LOGGER = "torch.onnx._internal.exporter._registration"
_TORCHSCRIPT_WARNING = "You are using the legacy TorchScript-based ONNX export"

Exporter = Literal["auto", "torchscript", "dynamo"]
"""Which of PyTorch's ONNX exporters writes the graph (see the module's docs)."""


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
    * A policy of several inputs shares one ``batch`` axis among them, and the exporter
      warns, once per input after the first, that the name is taken by the other inputs'
      (the same) axis: the graph's batch axes are all called ``batch`` anyway (a recurrent
      policy's memory input among them).
    """
    registration = logging.getLogger(_REGISTRATION_LOGGER)
    notice_filter = _DropTorchvisionNotice()
    registration.addFilter(notice_filter)
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=_LEAFSPEC_WARNING, category=FutureWarning)
            warnings.filterwarnings("ignore", message=_SHARED_AXIS_WARNING, category=UserWarning)
            yield
    finally:
        registration.removeFilter(notice_filter)


def export_onnx(
    module: nn.Module,
    example_obs: Example,
    path: StrPath,
    *,
    input_name: str = "obs",
    output_name: str = "action",
    opset_version: int | None = None,
    exporter: Exporter = "auto",
) -> Path:
    """Export ``module`` to the ONNX file ``path``, checked, and return ``path``.

    The file appears (atomically replacing an older one) only once the model passes
    ``onnx.checker`` and onnxruntime computes the module's actions on a batch derived from
    ``example_obs``; on any failure nothing is written and the old file, if any, is intact.
    The module is exported in eval mode and left in the modes it came in.  A module on another
    device (a GPU) is exported from a copy on the CPU, where onnxruntime checks it: the graph
    and its check are the same whatever device trained the policy.  The graph is written as
    traced: its initializers are the module's parameters and buffers, by name (onnxruntime
    folds constants when it loads the model).

    To export the same policy again and again (every checkpoint), use a
    :class:`PolicyExporter`: after the first export it only puts the new weights in.

    :param module: maps float32 observations ``[B, *obs_shape]`` to one action tensor ``[B, ...]``
        (several observations: one positional argument each).
    :param example_obs: a batch of observations to trace with (moved to the CPU, as float32),
        or a mapping of input names to such batches, in ``forward``'s order.
    :param input_name: name of the graph input of a single ``example_obs``; its first axis is
        the dynamic ``batch`` (a mapping's inputs are named by its keys).
    :param output_name: name of the graph output.
    :param opset_version: ONNX opset; ``None`` is the exporter's default.
    :param exporter: which of PyTorch's exporters writes the graph (see the module's docs).
    :raises ValueError: ``example_obs`` is not a non-empty batch, or the exported model
        computes something else than ``module``.
    :raises ImportError: ``onnx``, ``onnxscript`` or ``onnxruntime`` is not installed.
    :raises Exception: whatever the exporter or onnxruntime raise for a module they cannot handle.
    """
    policy_exporter = PolicyExporter(
        input_name=input_name,
        output_name=output_name,
        opset_version=opset_version,
        exporter=exporter,
    )
    return policy_exporter.export(module, example_obs, path)


class PolicyExporter:
    """Exports one policy to ONNX again and again, e.g. a behavior's checkpoints.

    With the TorchScript exporter every export traces the module (milliseconds once the
    exporter is loaded).  The dynamo exporter's first trace takes about a second for a small
    MLP (several more the first time in a process, for the imports); later exports of a module
    with the same structure — the same submodules by name and class, the same parameter and
    buffer names, shapes and dtypes, observations of the same shape — reuse that graph with
    the module's current parameters and buffers put in (milliseconds), then pass the same
    checks as a traced export: ``onnx.checker`` and onnxruntime's actions against the
    module's.  A reused graph that fails them is traced anew.

    What a reused graph assumes: ``forward`` does the same computation as when it was traced,
    and every tensor it reads that changes is a parameter or buffer (true of evtrain's
    trainers' policies).  A tensor that is neither is a constant of the traced graph.

    :param exporter: which of PyTorch's exporters writes the graph (see the module's docs);
        ``"auto"`` falls back to ``"dynamo"`` for good once ``"torchscript"`` fails.
    """

    def __init__(
        self,
        *,
        input_name: str = "obs",
        output_name: str = "action",
        opset_version: int | None = None,
        exporter: Exporter = "auto",
    ) -> None:
        if exporter not in ("auto", "torchscript", "dynamo"):
            raise ValueError(f"exporter must be auto, torchscript or dynamo, got {exporter!r}")
        self.input_name = input_name
        self.output_name = output_name
        self.opset_version = opset_version
        self.exporter: Exporter = exporter
        self._signature: tuple[Any, ...] | None = None
        self._template: Any = None  # onnx.ModelProto of the last dynamo export
        self.traced = 0
        """Exports that traced the module."""
        self.reused = 0
        """Exports that reused the traced graph with new weights."""

    def export(self, module: nn.Module, example_obs: Example, path: StrPath) -> Path:
        """Export ``module`` to ``path`` like :func:`export_onnx`, reusing the graph if it can.

        :raises: as :func:`export_onnx`.
        """
        path = Path(path)
        refuse_nonfinite(module)
        parts = (
            dict(example_obs)
            if isinstance(example_obs, Mapping)
            else {self.input_name: example_obs}
        )
        if device_of(module).type != "cpu":
            # Traced and checked from a CPU copy: onnxruntime answers on the CPU, and a GPU's
            # arithmetic (TF32 convolutions, other kernels) can tip a discrete policy's argmax
            # between near-equal logits, failing the exact comparison for no fault of the graph.
            module = copy.deepcopy(module).cpu()
        example: Inputs = {}
        for name, x in parts.items():
            tensor = torch.as_tensor(x)
            if tensor.ndim < 2 or tensor.shape[0] == 0:
                raise ValueError(
                    f"example_obs must be a batch [B, *obs_shape] with B >= 1, got shape "
                    f"{tuple(tensor.shape)}" + ("" if len(parts) == 1 else f" for {name!r}")
                )
            example[name] = tensor.detach().to(device="cpu", dtype=torch.float32)
        if len({x.shape[0] for x in example.values()}) != 1:
            shapes = {name: tuple(x.shape) for name, x in example.items()}
            raise ValueError(f"example_obs must be batches of one size, got shapes {shapes}")
        with eval_mode(module):
            model = self._model(module, example)
        return atomic_write(path, lambda f: f.write(model))

    def _model(self, module: nn.Module, example: Inputs) -> bytes:
        if self.exporter != "dynamo":
            try:
                return self._trace_torchscript(module, example)
            except Exception as error:
                if self.exporter == "torchscript":
                    raise
                logger.info(
                    "The TorchScript exporter could not export the policy (%s: %s); using "
                    "the dynamo exporter from now on.",
                    type(error).__name__,
                    error,
                )
                self.exporter = "dynamo"
        signature = _signature(module, example)
        if signature == self._signature:
            model = self._reuse(module, example)
            if model is not None:
                return model
        return self._trace(module, example, signature)

    def _trace_torchscript(self, module: nn.Module, example: Inputs) -> bytes:
        buffer = io.BytesIO()
        with warnings.catch_warnings():
            # Its entry point and its own internals (deprecated with it) warn about themselves.
            warnings.filterwarnings(
                "ignore", message=re.escape(_TORCHSCRIPT_WARNING), category=DeprecationWarning
            )
            warnings.filterwarnings("ignore", category=DeprecationWarning, module=r"torch\.onnx\.")
            inputs, outputs = traced_inputs(module, example), output_names(module, self.output_name)
            torch.onnx.export(
                module,
                tuple(inputs.values()),
                buffer,  # type: ignore[arg-type]  # the TorchScript exporter takes a file object
                dynamo=False,
                input_names=list(inputs),
                output_names=outputs,
                dynamic_axes={name: {0: "batch"} for name in [*inputs, *outputs]},
                opset_version=self.opset_version,
            )
        model = buffer.getvalue()
        verify(model, module, example)
        self.traced += 1
        return model

    def _trace(self, module: nn.Module, example: Inputs, signature: tuple[Any, ...]) -> bytes:
        self._signature = self._template = None
        # torch.export specialises a dimension whose example size is 1 (0/1 specialisation),
        # which leaves some graphs (images, recurrent policies) with a batch of 1: trace 2 rows.
        pairs = {name: torch.cat([x, x]) if x.shape[0] == 1 else x for name, x in example.items()}
        inputs = traced_inputs(module, pairs)
        with _quiet_exporter():
            program = torch.onnx.export(
                module,
                tuple(inputs.values()),
                dynamo=True,
                input_names=list(inputs),
                output_names=output_names(module, self.output_name),
                dynamic_shapes=_dynamic_shapes(module, len(inputs)),
                opset_version=self.opset_version,
                # As traced: the exporter's constant folding would merge buffers into new
                # initializers (sqrt(var + eps) as "sqrt"), which _reuse could not refresh.
                optimize=False,
                verbose=False,
            )
        if program is None:  # only the TorchScript exporter returns None
            raise RuntimeError("torch.onnx.export returned no program")
        # Serialise ourselves instead of passing a path to torch.onnx.export: that path is
        # written in place (not atomically), with the weights in a separate ``.onnx.data``
        # file by default, and the model would reach the disk before it was checked.
        model: bytes = program.model_proto.SerializeToString()
        verify(model, module, example)
        self._signature, self._template = signature, program.model_proto
        self.traced += 1
        return model

    def _reuse(self, module: nn.Module, example: Inputs) -> bytes | None:
        """The traced graph with ``module``'s current tensors, checked; ``None`` if it fails."""
        import onnx
        from onnx import numpy_helper

        state: dict[str, torch.Tensor] = dict(module.named_parameters())
        state.update(module.named_buffers())
        proto = onnx.ModelProto()
        proto.CopyFrom(self._template)
        for initializer in proto.graph.initializer:
            tensor = state.get(initializer.name)
            if tensor is not None:
                array = tensor.detach().cpu().numpy()
                initializer.CopyFrom(numpy_helper.from_array(array, initializer.name))
        model: bytes = proto.SerializeToString()
        try:
            verify(model, module, example)
        except Exception as error:
            logger.debug("The traced graph does not fit the module any more (%s); tracing.", error)
            return None
        self.reused += 1
        return model


def _dynamic_shapes(module: nn.Module, count: int) -> tuple[Any, ...]:
    """``torch.export``'s ``dynamic_shapes`` for ``count`` inputs sharing a dynamic batch axis:
    one entry per argument of ``forward``, where a ``*args`` argument takes the tuple of those
    it collects.  (A tuple, not a dict: the dict form is keyed by forward's argument names.)"""
    batch = torch.export.Dim("batch")
    shapes = tuple({0: batch} for _ in range(count))
    kinds = [p.kind for p in inspect.signature(module.forward).parameters.values()]
    if inspect.Parameter.VAR_POSITIONAL not in kinds:
        return shapes
    named = kinds.index(inspect.Parameter.VAR_POSITIONAL)
    return (*shapes[:named], shapes[named:])


def _signature(module: nn.Module, example: Inputs) -> tuple[Any, ...]:
    """What must not change for a traced graph to be reused with new weights."""
    tensors = [*module.named_parameters(), *module.named_buffers()]
    modules = module.named_modules()
    return (
        tuple((name, type(m).__module__, type(m).__qualname__) for name, m in modules),
        tuple((name, tuple(t.shape), t.dtype, t.device) for name, t in tensors),
        tuple((name, tuple(x.shape[1:]), x.device) for name, x in example.items()),
    )
