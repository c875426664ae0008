"""Export a policy to ONNX, check that the file is right, and run exported policies.

A policy is a :class:`torch.nn.Module` from raw float32 observations ``[B, *obs_shape]`` to
deterministic actions (a trainer's ``policy_module()``).  A policy of several observations
(a Gymnasium ``Dict`` space's parts) takes one positional argument per part: it is exported
with one named graph input per part, in the order of the example's mapping, all sharing the
dynamic batch axis.  :func:`export_onnx` writes it with a
dynamic batch axis, checks the model, runs it in onnxruntime against the module itself, and
only then puts the file in place atomically.  A :class:`PolicyExporter` does the same for a
policy exported at every checkpoint.  :func:`onnx_policy` runs an exported file
(``--inference``).

Two of PyTorch's exporters can write the graph (``exporter=``):

``"torchscript"``
    ``torch.onnx.export(dynamo=False)``, which traces the module with the TorchScript tracer:
    about 0.8 s the first time in a process (mostly ``import onnx``), then ~10 ms for an MLP.
    PyTorch 2.9 deprecated it; evtrain silences the ``DeprecationWarning`` warnings it and its
    internals give about themselves.
``"dynamo"``
    the ``torch.export``-based exporter, PyTorch's default since 2.9: about 4 s the first time
    in a process (``onnxscript`` and ``torch._dynamo`` imports, the trace), ~1 s per later
    trace, so a :class:`PolicyExporter` traces once and then only puts in new weights.
``"auto"`` (the default)
    ``torchscript``, and ``dynamo`` for a module it cannot export (or a PyTorch without it).

Both give a graph the same checks accept: ``onnx.checker``, and onnxruntime's actions equal to
the module's on a fresh batch.  ``onnx``, ``onnxscript`` and ``onnxruntime`` are imported only
when a function here is called: together they cost seconds of import time a run without
export does not need to pay.

A **recurrent** policy (``network_settings.memory``) says so with a positive integer
``memory_size`` attribute: it takes the memory ``[B, memory_size]`` after the observations and
returns ``(action, next memory)``, and its graph has one input more, ``memory_in``, and one
output more, ``memory_out`` (the memory explicit, as in ML-Agents' exported models): the
caller feeds each step's ``memory_out`` back as the next step's ``memory_in``, zeros at an
episode's start (:class:`OnnxPolicy` does).  Its checks run two steps, the second from the
first's memory.
"""

from __future__ import annotations

import contextlib
import inspect
import io
import logging
import re
import warnings
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, Literal

import numpy as np
import numpy.typing as npt
import torch
from torch import nn

from evtrain.atomic import StrPath, atomic_write

logger = logging.getLogger("evtrain.export")

_LEAFSPEC_WARNING = re.escape("`isinstance(treespec, LeafSpec)` is deprecated")
_SHARED_AXIS_WARNING = r"# The axis name: \w+ will not be used, since it shares the same shape"
_TORCHVISION_NOTICE = "torchvision is not installed"
_REGISTRATION_LOGGER = "torch.onnx._internal.exporter._registration"
_TORCHSCRIPT_WARNING = "You are using the legacy TorchScript-based ONNX export"

MEMORY_IN = "memory_in"
"""Name of a recurrent policy's memory input."""
MEMORY_OUT = "memory_out"
"""Name of a recurrent policy's memory output."""

Exporter = Literal["auto", "torchscript", "dynamo"]
"""Which of PyTorch's ONNX exporters writes the graph (see the module's docs)."""

Example = torch.Tensor | npt.NDArray[Any] | Mapping[str, torch.Tensor | npt.NDArray[Any]]
"""A batch of observations to export with: one tensor (the graph's one input), or a mapping
from input names to tensors (one graph input each, in the mapping's order)."""

_Inputs = dict[str, torch.Tensor]
"""The graph's inputs by name, in order: the arguments of the module's ``forward``."""


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


def memory_size_of(policy: nn.Module) -> int:
    """The width of ``policy``'s memory, 0 for a feed-forward policy (see the module's docs).

    A recurrent policy says so with a positive ``memory_size`` attribute (an ``int``).
    """
    size = getattr(policy, "memory_size", 0)
    return size if isinstance(size, int) and not isinstance(size, bool) and size > 0 else 0


