"""Running an exported policy (``--inference``, ``evtrain record``): :func:`onnx_policy`."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import numpy.typing as npt

from evtrain.atomic import StrPath
from evtrain.export.check import session_of
from evtrain.export.policy import MEMORY_IN


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
        self._session = session_of(str(path), threads)
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
