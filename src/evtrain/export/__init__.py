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

For a Unity build, :func:`export_for_unity` writes the policy in ML-Agents' inference contract
instead (the graph the Unity package loads: :mod:`evtrain.export.mlagents`).
"""

from __future__ import annotations

from evtrain.export.exporter import Exporter, PolicyExporter, export_onnx
from evtrain.export.mlagents import ActionDistribution, SamplingPolicy, UnityContract
from evtrain.export.policy import MEMORY_IN, MEMORY_OUT, Example, memory_size_of
from evtrain.export.runtime import OnnxPolicy, onnx_policy
from evtrain.export.unity_model import UnityExporter, export_for_unity

__all__ = [
    "MEMORY_IN",
    "MEMORY_OUT",
    "ActionDistribution",
    "Example",
    "Exporter",
    "OnnxPolicy",
    "PolicyExporter",
    "SamplingPolicy",
    "UnityContract",
    "UnityExporter",
    "export_for_unity",
    "export_onnx",
    "memory_size_of",
    "onnx_policy",
]