def _session(model: str | bytes, threads: int | None = None) -> Any:
    import onnxruntime as ort  # type: ignore[import-untyped]  # ships no type information

    options = ort.SessionOptions()
    # Warnings and below are onnxruntime's notes about its own graph optimisations.
    options.log_severity_level = 3
    if threads is not None:
        options.intra_op_num_threads = threads
    return ort.InferenceSession(model, options, providers=["CPUExecutionProvider"])


def _verify(model: bytes, module: nn.Module, example: _Inputs) -> None:
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
    session = _session(model, threads=1)
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


def _traced(module: nn.Module, example: _Inputs) -> _Inputs:
    """What the module is traced with: the observations, and a recurrent policy's memory."""
    memory_size = memory_size_of(module)
    if not memory_size:
        return example
    first = next(iter(example.values()))
    return {**example, MEMORY_IN: first.new_zeros((first.shape[0], memory_size))}


def _outputs(module: nn.Module, output_name: str) -> list[str]:
    return [output_name, MEMORY_OUT] if memory_size_of(module) else [output_name]


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
    The module is exported in eval mode and left in the modes it came in.  The graph is
    written as traced: its initializers are the module's parameters and buffers, by name
    (onnxruntime folds constants when it loads the model).

    To export the same policy again and again (every checkpoint), use a
    :class:`PolicyExporter`: after the first export it only puts the new weights in.

    :param module: maps float32 observations ``[B, *obs_shape]`` to one action tensor ``[B, ...]``
        (several observations: one positional argument each).
    :param example_obs: a batch of observations to trace with (moved to the module's device,
        as float32), or a mapping of input names to such batches, in ``forward``'s order.
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
        _refuse_nonfinite(module)
        parts = (
            dict(example_obs)
            if isinstance(example_obs, Mapping)
            else {self.input_name: example_obs}
        )
        device = _device_of(module)
        example: _Inputs = {}
        for name, x in parts.items():
            tensor = torch.as_tensor(x)
            if tensor.ndim < 2 or tensor.shape[0] == 0:
                raise ValueError(
                    f"example_obs must be a batch [B, *obs_shape] with B >= 1, got shape "
                    f"{tuple(tensor.shape)}" + ("" if len(parts) == 1 else f" for {name!r}")
                )
            example[name] = tensor.detach().to(device=device, dtype=torch.float32)
        if len({x.shape[0] for x in example.values()}) != 1:
            shapes = {name: tuple(x.shape) for name, x in example.items()}
            raise ValueError(f"example_obs must be batches of one size, got shapes {shapes}")
        with _eval_mode(module):
            model = self._model(module, example)
        return atomic_write(path, lambda f: f.write(model))

    def _model(self, module: nn.Module, example: _Inputs) -> bytes:
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

    def _trace_torchscript(self, module: nn.Module, example: _Inputs) -> bytes:
        buffer = io.BytesIO()
        with warnings.catch_warnings():
            # Its entry point and its own internals (deprecated with it) warn about themselves.
            warnings.filterwarnings(
                "ignore", message=re.escape(_TORCHSCRIPT_WARNING), category=DeprecationWarning
            )
            warnings.filterwarnings("ignore", category=DeprecationWarning, module=r"torch\.onnx\.")
            inputs, outputs = _traced(module, example), _outputs(module, self.output_name)
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
        _verify(model, module, example)
        self.traced += 1
        return model

    def _trace(self, module: nn.Module, example: _Inputs, signature: tuple[Any, ...]) -> bytes:
        self._signature = self._template = None
        # torch.export specialises a dimension whose example size is 1 (0/1 specialisation),
        # which leaves some graphs (images, recurrent policies) with a batch of 1: trace 2 rows.
        pairs = {name: torch.cat([x, x]) if x.shape[0] == 1 else x for name, x in example.items()}
        inputs = _traced(module, pairs)
        with _quiet_exporter():
            program = torch.onnx.export(
                module,
                tuple(inputs.values()),
                dynamo=True,
                input_names=list(inputs),
                output_names=_outputs(module, self.output_name),
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
        _verify(model, module, example)
        self._signature, self._template = signature, program.model_proto
        self.traced += 1
        return model

    def _reuse(self, module: nn.Module, example: _Inputs) -> bytes | None:
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
            _verify(model, module, example)
        except Exception as error:
            logger.debug("The traced graph does not fit the module any more (%s); tracing.", error)
            return None
        self.reused += 1
        return model


def _refuse_nonfinite(module: nn.Module) -> None:
    """:raises ValueError: a parameter or buffer of ``module`` is NaN or infinite (a policy
    that acts on NaN is no policy; nothing is written)."""
    named = [*module.named_parameters(), *module.named_buffers()]
    bad = [n for n, t in named if t.is_floating_point() and not bool(torch.isfinite(t).all())]
    if bad:
        raise ValueError(
            f"the policy's {', '.join(bad[:3])}{' and more' if len(bad) > 3 else ''} hold NaN "
            "or infinity, expected finite weights; not exported"
        )


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


def _signature(module: nn.Module, example: _Inputs) -> tuple[Any, ...]:
    """What must not change for a traced graph to be reused with new weights."""
    tensors = [*module.named_parameters(), *module.named_buffers()]
    modules = module.named_modules()
    return (
        tuple((name, type(m).__module__, type(m).__qualname__) for name, m in modules),
        tuple((name, tuple(t.shape), t.dtype, t.device) for name, t in tensors),
        tuple((name, tuple(x.shape[1:]), x.device) for name, x in example.items()),
    )


def onnx_policy(path: StrPath, *, threads: int | None = None) -> OnnxPolicy:
    """Load an exported policy: an :class:`OnnxPolicy`, a function from observations to
    actions (a recurrent policy's carries each environment's memory from call to call).

    :param threads: onnxruntime intra-op threads; ``None`` lets onnxruntime decide.
    """
    return OnnxPolicy(path, threads=threads)


class OnnxPolicy:
    """An exported policy, called with observations, answering actions.

    It takes a batch ``[B, *obs_shape]`` (or one observation ``obs_shape``, answered with one
    action), casts it to float32, and returns the graph's first output as numpy.  A policy of
    several inputs (a ``Dict`` observation) takes a mapping from input names to batches (or to
    single observations), as a Gymnasium environment gives it.

    A recurrent policy's graph (an input ``memory_in``) is run with the memory it returned on
    the call before, zero at first: call it once per environment step, and :meth:`reset` the
    environments whose episode ended.  A batch of another size than the last one starts every
    memory at zero.

    :param path: an ``.onnx`` file :func:`export_onnx` wrote.
    :param threads: onnxruntime intra-op threads; ``None`` lets onnxruntime decide.
    """

    def __init__(self, path: StrPath, *, threads: int | None = None) -> None:
        self._session = _session(str(path), threads)
        inputs = {i.name: i for i in self._session.get_inputs()}
        memory = inputs.pop(MEMORY_IN, None)
        self.memory_size = 0 if memory is None else int(memory.shape[1])
        """Width of the memory (0: a feed-forward policy)."""
        self._ranks: dict[str, int] = {name: len(i.shape) for name, i in inputs.items()}
        self._names = list(self._ranks)
        self.memory: npt.NDArray[np.float32] | None = None
        """Each environment's memory now (``[B, memory_size]``), ``None`` before the first
        call and for a feed-forward policy."""

    @property
    def recurrent(self) -> bool:
        """Whether the policy carries a memory."""
        return self.memory_size > 0

    def __call__(self, obs: npt.ArrayLike | Mapping[str, npt.ArrayLike]) -> npt.NDArray[Any]:
        names = self._names
        if isinstance(obs, Mapping):
            missing = [name for name in names if name not in obs]
            if missing:
                raise ValueError(f"the policy's inputs are {names}; missing {missing}")
            feeds = {name: np.asarray(obs[name], dtype=np.float32) for name in names}
        elif len(names) == 1:
            feeds = {names[0]: np.asarray(obs, dtype=np.float32)}
        else:
            raise ValueError(f"the policy's inputs are {names}: give a mapping of them")
        single = feeds[names[0]].ndim == self._ranks[names[0]] - 1
        if single:
            feeds = {name: x[None] for name, x in feeds.items()}
        if self.recurrent:
            size = feeds[names[0]].shape[0]
            if self.memory is None or self.memory.shape[0] != size:
                self.memory = np.zeros((size, self.memory_size), dtype=np.float32)
            feeds[MEMORY_IN] = self.memory
        outputs = self._session.run(None, feeds)
        if self.recurrent:
            self.memory = np.asarray(outputs[1], dtype=np.float32)
        out = np.asarray(outputs[0])
        return out[0] if single else out

    def reset(self, ended: npt.ArrayLike | None = None) -> None:
        """Start the memory afresh: of the environments where ``ended`` is true (a ``[B]``
        boolean mask), or of all of them."""
        if self.memory is None:
            return
        if ended is None:
            self.memory = None
        else:
            self.memory[np.asarray(ended, dtype=np.bool_).reshape(-1)] = 0.0
