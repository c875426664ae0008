"""Recurrent networks with ML-Agents' ``network_settings.memory``, and the sequences they
train on.

**Memory.**  A recurrent network carries a *memory* from one step to the next: the state of
an LSTM, its hidden state ``h`` and cell state ``c`` side by side in one ``[B, memory_size]``
tensor (ML-Agents' layout, so ``memory_size`` is even and the LSTM has ``memory_size / 2``
units).  :class:`RecurrentMLP` puts the LSTM after the hidden layers and before the output
layer, as ML-Agents' ``NetworkBody`` does.  A memory starts at zero and is zeroed again where
an episode ends; it is not reset where a trajectory is only cut (``time_horizon``).

**Sequences.**  The networks train on sequences of ``sequence_length`` consecutive steps of
one environment, the memory taken as it was recorded at the first step of each sequence
(no burn-in), and carried through the sequence by the network itself.  As ML-Agents' buffer
does, each trajectory (the steps of one environment between an episode end, a
``time_horizon`` cut or the rollout's ends) is split into sequences from its first step
on, and its last, shorter sequence is padded at the end; padded steps are masked out of
every loss.  :func:`sequence_layout` computes where each step goes.
"""

from __future__ import annotations

import warnings
from typing import cast

import attrs
import numpy as np
import numpy.typing as npt
import torch
import torch.nn.functional as F
from torch import nn

from evtrain.export import memory_size_of
from evtrain.trainers.networks.mlp import ACTIVATIONS, hidden_layers, layer_init
from evtrain.trainers.settings import MemorySettings, NetworkSettings

_NOT_CUDNN_LAYOUT = "RNN module weights are not part of single contiguous chunk of memory"
"""The start of what cuDNN's LSTM says at every call whose weights are not in its layout."""

FORGET_BIAS = 1.0
"""Added to the forget gate's biases at initialisation, so that a new LSTM remembers by
default (ML-Agents adds it to both of PyTorch's bias vectors)."""


