"""The .onnx of a Unity run follows ML-Agents' inference contract, checked graph by graph and
run in onnxruntime.

The contract, written down here as data, is ML-Agents' own:

* names, order and opset: mlagents 0.28 (release 19, the exporter for com.unity.ml-agents
  2.x) ``mlagents/trainers/torch/model_serialization.py`` (``TensorNames``,
  ``ModelSerializer``: inputs ``obs_<i>``, ``action_masks``, ``recurrent_in``; outputs
  ``version_number``, ``memory_size``, then the continuous triple, the discrete triple,
  ``recurrent_out``; ``SerializationSettings.onnx_opset = 9`` in ``settings.py``);
* constants: ``networks.py`` ``SimpleActor`` (``MODEL_EXPORT_VERSION = 3``; float
  parameters ``[1]`` for the version, the memory size and the continuous size,
  ``[1, branches]`` for the branch sizes);
* dtypes and layouts the Unity package reads: com.unity.ml-agents 4.x
  ``Runtime/Inference/SentisModelInfo.cs`` (constants read as ``Tensor<float>``),
  ``ApplierImpl.cs`` (continuous actions ``Tensor<float>`` ``[agent, j]``, discrete actions
  ``Tensor<int>`` ``[agent, branch]``, memory ``[agent, 0, j]``), ``GeneratorImpl.cs``
  (``action_masks`` 1 = allowed, ``recurrent_in`` ``[agent, 0, j]``), ``TensorProxy.cs``
  (an image input's channels, height, width are its axes 1, 2, 3).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import attrs
import numpy as np
import numpy.typing as npt
import onnx
import onnxruntime as ort  # type: ignore[import-untyped]  # ships no type information
import pytest
import torch
from gymnasium import spaces
from torch import nn

from evtrain.export import ActionDistribution, UnityExporter, export_for_unity
from evtrain.trainers.networks.policies import ActorCritic, DeterministicPolicy
from evtrain.trainers.networks.recurrent import RecurrentActorCritic, RecurrentPolicy
from evtrain.trainers.settings import MemorySettings, NetworkSettings

OPSET = 9
FALLBACK_OPSET = 13  # a plugin's policy opset 9 cannot express
VERSION_NUMBER = 3
FLOAT, INT64 = onnx.TensorProto.FLOAT, onnx.TensorProto.INT64
Shape = Callable[[int, tuple[int, ...], int], list[Any]]
CONSTANTS: dict[str, tuple[int, Shape]] = {  # name: (dtype, shape from the specs)
    "version_number": (FLOAT, lambda c, b, m: [1]),
    "memory_size": (FLOAT, lambda c, b, m: [1]),
    "continuous_action_output_shape": (FLOAT, lambda c, b, m: [1]),
    "discrete_action_output_shape": (FLOAT, lambda c, b, m: [1, len(b)]),
}
BATCH_OUTPUTS: dict[str, tuple[int, Shape]] = {
    "continuous_actions": (FLOAT, lambda c, b, m: ["batch", c]),
    "deterministic_continuous_actions": (FLOAT, lambda c, b, m: ["batch", c]),
    "discrete_actions": (INT64, lambda c, b, m: ["batch", len(b)]),
    "deterministic_discrete_actions": (INT64, lambda c, b, m: ["batch", len(b)]),
    "recurrent_out": (FLOAT, lambda c, b, m: ["batch", 1, m]),
}
TE, NONE = 2, 1  # ML-Agents' DimensionProperty: TRANSLATIONAL_EQUIVARIANCE, NONE
HWC, CHW = (TE, TE, NONE), (NONE, TE, TE)  # a camera in package 2.x, in 3.0 and later


@attrs.frozen
class ObservationSpec:
    shape: tuple[int, ...]
    dimension_property: tuple[int, ...]


@attrs.frozen
class ActionSpec:
    continuous_size: int
    discrete_branches: tuple[int, ...]


def expected_outputs(c: int, branches: tuple[int, ...], memory: int) -> list[str]:
    names = ["version_number", "memory_size"]
    if c:
        names += [
            "continuous_actions",
            "continuous_action_output_shape",
            "deterministic_continuous_actions",
        ]
    if branches:
        names += [
            "discrete_actions",
            "discrete_action_output_shape",
            "deterministic_discrete_actions",
        ]
    return names + (["recurrent_out"] if memory else [])


def dims(value: Any) -> list[Any]:
    return [d.dim_param or d.dim_value for d in value.type.tensor_type.shape.dim]


def check_graph(
    path: Path, specs: list[ObservationSpec], actions: ActionSpec, memory: int, opset: int = OPSET
) -> ort.InferenceSession:
    """The graph's opset, inputs, outputs, dtypes, shapes and constants are the contract's."""
    model = onnx.load(str(path))
    onnx.checker.check_model(model)
    assert [o.version for o in model.opset_import if o.domain in ("", "ai.onnx")] == [opset]
    c, b = actions.continuous_size, actions.discrete_branches
    inputs = {i.name: i for i in model.graph.input}
    want_inputs = [f"obs_{i}" for i in range(len(specs))]
    want_inputs += ["action_masks"] if b else []
    want_inputs += ["recurrent_in"] if memory else []
    assert list(inputs) == want_inputs
    for i, spec in enumerate(specs):
        shape = spec.shape
        if len(shape) == 3 and spec.dimension_property != CHW:
            shape = (shape[2], shape[0], shape[1])
        assert dims(inputs[f"obs_{i}"]) == ["batch", *shape]
    if b:
        assert dims(inputs["action_masks"]) == ["batch", sum(b)]
    if memory:
        assert dims(inputs["recurrent_in"]) == ["batch", 1, memory]
    assert all(i.type.tensor_type.elem_type == FLOAT for i in inputs.values())
    outputs = {o.name: o for o in model.graph.output}
    assert list(outputs) == expected_outputs(c, b, memory)
    for name, output in outputs.items():
        dtype, shape_of = {**CONSTANTS, **BATCH_OUTPUTS}[name]
        assert output.type.tensor_type.elem_type == dtype, name
        assert dims(output) == shape_of(c, b, memory), name
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    constants = dict(zip(list(outputs), session.run(None, feeds(session, 1)), strict=True))
    np.testing.assert_array_equal(constants["version_number"], [VERSION_NUMBER])
    np.testing.assert_array_equal(constants["memory_size"], [memory])
    if c:
        np.testing.assert_array_equal(constants["continuous_action_output_shape"], [c])
    if b:
        np.testing.assert_array_equal(constants["discrete_action_output_shape"], [list(b)])
    return session


def feeds(
    session: ort.InferenceSession, batch: int, seed: int = 0, mask: npt.NDArray[Any] | None = None
) -> dict[str, npt.NDArray[np.float32]]:
    rng = np.random.default_rng(seed)
    out = {}
    for i in session.get_inputs():
        shape = [batch, *i.shape[1:]]
        if i.name == "action_masks":
            out[i.name] = np.ones(shape, np.float32) if mask is None else mask[:batch]
        elif i.name == "recurrent_in":
            out[i.name] = np.zeros(shape, np.float32)
        else:
            out[i.name] = rng.random(shape, dtype=np.float32)
    return out


def run(session: ort.InferenceSession, inputs: dict[str, Any]) -> dict[str, Any]:
    names = [o.name for o in session.get_outputs()]
    return dict(zip(names, session.run(None, inputs), strict=True))


def build_layout(x: npt.NDArray[np.float32], spec: ObservationSpec) -> torch.Tensor:
    """A graph input as the build (and the policy) has it: 2.x images channels last."""
    t = torch.from_numpy(x)
    if len(spec.shape) == 3 and spec.dimension_property != CHW:
        t = t.permute(0, 2, 3, 1)
    return t


def torch_actions(
    policy: nn.Module, order: list[str], specs: list[ObservationSpec], inputs: dict[str, Any]
) -> Any:
    parts = {f"obs_{i}": build_layout(inputs[f"obs_{i}"], s) for i, s in enumerate(specs)}
    if "action_masks" in inputs:
        parts["action_mask"] = torch.from_numpy(inputs["action_masks"])
    args = [parts[name] for name in order]
    if "recurrent_in" in inputs:
        args.append(torch.from_numpy(inputs["recurrent_in"][:, 0, :]))
    with torch.no_grad():
        return policy(*args)


def observation_space(specs: list[ObservationSpec], branches: tuple[int, ...]) -> Any:
    boxes: dict[str, spaces.Space[Any]] = {
        f"obs_{i}": spaces.Box(0.0, 1.0, s.shape, np.float32) for i, s in enumerate(specs)
    }
    if len(boxes) == 1 and not branches:
        return boxes["obs_0"]
    if branches:
        boxes["action_mask"] = spaces.Box(0.0, 1.0, (sum(branches),), np.float32)
    return spaces.Dict(boxes)


def random_masks(batch: int, branches: tuple[int, ...], seed: int) -> npt.NDArray[np.float32]:
    """Masks with at least one action allowed per branch, and some masked."""
    rng = np.random.default_rng(seed)
    parts = []
    for size in branches:
        m = (rng.random((batch, size)) < 0.5).astype(np.float32)
        m[np.arange(batch), rng.integers(0, size, batch)] = 1.0
        parts.append(m)
    return np.concatenate(parts, axis=1)


def ppo_policy(
    specs: list[ObservationSpec], action_space: Any, branches: tuple[int, ...], memory: int
) -> tuple[nn.Module, list[str] | None, Any]:
    space = observation_space(specs, branches)
    generator = torch.Generator().manual_seed(3)
    if memory:
        network = NetworkSettings(hidden_units=16, memory=MemorySettings(memory_size=memory))
        agent: Any = RecurrentActorCritic(space, action_space, network, generator)
        policy: nn.Module = RecurrentPolicy(agent, action_space).eval()
    else:
        agent = ActorCritic(space, action_space, NetworkSettings(hidden_units=16), generator)
        policy = DeterministicPolicy(agent, action_space).eval()
    with torch.no_grad():  # logits far enough apart that argmax is the same in float32 anywhere
        if memory:  # the output layer only: an LSTM scaled up saturates to a zero output
            agent.actor.out.weight.mul_(3000.0)
        else:
            for p in agent.actor.parameters():
                p.mul_(30.0)
    order = list(space.spaces) if isinstance(space, spaces.Dict) else None
    return policy, order, agent


HYBRID = spaces.Dict(
    {"continuous": spaces.Box(-1, 1, (2,)), "discrete": spaces.MultiDiscrete([3, 2])}
)
CASES = {
    "continuous": ([ObservationSpec((6,), (NONE,))], spaces.Box(-1, 1, (2,)), 0),
    "discrete": ([ObservationSpec((6,), (NONE,))], spaces.Discrete(4), 0),
    "recurrent continuous": ([ObservationSpec((6,), (NONE,))], spaces.Box(-1, 1, (3,)), 8),
    "recurrent discrete": ([ObservationSpec((6,), (NONE,))], spaces.Discrete(3), 8),
    "several branches": ([ObservationSpec((6,), (NONE,))], spaces.MultiDiscrete([3, 2, 4]), 0),
    "hybrid": ([ObservationSpec((6,), (NONE,))], HYBRID, 0),
    "recurrent hybrid": ([ObservationSpec((6,), (NONE,))], HYBRID, 8),
    "images hwc and chw + vector": (
        [
            ObservationSpec((20, 20, 3), HWC),
            ObservationSpec((4,), (NONE,)),
            ObservationSpec((1, 20, 24), CHW),
        ],
        spaces.Box(-1, 1, (2,)),
        0,
    ),
}


def action_spec_of(space: Any) -> ActionSpec:
    if isinstance(space, spaces.Discrete):
        return ActionSpec(0, (int(space.n),))
    if isinstance(space, spaces.MultiDiscrete):
        return ActionSpec(0, tuple(int(n) for n in space.nvec))
    if isinstance(space, spaces.Dict):
        box, branches = space["continuous"], space["discrete"]
        assert isinstance(box, spaces.Box) and isinstance(branches, spaces.MultiDiscrete)
        return ActionSpec(int(box.shape[0]), tuple(int(n) for n in branches.nvec))
    return ActionSpec(int(space.shape[0]), ())


def split(action: torch.Tensor, actions: ActionSpec) -> tuple[Any, Any]:
    """A trainer's action (``[B]``, ``[B, c]``, ``[B, k]`` or ``[B, c + k]``) as
    ``(continuous, discrete)`` numpy arrays."""
    a = action.numpy()
    c = actions.continuous_size
    if a.ndim == 1:
        a = a[:, None]
    return a[:, :c], a[:, c:].astype(np.int64)


@pytest.mark.parametrize("case", list(CASES))
def test_a_trained_policys_graph_is_ml_agents_contract(case: str, tmp_path: Path) -> None:
    specs, space, memory = CASES[case]
    actions = action_spec_of(space)
    branches = actions.discrete_branches
    policy, order, _ = ppo_policy(specs, space, branches, memory)
    path = export_for_unity(policy, specs, actions, tmp_path / "Basic.onnx", policy_inputs=order)
    session = check_graph(path, specs, actions, memory)  # opset 9, hybrid policies too
    names = order or ["obs_0"]
    for batch in (1, 5):
        mask = random_masks(batch, branches, seed=batch) if branches else None
        inputs = feeds(session, batch, seed=batch, mask=mask)
        got = run(session, inputs)
        want = torch_actions(policy, names, specs, inputs)
        want, want_memory = want if memory else (want, None)
        continuous, discrete = split(want, actions)
        if branches:
            assert mask is not None
            offsets = np.cumsum((0, *branches[:-1]))
            det = got["deterministic_discrete_actions"]
            np.testing.assert_array_equal(det, discrete)
            for name in ("deterministic_discrete_actions", "discrete_actions"):
                columns = got[name] + offsets
                assert np.all(np.take_along_axis(mask, columns, axis=1) == 1.0), name
        if actions.continuous_size:
            det = got["deterministic_continuous_actions"]
            np.testing.assert_allclose(det, continuous, rtol=1e-4, atol=1e-4)
            sampled = got["continuous_actions"]
            assert sampled.shape == det.shape and np.all(np.abs(sampled) <= 1.0)
        if want_memory is not None:
            np.testing.assert_allclose(
                got["recurrent_out"][:, 0, :], want_memory.numpy(), rtol=1e-4, atol=1e-4
            )


def test_sampled_discrete_actions_keep_to_the_mask_and_vary(tmp_path: Path) -> None:
    specs = [ObservationSpec((6,), (NONE,))]
    policy, order, agent = ppo_policy(specs, spaces.Discrete(4), (4,), 0)
    with torch.no_grad():  # an even policy: every allowed action is drawn
        agent.actor.out.weight.zero_()
        agent.actor.out.bias.zero_()
    path = export_for_unity(
        policy, specs, ActionSpec(0, (4,)), tmp_path / "m.onnx", policy_inputs=order
    )
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    mask = np.array([[1, 0, 1, 0]] * 64 + [[0, 0, 0, 1]] * 64, np.float32)
    drawn = run(session, feeds(session, 128, mask=mask))["discrete_actions"][:, 0]
    assert set(drawn[:64]) == {0, 2}
    assert set(drawn[64:]) == {3}


def test_sampled_continuous_actions_are_drawn_around_the_mean(tmp_path: Path) -> None:
    specs = [ObservationSpec((6,), (NONE,))]
    policy, _, agent = ppo_policy(specs, spaces.Box(-1, 1, (2,)), (), 0)
    with torch.no_grad():  # mean 0, std e^-1.5 = 0.22: the samples stay inside [-1, 1]
        agent.actor.out.weight.zero_()
        agent.actor.out.bias.zero_()
        agent.log_std.fill_(-1.5)
    path = export_for_unity(policy, specs, ActionSpec(2, ()), tmp_path / "m.onnx")
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    got = run(session, feeds(session, 2000))
    np.testing.assert_array_equal(got["deterministic_continuous_actions"], 0.0)
    sampled = got["continuous_actions"]
    assert abs(float(sampled.mean())) < 0.05
    assert abs(float(sampled.std()) - np.exp(-1.5)) < 0.03


class BranchPolicy(nn.Module):
    """Several branches, with or without continuous actions: argmax of masked logits per
    branch, the mean for continuous ones (what a trainer's MultiDiscrete or hybrid policy
    module gives), and the distribution they come from."""

    def __init__(self, branches: tuple[int, ...], continuous: int) -> None:
        super().__init__()
        generator = torch.Generator().manual_seed(5)
        self.branches, self.continuous = branches, continuous
        self.net = nn.Linear(6, sum(branches) + continuous)
        with torch.no_grad():
            self.net.weight.copy_(torch.randn(self.net.weight.shape, generator=generator) * 10)
        self.log_std = nn.Parameter(torch.zeros(continuous))

    def action_distribution(self, obs: torch.Tensor, mask: torch.Tensor) -> ActionDistribution:
        out = self.net(obs)
        logits = out[:, self.continuous :].masked_fill(mask < 0.5, -1e8)
        mean = out[:, : self.continuous] if self.continuous else None
        return ActionDistribution(mean=mean, log_std=self.log_std, logits=logits)

    def forward(self, obs: torch.Tensor, mask: torch.Tensor) -> Any:
        d = self.action_distribution(obs, mask)
        assert d.logits is not None
        picks, start = [], 0
        for size in self.branches:
            picks.append(d.logits[:, start : start + size].argmax(-1))
            start += size
        discrete = torch.stack(picks, dim=-1)
        if not self.continuous:
            return discrete
        assert d.mean is not None
        return {"continuous": d.mean.clamp(-1, 1), "discrete": discrete}


@pytest.mark.parametrize("continuous", [0, 2], ids=["branches", "hybrid"])
def test_several_branches_and_hybrid_actions(continuous: int, tmp_path: Path) -> None:
    branches = (3, 2, 4)
    specs = [ObservationSpec((6,), (NONE,))]
    actions = ActionSpec(continuous, branches)
    policy = BranchPolicy(branches, continuous)
    path = export_for_unity(
        policy, specs, actions, tmp_path / "m.onnx", policy_inputs=["obs_0", "action_mask"]
    )
    session = check_graph(path, specs, actions, 0)
    for batch in (1, 7):
        mask = random_masks(batch, branches, seed=batch)
        inputs = feeds(session, batch, seed=batch, mask=mask)
        got = run(session, inputs)
        want = torch_actions(policy, ["obs_0", "action_mask"], specs, inputs)
        discrete = want["discrete"] if continuous else want
        np.testing.assert_array_equal(got["deterministic_discrete_actions"], discrete.numpy())
        offsets = np.cumsum((0, *branches[:-1]))
        for name in ("deterministic_discrete_actions", "discrete_actions"):
            columns = got[name] + offsets
            assert np.all(np.take_along_axis(mask, columns, axis=1) == 1.0), name
        if continuous:
            np.testing.assert_allclose(
                got["deterministic_continuous_actions"], want["continuous"].numpy(), atol=1e-4
            )


class MeanOnly(nn.Module):
    """A policy module that does not say its distribution (as SAC's export views)."""

    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Linear(6, 2)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = torch.tanh(self.net(obs))
        return out


def test_a_policy_without_its_distribution_samples_its_deterministic_action(
    tmp_path: Path,
) -> None:
    specs = [ObservationSpec((6,), (NONE,))]
    policy = MeanOnly()
    path = export_for_unity(policy, specs, ActionSpec(2, ()), tmp_path / "m.onnx")
    session = check_graph(path, specs, ActionSpec(2, ()), 0)
    inputs = feeds(session, 4)
    got = run(session, inputs)
    np.testing.assert_array_equal(
        got["continuous_actions"], got["deterministic_continuous_actions"]
    )
    want = torch_actions(policy, ["obs_0"], specs, inputs)
    np.testing.assert_allclose(got["continuous_actions"], want.numpy(), atol=1e-5)


def test_the_unity_exporter_writes_the_same_graph_at_every_checkpoint(tmp_path: Path) -> None:
    specs = [ObservationSpec((6,), (NONE,))]
    policy, order, _ = ppo_policy(specs, spaces.Discrete(3), (3,), 0)
    exporter = UnityExporter(specs, ActionSpec(0, (3,)), order)
    for step in (1, 2):
        path = exporter.export(policy, None, tmp_path / f"Basic-{step}.onnx")
        check_graph(path, specs, ActionSpec(0, (3,)), 0)


class _FlippingPolicy(nn.Module):
    """A plugin's policy with an operation opset 9 lacks (a flip: a Slice with a negative
    step, opset 10)."""

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return torch.tanh(obs[:, :2]).flip(-1)


def test_a_policy_opset_9_cannot_express_is_exported_in_opset_13(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    specs, actions = [ObservationSpec((3,), (NONE,))], ActionSpec(2, ())
    with caplog.at_level("INFO", logger="evtrain.export"):
        path = export_for_unity(_FlippingPolicy(), specs, actions, tmp_path / "Flip.onnx")
    assert any("cannot be exported in opset 9" in r.getMessage() for r in caplog.records)
    session = check_graph(path, specs, actions, 0, FALLBACK_OPSET)
    obs = np.array([[0.1, -0.2, 0.3]], dtype=np.float32)
    got = session.run(["deterministic_continuous_actions"], {"obs_0": obs})[0]
    np.testing.assert_allclose(got, np.tanh(obs[:, [1, 0]]), rtol=1e-5)
