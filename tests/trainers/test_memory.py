"""The recurrent building blocks: sequence layout (against hand-made layouts), padding, the
LSTM memory's layout and its one-step path, forgetting at episode ends."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from evtrain.trainers.networks.memory import (
    FORGET_BIAS,
    LSTMMemory,
    RecurrentMLP,
    StatefulPolicy,
    forget,
    padded,
    sequence_layout,
)
from evtrain.trainers.settings import MemorySettings, NetworkSettings


def steps(*rows: tuple[int, ...]) -> list[list[int]]:
    return [list(row) for row in rows]


def test_one_environment_without_breaks_is_cut_every_sequence_length_and_padded() -> None:
    # T=5, N=1, L=2: steps 0..4 -> [0 1] [2 3] [4 pad]
    layout = sequence_layout(np.zeros((5, 1), bool), np.ones((5, 1), bool), 2)
    assert layout.index.tolist() == steps((0, 1), (2, 3), (4, 0))
    assert layout.mask.tolist() == [[True, True], [True, True], [True, False]]
    assert layout.steps.tolist() == [0, 1, 2, 3, 4]
    assert layout.starts.tolist() == [0, 2, 4]


def test_episode_ends_and_cuts_start_new_sequences_per_environment() -> None:
    # T=6, N=2, L=3; step ids are t * 2 + n.
    # env 0: episode ends after t=1; its steps 0,2 | 4,6,8 | 10
    # env 1: a time_horizon cut after t=3; its steps 1,3,5,7 | 9,11
    breaks = np.zeros((6, 2), bool)
    breaks[1, 0] = True
    breaks[3, 1] = True
    layout = sequence_layout(breaks, np.ones((6, 2), bool), 3)
    assert layout.index.tolist() == steps(
        (0, 2, 0),  # env 0, first episode, padded
        (4, 6, 8),
        (10, 0, 0),
        (1, 3, 5),  # env 1: first trajectory is 4 steps: 3 + 1
        (7, 0, 0),
        (9, 11, 0),
    )
    assert layout.mask.sum(1).tolist() == [2, 3, 1, 3, 1, 2]
    # every step is in exactly one sequence
    assert sorted(layout.steps.tolist()) == list(range(12))


def test_steps_that_are_no_transitions_belong_to_no_sequence() -> None:
    # NEXT_STEP mode: the episode ends at t=1, t=2 only resets (invalid), a new one from t=3.
    breaks = np.array([[False], [True], [False], [False], [False]])
    valid = np.array([[True], [True], [False], [True], [True]])
    layout = sequence_layout(breaks, valid, 4)
    assert layout.index.tolist() == steps((0, 1, 0, 0), (3, 4, 0, 0))
    assert layout.mask.tolist() == [[True, True, False, False], [True, True, False, False]]


def test_an_invalid_step_ends_the_trajectory_even_without_a_break() -> None:
    layout = sequence_layout(np.zeros((4, 1), bool), np.array([[1], [0], [1], [1]], bool), 8)
    assert layout.index[:, :2].tolist() == [[0, 0], [2, 3]]
    assert layout.mask.sum(1).tolist() == [1, 2]


def test_sequence_length_one_is_one_step_per_sequence() -> None:
    layout = sequence_layout(np.zeros((2, 2), bool), np.ones((2, 2), bool), 1)
    assert layout.index.tolist() == [[0], [2], [1], [3]]
    assert layout.mask.all()


def test_layout_of_nothing_and_bad_shapes() -> None:
    empty = sequence_layout(np.zeros((2, 1), bool), np.zeros((2, 1), bool), 4)
    assert empty.index.shape == empty.mask.shape == (0, 4)
    with pytest.raises(ValueError, match=r"one \(T, N\) shape, got \(2, 1\) and \(2, 2\)"):
        sequence_layout(np.zeros((2, 1), bool), np.ones((2, 2), bool), 4)
    with pytest.raises(ValueError, match="sequence_length must be positive, got 0"):
        sequence_layout(np.zeros((2, 1), bool), np.ones((2, 1), bool), 0)


def test_padded_puts_each_steps_values_at_its_position_and_zeros_at_the_padding() -> None:
    layout = sequence_layout(np.zeros((3, 1), bool), np.ones((3, 1), bool), 2)
    values = torch.tensor([[1.0, 10.0], [2.0, 20.0], [3.0, 30.0]])
    assert padded(values, layout).tolist() == [[[1, 10], [2, 20]], [[3, 30], [0, 0]]]


def test_forget_zeroes_the_rows_of_ended_episodes_in_a_new_tensor() -> None:
    memory = torch.ones(3, 4)
    out = forget(memory, np.array([False, True, False]))
    assert out.tolist() == [[1] * 4, [0] * 4, [1] * 4]
    assert memory.sum() == 12  # recorded memories are not changed
    assert forget(memory, np.zeros(3, bool)) is memory


def test_lstm_memory_is_hidden_then_cell_state_and_its_step_is_the_sequence_path() -> None:
    torch.manual_seed(0)
    lstm = LSTMMemory(3, 8, torch.Generator().manual_seed(1))
    assert lstm.hidden_size == 4 and lstm.memory_size == 8
    x = torch.randn(2, 5, 3)
    memory = torch.randn(2, 8)
    out, final = lstm(x, memory)
    reference, (h, c) = lstm.lstm(x, (memory[None, :, :4], memory[None, :, 4:]))
    torch.testing.assert_close(out, reference)
    torch.testing.assert_close(final, torch.cat([h[0], c[0]], -1))
    # five single steps carry the memory as the sequence does
    step_memory = memory
    for t in range(5):
        h_t, step_memory = lstm.step(x[:, t], step_memory)
        torch.testing.assert_close(h_t, out[:, t], rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(step_memory, final, rtol=1e-5, atol=1e-6)


def test_lstm_memory_is_initialised_as_ml_agents_does() -> None:
    lstm = LSTMMemory(3, 8, torch.Generator().manual_seed(0))
    for name in ("bias_ih_l0", "bias_hh_l0"):
        gates = getattr(lstm.lstm, name).detach().view(4, 4)
        assert gates.tolist() == [[0.0] * 4, [FORGET_BIAS] * 4, [0.0] * 4, [0.0] * 4]
    # Xavier-uniform per gate: bound sqrt(6 / (fan_in + fan_out)) of a [4, 3] block
    bound = (6 / (3 + 4)) ** 0.5
    weight = lstm.lstm.all_weights[0][0].detach()  # weight_ih_l0
    assert weight.abs().max() <= bound and weight.abs().max() > bound / 2
    with pytest.raises(ValueError, match="memory_size must be even and positive, got 7"):
        LSTMMemory(3, 7)


def test_recurrent_mlp_puts_the_lstm_between_hidden_and_output_layers() -> None:
    network = NetworkSettings(hidden_units=6, num_layers=2)
    mlp = RecurrentMLP(
        3, 2, network, MemorySettings(memory_size=10), out_gain=1.0, generator=torch.Generator()
    )
    hidden = [layer for layer in mlp.hidden if isinstance(layer, torch.nn.Linear)]
    assert [tuple(layer.weight.shape) for layer in hidden] == [(6, 3), (6, 6)]
    assert mlp.memory.lstm.input_size == 6 and mlp.memory_size == 10
    assert tuple(mlp.out.weight.shape) == (2, 5)
    x = torch.randn(4, 7, 3)
    memory = torch.randn(4, 10)
    out = mlp.sequences(x, memory)
    assert out.shape == (4, 7, 2)
    first, next_memory = mlp.step(x[:, 0], memory)
    torch.testing.assert_close(first, out[:, 0], rtol=1e-5, atol=1e-6)
    second, _ = mlp.step(x[:, 1], next_memory)
    torch.testing.assert_close(second, out[:, 1], rtol=1e-5, atol=1e-6)


class Echo(torch.nn.Module):
    """A recurrent policy whose memory counts its calls; the action is the count."""

    memory_size = 2

    def forward(self, obs: torch.Tensor, memory: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        memory = memory + 1
        return memory[:, 0].long(), memory


def test_stateful_policy_carries_and_forgets_each_environments_memory() -> None:
    policy = StatefulPolicy(Echo())
    obs = torch.zeros(3, 1)
    assert policy(obs).tolist() == [1, 1, 1]
    assert policy(obs).tolist() == [2, 2, 2]
    policy.forget(np.array([False, True, False]))
    assert policy(obs).tolist() == [3, 1, 3]
    assert policy(torch.zeros(2, 1)).tolist() == [1, 1]  # another batch starts afresh
    with pytest.raises(TypeError, match="Linear has no memory_size: not a recurrent policy"):
        StatefulPolicy(torch.nn.Linear(1, 1))
