"""One checkpoint file: a trainer state written with ``torch.save`` through
:func:`atomic_write`, and read back with ``torch.load(weights_only=True)``, which builds only
tensors and plain data.

Checkpoints are device-independent: the file holds CPU tensors only (those of a run on a GPU
are copied there as they are written), and :func:`load_checkpoint` maps whatever it reads to
the CPU; a trainer copies a state into its tensors wherever they live.

:func:`save_checkpoint` refuses a state :func:`load_checkpoint` could not read back, before
anything is written.
"""

from __future__ import annotations

import copy
import pickle
import warnings
from pathlib import Path
from typing import Any

import torch

from evtrain.atomic import StrPath, atomic_write
from evtrain.errors import CheckpointError

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
    """``torch.save`` ``state`` to ``path`` through :func:`atomic_write`, its tensors on the
    CPU whatever device they are on.

    :raises TypeError: ``state`` holds a value :func:`load_checkpoint` could not read back;
        checked before anything is written, so the mistake shows at the first save, not at
        ``--resume``.
    """
    _check_loadable(state, "state")
    on_cpu = _on_cpu(state)
    return atomic_write(path, lambda file: torch.save(on_cpu, file))


def _on_cpu(value: Any) -> Any:
    """``value`` with every tensor on the CPU; a container holding none elsewhere is returned
    as it is (a CPU run saves exactly what it saved before), one that does is copied with
    ``copy.copy`` (a module's ``state_dict`` keeps its ``_metadata``).

    A checkpoint of a run on a GPU then loads anywhere, even with a plain ``torch.load`` that
    gives no ``map_location``, on a machine whose torch has no CUDA.
    """
    if isinstance(value, torch.Tensor):
        return value.cpu()  # the tensor itself when it is on the CPU already
    if isinstance(value, dict):
        moved = {key: _on_cpu(item) for key, item in value.items()}
        if all(moved[key] is item for key, item in value.items()):
            return value
        copied = copy.copy(value)
        copied.update(moved)
        return copied
    if type(value) in (list, tuple):
        items = [_on_cpu(item) for item in value]
        if all(a is b for a, b in zip(items, value, strict=True)):
            return value
        return type(value)(items)
    return value


def load_checkpoint(path: StrPath, map_location: str | torch.device = "cpu") -> dict[str, Any]:
    """Read a checkpoint :func:`save_checkpoint` wrote.

    ``weights_only=True``: unpickling builds only tensors and plain data, never runs code, so
    a results folder from elsewhere (``--initialize-from``) is safe to load.  Trainer states
    are built for it: the numpy RNG state (``bit_generator.state`` of PCG64) is a dict of ints
    and strings, replay buffers are stored as tensors.

    :raises CheckpointError: the file holds more than tensors and plain data, is cut short or
        corrupt, or does not hold a dict; one line naming the file.
    """
    try:
        with warnings.catch_warnings():
            # A crafted pickle's protocol draws a UserWarning before it is refused anyway.
            warnings.simplefilter("ignore", UserWarning)
            state = torch.load(path, map_location=map_location, weights_only=True)
    except pickle.UnpicklingError as error:
        raise CheckpointError(_refused(path, error)) from None
    except (RuntimeError, EOFError, ValueError, IndexError, KeyError, TypeError):
        # What torch.load raises for a cut-short zip, a stray text file, an empty file.
        raise CheckpointError(_unreadable(path)) from None
    if not isinstance(state, dict):
        raise CheckpointError(
            f"{path} cannot be loaded as an evtrain checkpoint: it holds a "
            f"{type(state).__name__}, expected a dict of a trainer's state; use checkpoints "
            "evtrain wrote"
        )
    return state


def _refused(path: StrPath, error: pickle.UnpicklingError) -> str:
    if str(error).startswith("Weights only load failed"):
        return (
            f"{path} cannot be loaded as an evtrain checkpoint: it holds objects other than "
            "tensors and plain data (refused unread, since loading them would run code); use "
            "checkpoints evtrain wrote"
        )
    return _unreadable(path)


def _unreadable(path: StrPath) -> str:
    return (
        f"{path} cannot be loaded as an evtrain checkpoint: the file is cut short or corrupt; "
        "resume from another copy, or start afresh"
    )
