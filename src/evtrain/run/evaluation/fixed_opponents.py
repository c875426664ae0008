"""The opponents of ``evaluation.opponents`` that are files, looked at when the run starts: an
ONNX file must exist, and a checkpoint's policy is loaded here, on the training thread, into a
copy of the evaluated behavior's own policy module (the worker gets it as it gets the policy
of each evaluation).

A checkpoint is a ``.pt`` file, a behavior folder holding ``checkpoint.pt`` or a run folder
holding ``<behavior>/checkpoint.pt`` (as ``init_path`` names one).  It is read with
:func:`~evtrain.run.checkpoints.checkpoint_file.load_checkpoint` (weights only: a file from
elsewhere never runs code) and must come from the same trainer type, with the same network:
each tensor of the policy module (its normaliser's included) takes the checkpoint's tensor
that the trainer's own state holds at the same place.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from evtrain.errors import CheckpointError, ConfigError
from evtrain.evaluation.opponents import Opponent
from evtrain.run.checkpoints.checkpoint_file import load_checkpoint
from evtrain.run.checkpoints.saver import snapshot

if TYPE_CHECKING:
    from evtrain.trainers.base import Trainer


def fixed_opponents(name: str, trainer: Trainer, opponents: list[Opponent]) -> dict[str, Any]:
    """Check the file opponents of behavior ``name`` and load its checkpoint opponents'
    policies (by label, on the CPU).

    :raises ConfigError: a file that does not exist, or a checkpoint that cannot be read or
        does not fit the behavior's network; each naming ``opponents[i]``.
    """
    fixed: dict[str, Any] = {}
    problems = []
    for i, opponent in enumerate(opponents):
        where = f"behaviors.{name}.evaluation.opponents[{i}]"
        path = Path(opponent.player).expanduser()
        if opponent.kind == "onnx" and not path.is_file():
            problems.append(
                f"{where}: {opponent.player} does not exist; give an exported policy (a run's "
                "<Behavior>.onnx)"
            )
        elif opponent.kind == "checkpoint":
            try:
                fixed[opponent.label] = _checkpoint_policy(name, trainer, path, where)
            except ConfigError as error:
                problems.extend(error.problems)
    if problems:
        raise ConfigError(problems)
    return fixed


def checkpoint_file(name: str, path: Path, where: str) -> Path:
    """The checkpoint file ``path`` names (the module's docstring).

    :raises ConfigError: there is none.
    """
    if path.is_file():
        return path
    for found in (path / "checkpoint.pt", path / name / "checkpoint.pt"):
        if found.is_file():
            return found
    what = "does not exist" if not path.exists() else "holds no checkpoint"
    raise ConfigError(
        [
            f"{where}: {path} {what}; give random, latest, module:function, a .onnx file, or "
            f"a checkpoint: a .pt file, or a run or behavior folder holding {name}/checkpoint.pt "
            "or checkpoint.pt"
        ]
    )


def _checkpoint_policy(name: str, trainer: Trainer, path: Path, where: str) -> torch.nn.Module:
    source = checkpoint_file(name, path, where)
    try:
        state = load_checkpoint(source)
    except CheckpointError as error:
        raise ConfigError([f"{where}: {error}"]) from None
    kind = state.get("trainer_type")
    if kind != trainer.settings.trainer_type:
        raise ConfigError(
            [
                f"{where}: {source} is a checkpoint of a {kind!r} trainer, and behavior {name!r} "
                f"is trained by {trainer.settings.trainer_type!r}; give a checkpoint of the same "
                "trainer type and network settings"
            ]
        )
    trainer.wait_for_update()
    live = trainer.policy_module()
    saved = dict(_places(trainer.state_dict(), state))
    values = {}
    for key, tensor in live.state_dict().items():
        found = saved.get(_identity(tensor))
        if found is None or found.shape != tensor.shape:
            raise ConfigError(
                [
                    f"{where}: {source} does not fit behavior {name!r}'s network ({key!r} is "
                    f"{'missing' if found is None else tuple(found.shape)}, expected "
                    f"{tuple(tensor.shape)}); give a checkpoint of the same network settings"
                ]
            )
        values[key] = found
    policy = snapshot(live).cpu()
    policy.load_state_dict(values)
    return policy.eval()


def _identity(tensor: torch.Tensor) -> tuple[int, tuple[int, ...]]:
    return tensor.data_ptr(), tuple(tensor.shape)


def _places(live: Any, saved: Any) -> Iterator[tuple[tuple[int, tuple[int, ...]], torch.Tensor]]:
    """``(identity of a tensor of the trainer's state, the checkpoint's tensor at its place)``."""
    if isinstance(live, torch.Tensor):
        if isinstance(saved, torch.Tensor):
            yield _identity(live), saved
    elif isinstance(live, Mapping) and isinstance(saved, Mapping):
        for key, value in live.items():
            if key in saved:
                yield from _places(value, saved[key])
    elif isinstance(live, (list, tuple)) and isinstance(saved, (list, tuple)):
        for a, b in zip(live, saved, strict=False):
            yield from _places(a, b)
