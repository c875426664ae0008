"""Writing a model Unity can run: :func:`export_for_unity` traces a policy through
:class:`~evtrain.export.mlagents.UnityContract`, checks the graph, and writes it atomically."""

from __future__ import annotations

import copy
import io
import re
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from evtrain.atomic import StrPath, atomic_write
from evtrain.export.check import session_of
from evtrain.export.mlagents import (
    OPSET,
    SAMPLED,
    ActionSpecLike,
    ObservationSpecLike,
    UnityContract,
)
from evtrain.export.policy import device_of, eval_mode, refuse_nonfinite

_TORCHSCRIPT_WARNING = "You are using the legacy TorchScript-based ONNX export"


def export_for_unity(
    policy: nn.Module,
    observation_specs: Sequence[ObservationSpecLike],
    action_spec: ActionSpecLike,
    path: StrPath,
    *,
    policy_inputs: Sequence[str] | None = None,
) -> Path:
    """Export ``policy`` to ``path`` as ML-Agents' exporter would, for the Unity package to
    run (:mod:`evtrain.export.mlagents`), and return ``path``.

    The file appears (atomically replacing an older one) only once the graph passes
    ``onnx.checker``, has the contract's inputs and outputs, and onnxruntime's deterministic
    actions (and next memory) equal the policy's on batches of one and of three; on any
    failure nothing is written.  The policy is traced on the CPU in eval mode and left as it
    came.

    :param policy: a trainer's ``policy_module()`` (see
        :class:`~evtrain.export.mlagents.UnityContract`); one that also has
        ``action_distribution`` (:class:`~evtrain.export.mlagents.SamplingPolicy`) gets
        sampled outputs that draw from it.
    :param observation_specs: the behavior's observation specs (``BehaviorSpec``'s), in order.
    :param action_spec: the behavior's action spec.
    :param policy_inputs: the policy's observation arguments by name, in order (the keys of
        the behavior's ``Dict`` observation space: ``obs_<i>``, ``action_mask``); ``None``
        for a behavior of one observation given as a ``Box``.
    :raises ValueError: the specs do not fit the policy, or the graph computes something else.
    """
    refuse_nonfinite(policy)
    if device_of(policy).type != "cpu":
        policy = copy.deepcopy(policy).cpu()
    contract = UnityContract(policy, observation_specs, action_spec, policy_inputs)
    with eval_mode(contract), torch.no_grad():
        model = _trace(contract)
        verify_for_unity(model, contract)
    return atomic_write(Path(path), lambda f: f.write(model))


def _trace(contract: UnityContract) -> bytes:
    buffer = io.BytesIO()
    dynamic = [*contract.input_names, *_batch_outputs(contract)]
    with warnings.catch_warnings():
        # The TorchScript exporter (ML-Agents' own, and the one that writes opset 9) and its
        # internals warn that they are deprecated.
        warnings.filterwarnings(
            "ignore", message=re.escape(_TORCHSCRIPT_WARNING), category=DeprecationWarning
        )
        warnings.filterwarnings("ignore", category=DeprecationWarning, module=r"torch\.onnx\.")
        warnings.filterwarnings("ignore", category=UserWarning, module=r"torch\.onnx\.")
        torch.onnx.export(
            contract,
            contract.example_inputs(),
            buffer,  # type: ignore[arg-type]  # the TorchScript exporter takes a file object
            dynamo=False,
            opset_version=OPSET,
            input_names=contract.input_names,
            output_names=contract.output_names,
            dynamic_axes={name: {0: "batch"} for name in dynamic},
        )
    return _declare_shapes(buffer.getvalue(), contract)


def _declare_shapes(model: bytes, contract: UnityContract) -> bytes:
    """The graph with its outputs' shapes as the contract has them: the exporter's shape
    inference loses axes on the way (a stack of per-branch argmaxes comes out ``[batch]``)."""
    import onnx

    proto = onnx.load_from_string(model)
    shapes = contract.output_shapes
    for output in proto.graph.output:
        dims = output.type.tensor_type.shape.dim
        del dims[:]
        for size in shapes[output.name]:
            dim = dims.add()
            if isinstance(size, str):
                dim.dim_param = size
            else:
                dim.dim_value = size
    data: bytes = proto.SerializeToString()
    return data


def _batch_outputs(contract: UnityContract) -> list[str]:
    """The outputs with a batch axis: all but the constants."""
    constants = {
        "version_number",
        "memory_size",
        "continuous_action_output_shape",
        "discrete_action_output_shape",
    }
    return [name for name in contract.output_names if name not in constants]


def verify_for_unity(model: bytes, contract: UnityContract) -> None:
    """Raise unless ``model`` is a valid ONNX graph with ``contract``'s inputs and outputs
    whose deterministic actions and memory equal the module's, on batches of 1 and 3.

    :raises ValueError: what differs.
    """
    import onnx

    onnx.checker.check_model(onnx.load_from_string(model))
    session = session_of(model, threads=1)
    inputs = [i.name for i in session.get_inputs()]
    outputs = [o.name for o in session.get_outputs()]
    if inputs != contract.input_names or outputs != contract.output_names:
        raise ValueError(
            f"the exported graph's inputs {inputs} and outputs {outputs} are not the "
            f"contract's {contract.input_names} and {contract.output_names}"
        )
    for batch in (1, 3):
        feeds = contract.example_inputs(batch)
        expected = dict(zip(contract.output_names, contract(*feeds), strict=True))
        got = session.run(None, {n: x.numpy() for n, x in zip(inputs, feeds, strict=True)})
        for name, value in zip(outputs, got, strict=True):
            _compare(name, np.asarray(value), expected[name])


def _compare(name: str, got: Any, want: torch.Tensor) -> None:
    """``got`` has ``want``'s shape and dtype, and its values unless it is sampled."""
    array = want.detach().numpy()
    if got.shape != array.shape or got.dtype != array.dtype:
        raise ValueError(
            f"the exported graph's {name} is {got.dtype} {got.shape}, the module's "
            f"{array.dtype} {array.shape}"
        )
    if name in SAMPLED:
        return
    if np.issubdtype(array.dtype, np.integer):
        equal = np.array_equal(got, array)
    else:
        equal = np.allclose(got, array, rtol=1e-3, atol=1e-3)
    if not equal:
        raise ValueError(f"the exported graph's {name} differs from the module's")


class UnityExporter:
    """:func:`export_for_unity` behind :class:`~evtrain.export.PolicyExporter`'s ``export``,
    so what exports a behavior at every checkpoint can write Unity's graph instead.

    :param observation_specs: the behavior's observation specs, in order.
    :param action_spec: the behavior's action spec.
    :param policy_inputs: as :func:`export_for_unity`'s.
    """

    def __init__(
        self,
        observation_specs: Sequence[ObservationSpecLike],
        action_spec: ActionSpecLike,
        policy_inputs: Sequence[str] | None = None,
    ) -> None:
        self.observation_specs = tuple(observation_specs)
        self.action_spec = action_spec
        self.policy_inputs = None if policy_inputs is None else tuple(policy_inputs)

    def export(self, module: nn.Module, example_obs: object, path: StrPath) -> Path:
        """Export ``module`` to ``path`` (``example_obs`` is not needed: the specs say the
        inputs).

        :raises: as :func:`export_for_unity`.
        """
        del example_obs
        return export_for_unity(
            module,
            self.observation_specs,
            self.action_spec,
            path,
            policy_inputs=self.policy_inputs,
        )