class LSTMMemory(nn.Module):
    """An LSTM whose ``(h, c)`` state travels as one ``[B, memory_size]`` memory tensor.

    Weights are Xavier-uniform per gate, biases zero but the forget gate's, as ML-Agents
    initialises its LSTM.
    """

    def __init__(
        self, input_size: int, memory_size: int, generator: torch.Generator | None = None
    ) -> None:
        super().__init__()
        if memory_size <= 0 or memory_size % 2:
            raise ValueError(f"memory_size must be even and positive, got {memory_size}")
        self.hidden_size = memory_size // 2
        self.memory_size = memory_size
        self.lstm = nn.LSTM(input_size, self.hidden_size, batch_first=True)
        with torch.no_grad():
            for name, param in self.lstm.named_parameters():
                # PyTorch stacks the gates (input, forget, cell, output) along dimension 0.
                for gate, block in enumerate(param.chunk(4, dim=0)):
                    if name.startswith("weight"):
                        nn.init.xavier_uniform_(block, generator=generator)
                    else:
                        block.fill_(FORGET_BIAS if gate == 1 else 0.0)

    def forward(self, x: torch.Tensor, memory: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Run sequences ``x`` ``[B, L, input_size]`` from ``memory`` ``[B, memory_size]``:
        ``(outputs [B, L, memory_size / 2], memory after the last step)``."""
        h0 = memory[:, : self.hidden_size].unsqueeze(0).contiguous()
        c0 = memory[:, self.hidden_size :].unsqueeze(0).contiguous()
        if not x.is_cuda:
            out, (h, c) = self.lstm(x, (h0, c0))
            return out, torch.cat([h[0], c[0]], dim=-1)
        with warnings.catch_warnings():
            # The trainers keep every weight in one flat buffer (flatten_parameters, for the
            # fused Adam), so the LSTM's are not cuDNN's own chunk at the start of a storage:
            # cuDNN copies them into its layout at each call (kilobytes to a few MB for RL's
            # LSTMs) and warns each time.  That copy is the flat buffer's price, paid knowingly.
            # catch_warnings swaps the process-wide filters, as the exporter's does (see there).
            warnings.filterwarnings("ignore", message=_NOT_CUDNN_LAYOUT, category=UserWarning)
            out, (h, c) = self.lstm(x, (h0, c0))
        return out, torch.cat([h[0], c[0]], dim=-1)

    def step(self, x: torch.Tensor, memory: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """One step of a batch, ``x`` ``[B, input_size]``: ``(output [B, memory_size / 2],
        next memory)``.  The same cell as :meth:`forward`'s, called directly: a one-step
        ``nn.LSTM`` call costs several times more on the CPU (oneDNN prepares its weights at
        every call), and the rollout makes one per step."""
        w_ih, w_hh, b_ih, b_hh = self.lstm.all_weights[0]
        hidden = (memory[:, : self.hidden_size], memory[:, self.hidden_size :])
        h, c = torch.lstm_cell(x, hidden, w_ih, w_hh, b_ih, b_hh)
        return h, torch.cat([h, c], dim=-1)


class RecurrentMLP(nn.Module):
    """:class:`~evtrain.trainers.networks.mlp.MLP`'s hidden layers, an :class:`LSTMMemory`, and
    a linear output layer on the LSTM's output.

    The weights are drawn in that order from ``generator``; the hidden and output layers are
    initialised as the MLP's are.  With image observations, :attr:`encoder` (set by the
    builder, after the rest is drawn, as the feed-forward networks draw theirs) turns
    observation rows into the hidden layers' input.
    """

    def __init__(
        self,
        in_features: int,
        out_features: int,
        network: NetworkSettings,
        memory: MemorySettings,
        *,
        out_gain: float,
        generator: torch.Generator | None = None,
    ) -> None:
        super().__init__()
        widths = [in_features] + [network.hidden_units] * network.num_layers
        self.hidden = hidden_layers(widths, generator)
        self.memory = LSTMMemory(widths[-1], memory.memory_size, generator)
        self.out = layer_init(nn.Linear(self.memory.hidden_size, out_features), out_gain, generator)
        self.activation = ACTIVATIONS[network.activation]
        self.encoder: nn.Module | None = None
        """The image encoders in front of the hidden layers (``None``: vector observations,
        whose rows are the hidden layers' input)."""

    @property
    def memory_size(self) -> int:
        """Width of the memory this network carries."""
        return self.memory.memory_size

    def body(self, x: torch.Tensor) -> torch.Tensor:
        """The encoders (if any) and the hidden layers, on any leading dimensions."""
        if self.encoder is not None:
            lead = x.shape[:-1]
            x = self.encoder(x.reshape(-1, x.shape[-1])).reshape(*lead, -1)
        for layer in cast("list[nn.Linear]", self.hidden):
            x = self.activation(F.linear(x, layer.weight, layer.bias))
        return x

    def step(self, x: torch.Tensor, memory: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """One step of a batch: ``x`` ``[B, in]`` -> ``(outputs [B, out], next memory)``."""
        h, memory = self.memory.step(self.body(x), memory)
        return F.linear(h, self.out.weight, self.out.bias), memory

    def sequences(self, x: torch.Tensor, memory: torch.Tensor) -> torch.Tensor:
        """Sequences ``x`` ``[S, L, in]`` from their first steps' ``memory`` ``[S, M]``:
        outputs ``[S, L, out]``."""
        h, _ = self.memory(self.body(x), memory)
        return F.linear(h, self.out.weight, self.out.bias)


@attrs.frozen
class SequenceLayout:
    """Where the steps of a ``(T, N)`` rollout go in padded sequences.

    Steps are numbered as in the rollout flattened time-major: ``t * N + n``.
    """

    index: npt.NDArray[np.int64]
    """``[S, L]``: the step at each position of each sequence; 0 at padded positions."""
    mask: npt.NDArray[np.bool_]
    """``[S, L]``: true where a position holds a step, false where it is padding.  Every
    sequence's first position holds one."""

    @property
    def steps(self) -> npt.NDArray[np.int64]:
        """Every step that is in a sequence, in sequence order (row-major over ``mask``)."""
        return self.index[self.mask]

    @property
    def starts(self) -> npt.NDArray[np.int64]:
        """``[S]``: the first step of each sequence (whose recorded memory it starts from)."""
        return self.index[:, 0]


def sequence_layout(
    breaks: npt.ArrayLike, valid: npt.ArrayLike, sequence_length: int
) -> SequenceLayout:
    """Split each environment's steps into trajectories, and each trajectory into sequences.

    A trajectory ends after a step where ``breaks`` is true (an episode end, a
    ``time_horizon`` cut) and at the end of the rollout.  Steps that are not transitions
    (``valid`` false: the autoreset steps of Gymnasium's NEXT_STEP mode) belong to no
    sequence and end the trajectory before them.  Each trajectory becomes
    ``ceil(length / sequence_length)`` sequences, the last one padded at its end.  Sequences
    are ordered by environment, then time.

    :param breaks: ``(T, N)`` a trajectory ends after this step.
    :param valid: ``(T, N)`` this step is a transition.
    :param sequence_length: ``L``, positions per sequence.
    """
    brk = np.asarray(breaks, dtype=np.bool_)
    ok = np.asarray(valid, dtype=np.bool_)
    if brk.shape != ok.shape or brk.ndim != 2:
        raise ValueError(
            f"breaks and valid must share one (T, N) shape, got {brk.shape} and {ok.shape}"
        )
    if sequence_length < 1:
        raise ValueError(f"sequence_length must be positive, got {sequence_length}")
    T, N = brk.shape
    # A trajectory starts at t = 0 and after a break or a step that is no transition.
    starts = np.ones_like(brk)
    starts[1:] = brk[:-1] | ~ok[:-1]
    # Environment-major order: each environment's steps are contiguous, in time order.
    step_ids = (np.arange(T)[:, None] * N + np.arange(N)[None, :]).T.reshape(-1)
    keep = ok.T.reshape(-1)
    step_ids, starts_kept = step_ids[keep], starts.T.reshape(-1)[keep]
    if step_ids.size == 0:
        empty = np.zeros((0, sequence_length), dtype=np.int64)
        return SequenceLayout(index=empty, mask=empty.astype(np.bool_))
    # Position of each step in its trajectory, then in its sequence.
    trajectory = np.cumsum(starts_kept) - 1
    first = np.flatnonzero(starts_kept)
    position = np.arange(step_ids.size) - first[trajectory]
    offset = position % sequence_length
    sequence = np.cumsum(offset == 0) - 1
    S = int(sequence[-1]) + 1
    index = np.zeros((S, sequence_length), dtype=np.int64)
    mask = np.zeros((S, sequence_length), dtype=np.bool_)
    index[sequence, offset] = step_ids
    mask[sequence, offset] = True
    return SequenceLayout(index=index, mask=mask)


def padded(values: torch.Tensor, layout: SequenceLayout) -> torch.Tensor:
    """``values`` of the rollout's steps (first dimension ``T * N``) laid out as
    ``[S, L, ...]`` sequences, zero at padded positions."""
    index = torch.from_numpy(layout.index).to(values.device)
    mask = torch.from_numpy(layout.mask).to(values.device)
    out = values[index]
    return out * mask.view(*mask.shape, *([1] * (out.ndim - 2))).to(out.dtype)


def forget(memory: torch.Tensor, ended: npt.NDArray[np.bool_]) -> torch.Tensor:
    """``memory`` ``[N, M]`` with the rows of the environments whose episode ``ended``
    zeroed (a new tensor: recorded memories stay as they were)."""
    if not ended.any():
        return memory
    keep = torch.from_numpy(~ended).to(memory.device)
    return memory * keep.unsqueeze(-1).to(memory.dtype)


class StatefulPolicy:
    """Runs a recurrent export view (see :func:`~evtrain.export.memory_size_of`) as a
    function of observations to actions: it keeps each environment's memory between calls,
    zero at first.

    Call :meth:`forget` with the environments whose episode ended.  A call with another
    batch size than the memory's starts every memory afresh.
    """

    def __init__(self, policy: nn.Module) -> None:
        self.memory_size = memory_size_of(policy)
        if not self.memory_size:
            raise TypeError(f"{type(policy).__name__} has no memory_size: not a recurrent policy")
        self.policy = policy
        self.memory: torch.Tensor | None = None

    def __call__(self, *obs: torch.Tensor) -> torch.Tensor:
        """Actions for the observations (one tensor per input of the policy, as its export
        view takes them)."""
        size = obs[0].shape[0]
        if self.memory is None or self.memory.shape[0] != size:
            self.memory = obs[0].new_zeros((size, self.memory_size), dtype=torch.float32)
        action, self.memory = self.policy(*obs, self.memory)
        return cast("torch.Tensor", action)

    def forget(self, ended: npt.NDArray[np.bool_]) -> None:
        """Zero the memory of the environments whose episode ``ended``."""
        if self.memory is not None:
            self.memory = forget(self.memory, ended)
