"""One checkpoint file: a trainer state written with ``torch.save`` through
:func:`atomic_write`, and read back with ``torch.load(weights_only=True)``, which builds only
tensors and plain data.

:func:`save_checkpoint` refuses a state :func:`load_checkpoint` could not read back, before
anything is written.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from evtrain.atomic import StrPath, atomic_write

# Types ``torch.load(weights_only=True)`` reads back, besides containers of them.
_LOADABLE: tuple[type, ...] = (
    torch.Tensor,
    bool,
    int,
    float,
    complex,
    str,
    bytes,
    type(None),
    torch.dtype,
    torch.device,
    torch.Size,
)


def _check_loadable(value: object, where: str) -> None:
    if isinstance(value, dict):
        for key, item in value.items():
            _check_loadable(key, where)
            _check_loadable(item, f"{where}[{key!r}]")
    elif isinstance(value, list | tuple):
        for i, item in enumerate(value):
            _check_loadable(item, f"{where}[{i}]")
    elif not isinstance(value, _LOADABLE):
        raise TypeError(
            f"{where} is a {type(value).__module__}.{type(value).__qualname__}; a checkpoint "
            "holds tensors, numbers, strings and dicts/lists/tuples of those, which "
            "torch.load(weights_only=True) reads back (convert arrays with torch.from_numpy)"
        )


def save_checkpoint(path: StrPath, state: dict[str, Any]) -> Path:
    """``torch.save`` ``state`` to ``path`` through :func:`atomic_write`.

    :raises TypeError: ``state`` holds a value :func:`load_checkpoint` could not read back;
        checked before anything is written, so the mistake shows at the first save, not at
        ``--resume``.
    """
    _check_loadable(state, "state")
    return atomic_write(path, lambda file: torch.save(state, file))


def load_checkpoint(path: StrPath, map_location: str | torch.device = "cpu") -> dict[str, Any]:
    """Read a checkpoint :func:`save_checkpoint` wrote.

    ``weights_only=True``: unpickling builds only tensors and plain data, never runs code, so
    a results folder from elsewhere (``--initialize-from``) is safe to load.  Trainer states
    are built for it: the numpy RNG state (``bit_generator.state`` of PCG64) is a dict of ints
    and strings, replay buffers are stored as tensors.

    :raises TypeError: the file does not hold a dict.
    """
    state = torch.load(path, map_location=map_location, weights_only=True)
    if not isinstance(state, dict):
        raise TypeError(f"{path} holds a {type(state).__name__}, expected a checkpoint dict")
    return state
