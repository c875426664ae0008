"""Models Unity can run: a policy as ML-Agents' exporter writes it, for the Unity package's
inference (``BehaviorParameters.Model``).

The contract is ML-Agents' own, read from its exporter (mlagents 0.28 = release 19,
``trainers/torch/model_serialization.py``, ``networks.py`` ``SimpleActor``, ``action_model.py``)
and from the Unity package's loader (com.unity.ml-agents 2.x ``BarracudaModelParamLoader.cs``,
3.x/4.x ``SentisModelParamLoader.cs``, ``SentisModelInfo.cs``, ``TensorNames.cs``,
``GeneratorImpl.cs``, ``ApplierImpl.cs``):

inputs, all with a dynamic first axis ``batch``
    ``obs_0``, ``obs_1``, ... one per observation in the behavior's order (float32); an image as
    ``[batch, C, H, W]`` whichever layout the build gave it in (2.x sends ``H x W x C``, 3.0 and
    later ``C x H x W``: ML-Agents' exporter transposes the former, the Unity loader reads
    channels, height and width from those axes); ``action_masks`` ``[batch, sum(branches)]``
    float32, 1 = allowed (Unity's ``ActionMaskInputGenerator``), with discrete branches;
    ``recurrent_in`` ``[batch, 1, memory_size]`` with memory.
outputs, in this order
    ``version_number`` ``[1]`` = 3 (``ModelApiVersion.MLAgents2_0``, which 2.x to 4.x load);
    ``memory_size`` ``[1]``; with continuous actions ``continuous_actions`` ``[batch, c]``
    (sampled), ``continuous_action_output_shape`` ``[1]`` = c,
    ``deterministic_continuous_actions`` ``[batch, c]``; with discrete branches
    ``discrete_actions`` ``[batch, branches]`` (sampled, each branch's index),
    ``discrete_action_output_shape`` ``[1, branches]`` (each branch's size),
    ``deterministic_discrete_actions`` ``[batch, branches]``; with memory ``recurrent_out``
    ``[batch, 1, memory_size]``.  The constants are float32 (the loader reads them as
    ``Tensor<float>``), continuous actions float32, discrete actions int64 (``torch.multinomial``
    and ``argmax`` give int64 in ML-Agents' graph too; Unity 3.x/4.x read them as
    ``Tensor<int>``, so a float there would fail at run time).
opset
    9 (``SerializationSettings.onnx_opset``), every trainer's policy included; 13 for a
    plugin's policy the exporter cannot write in opset 9 (logged).

Continuous actions are clipped as the trainer clips them on their way to the build, to the
Unity action space's ``[-1, 1]``: evtrain's policies are trained on that scale, where
ML-Agents' are trained on one where the build gets ``clamp(a, -3, 3) / 3``, so each exporter
hands Unity the action its trainer sent in training.  The sampled outputs draw from the
policy's distribution in the graph (``RandomNormalLike``, ``Multinomial``) when the policy
module offers it (:class:`SamplingPolicy`); otherwise they are the deterministic actions.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple, Protocol, cast, runtime_checkable

import torch
from torch import nn

from evtrain.export.policy import memory_size_of

logger = logging.getLogger("evtrain.export")

VERSION_NUMBER = 3
"""``version_number``: ML-Agents' ``SimpleActor.MODEL_EXPORT_VERSION``, ``MLAgents2_0``."""
OPSET = 9
"""ML-Agents' ``SerializationSettings.onnx_opset``."""
FALLBACK_OPSET = 13
"""The opset of a policy opset 9 cannot express (the exporter fails on it): within the
opsets 7 to 15 Sentis (package 3.x/4.x) loads."""
ACTION_MASKS = "action_masks"
RECURRENT_IN = "recurrent_in"
RECURRENT_OUT = "recurrent_out"
SAMPLED = ("continuous_actions", "discrete_actions")
"""The outputs drawn from the policy's distribution."""
POLICY_MASK = "action_mask"
"""The policy's own input for the mask (a ``Dict`` observation's part, 1 = allowed)."""
_NONE, _TRANSLATIONAL = 1, 2  # ML-Agents' DimensionProperty flags


def observation_name(index: int) -> str:
    """``obs_<index>``: the graph input of the behavior's observation ``index``."""
    return f"obs_{index}"


class ObservationSpecLike(Protocol):
    """What the export reads of a Unity observation spec (``evtrain.unity.specs``)."""

    @property
    def shape(self) -> tuple[int, ...]: ...
    @property
    def dimension_property(self) -> tuple[int, ...]: ...


class ActionSpecLike(Protocol):
    """What the export reads of a Unity action spec (``evtrain.unity.specs``)."""

    @property
    def continuous_size(self) -> int: ...
    @property
    def discrete_branches(self) -> tuple[int, ...]: ...


class ActionDistribution(NamedTuple):
    """A policy's action distribution for one batch: what the graph samples from."""

    mean: torch.Tensor | None
    """Continuous actions: the Gaussian's mean ``[B, c]`` (before clipping)."""
    log_std: torch.Tensor | None
    """Continuous actions: its log standard deviation, broadcastable to ``mean``."""
    logits: torch.Tensor | None
    """Discrete actions: every branch's logits side by side ``[B, sum(branches)]``, the masked
    actions' already pushed out of reach (as the policy masks them)."""

    @classmethod
    def of_output_layer(
        cls, out: torch.Tensor, log_std: torch.Tensor, continuous: int, branches: bool
    ) -> ActionDistribution:
        """The distribution of an output layer ``out`` that holds ``continuous`` Gaussian means,
        then (with ``branches``) every branch's masked logits: ML-Agents' ``ActionSpec`` order."""
        return cls(
            mean=out[..., :continuous] if continuous else None,
            log_std=log_std if continuous else None,
            logits=out[..., continuous:] if branches else None,
        )


@runtime_checkable
class SamplingPolicy(Protocol):
    """A policy module that can say its distribution: ``action_distribution`` takes what its
    ``forward`` takes (observations, and the memory of a recurrent one)."""

    def action_distribution(self, *inputs: torch.Tensor) -> ActionDistribution: ...


def channels_last(spec: ObservationSpecLike) -> bool:
    """Whether an image observation comes ``H x W x C`` (package 2.x) rather than ``C x H x W``
    (3.0 and later), from its dimension properties; an image whose properties say nothing is
    taken as 2.x's, as ML-Agents' exporter takes every image."""
    props = tuple(spec.dimension_property)
    return props != (_NONE, _TRANSLATIONAL, _TRANSLATIONAL)


def onnx_observation_shape(spec: ObservationSpecLike) -> tuple[int, ...]:
    """The graph input's shape of one observation, without the batch axis."""
    shape = tuple(int(d) for d in spec.shape)
    if len(shape) == 3 and channels_last(spec):
        height, width, channels = shape
        return (channels, height, width)
    return shape


class UnityContract(nn.Module):
    """A policy module seen through ML-Agents' inference contract (see the module's docs).

    :param policy: a trainer's ``policy_module()``: raw observations (in the order of
        ``policy_inputs``), then a recurrent policy's memory ``[B, memory_size]``, to the
        deterministic action (a recurrent one's with the next memory).
    :param observation_specs: the behavior's observations, in its order.
    :param action_spec: the behavior's actions.
    :param policy_inputs: the policy's observation arguments by name, in order: ``obs_<i>``
        and ``action_mask`` (a ``Dict`` observation space's keys); ``None``: the one
        observation ``obs_0``.
    """

    version_number: torch.Tensor
    memory_size_vector: torch.Tensor
    continuous_shape: torch.Tensor
    discrete_shape: torch.Tensor

    def __init__(
        self,
        policy: nn.Module,
        observation_specs: Sequence[ObservationSpecLike],
        action_spec: ActionSpecLike,
        policy_inputs: Sequence[str] | None = None,
    ) -> None:
        super().__init__()
        self.policy = policy
        self.specs = tuple(observation_specs)
        self.continuous_size = int(action_spec.continuous_size)
        self.branches = tuple(int(b) for b in action_spec.discrete_branches)
        self.memory_size = memory_size_of(policy)
        self.policy_inputs = tuple(policy_inputs or (observation_name(0),))
        known = {observation_name(i) for i in range(len(self.specs))} | {POLICY_MASK}
        unknown = [name for name in self.policy_inputs if name not in known]
        if unknown or (POLICY_MASK in self.policy_inputs and not self.branches):
            raise ValueError(
                f"policy_inputs must name the behavior's observations obs_0..obs_"
                f"{len(self.specs) - 1} (and action_mask with discrete branches), got "
                f"{list(self.policy_inputs)}"
            )
        if not (self.continuous_size or self.branches):
            raise ValueError("the action spec has neither continuous actions nor branches")
        self.sampling = isinstance(policy, SamplingPolicy)
        if self.branches and POLICY_MASK not in self.policy_inputs:
            logger.warning(
                "The policy does not read the action mask (no %r among its inputs %s): its "
                "deterministic_discrete_actions may take an action the build masks.",
                POLICY_MASK,
                list(self.policy_inputs),
            )
        self.register_buffer("version_number", torch.tensor([float(VERSION_NUMBER)]))
        self.register_buffer("memory_size_vector", torch.tensor([float(self.memory_size)]))
        self.register_buffer("continuous_shape", torch.tensor([float(self.continuous_size)]))
        self.register_buffer("discrete_shape", torch.tensor([[float(b) for b in self.branches]]))

    @property
    def input_names(self) -> list[str]:
        """The graph's inputs, in order."""
        names = [observation_name(i) for i in range(len(self.specs))]
        names += [ACTION_MASKS] if self.branches else []
        return names + ([RECURRENT_IN] if self.memory_size else [])

    @property
    def output_names(self) -> list[str]:
        """The graph's outputs, in ML-Agents' order."""
        names = ["version_number", "memory_size"]
        if self.continuous_size:
            names += [
                "continuous_actions",
                "continuous_action_output_shape",
                "deterministic_continuous_actions",
            ]
        if self.branches:
            names += [
                "discrete_actions",
                "discrete_action_output_shape",
                "deterministic_discrete_actions",
            ]
        return names + ([RECURRENT_OUT] if self.memory_size else [])

    @property
    def output_shapes(self) -> dict[str, list[int | str]]:
        """Each output's shape, ``"batch"`` for the dynamic axis."""
        c, branches, memory = self.continuous_size, len(self.branches), self.memory_size
        shapes: dict[str, list[int | str]] = {
            "version_number": [1],
            "memory_size": [1],
            "continuous_actions": ["batch", c],
            "continuous_action_output_shape": [1],
            "deterministic_continuous_actions": ["batch", c],
            "discrete_actions": ["batch", branches],
            "discrete_action_output_shape": [1, branches],
            "deterministic_discrete_actions": ["batch", branches],
            RECURRENT_OUT: ["batch", 1, memory],
        }
        return {name: shapes[name] for name in self.output_names}

    def example_inputs(self, batch: int = 1) -> tuple[torch.Tensor, ...]:
        """Inputs of ``batch`` rows: observations in ``[0, 1)``, every action allowed, zero
        memory."""
        generator = torch.Generator().manual_seed(0)
        inputs = [
            torch.rand((batch, *onnx_observation_shape(spec)), generator=generator)
            for spec in self.specs
        ]
        inputs += [torch.ones((batch, sum(self.branches)))] if self.branches else []
        return (*inputs, *([torch.zeros((batch, 1, self.memory_size))] if self.memory_size else []))

    def _policy_arguments(self, inputs: Sequence[torch.Tensor]) -> list[torch.Tensor]:
        observations = {}
        for index, spec in enumerate(self.specs):
            x = inputs[index]
            if len(spec.shape) == 3 and channels_last(spec):
                x = x.permute(0, 2, 3, 1)  # the graph's NCHW back to the build's H x W x C
            observations[observation_name(index)] = x
        if self.branches:
            observations[POLICY_MASK] = inputs[len(self.specs)]
        arguments = [observations[name] for name in self.policy_inputs]
        if self.memory_size:
            arguments.append(inputs[-1][:, 0, :])  # [B, 1, M] as Unity keeps it, to [B, M]
        return arguments

    def forward(self, *inputs: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """The contract's outputs (:attr:`output_names`) for its inputs (:attr:`input_names`)."""
        arguments = self._policy_arguments(inputs)
        answer = self.policy(*arguments)
        action, memory = answer if self.memory_size else (answer, None)
        continuous, discrete = self._split(action)
        sampled_continuous, sampled_discrete = continuous, discrete
        if self.sampling:
            distribution = cast(SamplingPolicy, self.policy).action_distribution(*arguments)
            mask = inputs[len(self.specs)] if self.branches else None
            sampled_continuous, sampled_discrete = self._sample(distribution, mask)
        outputs = [self.version_number, self.memory_size_vector]
        if self.continuous_size:
            outputs += [sampled_continuous, self.continuous_shape, continuous]
        if self.branches:
            outputs += [sampled_discrete, self.discrete_shape, discrete]
        if memory is not None:
            outputs.append(memory.unsqueeze(1))
        return tuple(outputs)

    def _split(self, action: Any) -> tuple[torch.Tensor, torch.Tensor]:
        """The policy's deterministic action as ``(continuous [B, c], discrete [B, branches])``
        (either empty when the behavior has none): from a ``Box``'s ``[B, c]``, a
        ``Discrete``'s ``[B]``, a ``MultiDiscrete``'s ``[B, k]``, a hybrid action's ``[B, c + k]``
        row (the trainers' layout) or its ``{"continuous", "discrete"}`` parts."""
        if isinstance(action, Mapping):
            continuous, discrete = action["continuous"], action["discrete"]
        elif isinstance(action, (tuple, list)):
            continuous, discrete = action
        elif self.branches and self.continuous_size:  # one [B, c + k] row: values, indices
            c = self.continuous_size
            continuous, discrete = action[:, :c], action[:, c:]
        elif self.branches:
            if action.ndim == 1:
                action = action.unsqueeze(-1)  # a Discrete space's [B] indices: one branch
            continuous, discrete = action[:, :0].float(), action
        else:
            continuous, discrete = action, action[:, :0]
        return continuous.float(), discrete.long()

    def _sample(
        self, distribution: ActionDistribution, mask: torch.Tensor | None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        continuous = discrete = torch.zeros(0)
        if self.continuous_size:
            mean, log_std = distribution.mean, distribution.log_std
            if mean is None or log_std is None:
                raise ValueError("the policy's distribution has no Gaussian for its actions")
            noise = torch.randn_like(mean)  # RandomNormalLike in the graph
            continuous = torch.clamp(mean + torch.exp(log_std) * noise, -1.0, 1.0)
        if self.branches:
            logits = distribution.logits
            if logits is None:
                raise ValueError("the policy's distribution has no logits for its branches")
            if mask is not None:  # a policy that reads the mask has masked them already
                logits = logits.masked_fill(mask < 0.5, -1.0e8)
            draws, start = [], 0
            for size in self.branches:
                probs = torch.softmax(logits[:, start : start + size], dim=-1)
                draws.append(torch.multinomial(probs, 1))  # Multinomial, as ML-Agents'
                start += size
            discrete = torch.cat(draws, dim=1)
        return continuous, discrete
