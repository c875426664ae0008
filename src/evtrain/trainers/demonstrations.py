"""Demonstrations: evtrain's file format for them, and reading them for a behavior.

ML-Agents' ``.demo`` files are recorded by the Unity editor; evtrain records its own with
``evtrain record`` (:mod:`evtrain.run.record`).  A demonstration file is a NumPy ``.npz``
archive of whole episodes, one row per step:

``observations``
    ``(N, *obs_shape)``, the observation the action was taken in, in the environment's dtype.
``actions``
    ``(N,)`` int64 for ``Discrete``, ``(N, *action_shape)`` float32 for ``Box``: the action
    given to the environment (within the bounds of a ``Box``).
``rewards``
    ``(N,)`` float32, the environment's reward.
``terminated``, ``truncated``
    ``(N,)`` bool, Gymnasium's episode ends; the last row of every episode has one of them.
``metadata``
    a 0-d string array holding a JSON object: ``format`` (``"evtrain-demonstrations"``),
    ``format_version`` (:data:`FORMAT_VERSION`), ``behavior_name``, ``env_id``,
    ``observation_space`` and ``action_space`` (:func:`describe_space`), ``episodes``,
    ``steps``, ``mean_return``, ``source`` (what was recorded: run id and policy file),
    ``created`` (ISO 8601, UTC), ``evtrain_version``.

The archive holds no pickled objects: ``np.load(path, allow_pickle=False)`` reads it.
:func:`load_demonstrations` reads a file, or every evtrain file of a folder, and checks the
recorded spaces against the behavior's environment.  evtrain's files are told from Unity's by
their content (a zip archive, :data:`ZIP_MAGIC`), not by their name: ``evtrain record --output
expert.demo`` writes evtrain's format under Unity's suffix, and it reads back.
"""

from __future__ import annotations

import datetime
import io
import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import attrs
import numpy as np
import numpy.typing as npt
from gymnasium import spaces

from evtrain.errors import ConfigError

FORMAT = "evtrain-demonstrations"
"""The ``format`` of evtrain's demonstration files."""
FORMAT_VERSION = 1
"""The version of the layout described in this module; a reader refuses newer ones."""
ARRAYS = ("observations", "actions", "rewards", "terminated", "truncated")
"""The per-step arrays of a demonstration file, in the order they are written."""


def describe_space(space: spaces.Space[Any]) -> dict[str, Any]:
    """A JSON-ready description of a ``Box`` or ``Discrete`` space (type, shape, dtype; a
    ``Box``'s bounds, a ``Discrete``'s ``n`` and ``start``)."""
    if isinstance(space, spaces.Discrete):
        return {"type": "Discrete", "n": int(space.n), "start": int(space.start)}
    if isinstance(space, spaces.Box):
        return {
            "type": "Box",
            "shape": list(space.shape),
            "dtype": str(space.dtype),
            "low": [_json_number(x) for x in space.low.reshape(-1).tolist()],
            "high": [_json_number(x) for x in space.high.reshape(-1).tolist()],
        }
    raise ConfigError(
        [f"demonstrations record Box and Discrete spaces, got {type(space).__name__}"]
    )


def _json_number(x: float) -> float | str:
    # JSON has no infinities: unbounded Box dimensions are written as strings
    return x if math.isfinite(x) else str(x)


@attrs.frozen(kw_only=True, eq=False)
class Demonstrations:
    """Whole episodes of demonstrations, one row per step (see the module's docstring)."""

    observations: npt.NDArray[Any]
    actions: npt.NDArray[Any]
    rewards: npt.NDArray[np.float32]
    terminated: npt.NDArray[np.bool_]
    truncated: npt.NDArray[np.bool_]
    metadata: dict[str, Any]

    def __len__(self) -> int:
        return int(self.rewards.shape[0])

    @property
    def episode_returns(self) -> list[float]:
        """The return of each episode, in order."""
        ends = np.flatnonzero(self.terminated | self.truncated)
        sums = np.add.reduceat(self.rewards.astype(np.float64), np.r_[0, ends[:-1] + 1])
        return [float(x) for x in sums] if len(ends) else []

    def write(self, path: Path) -> Path:
        """Write the file atomically (a reader sees the old file or the whole new one)."""
        from evtrain.atomic import atomic_write

        buffer = io.BytesIO()
        np.savez_compressed(
            buffer,
            **{name: getattr(self, name) for name in ARRAYS},
            metadata=np.array(json.dumps(self.metadata, sort_keys=True)),
        )
        return atomic_write(path, lambda file: file.write(buffer.getvalue()))


def make_demonstrations(
    *,
    observations: npt.ArrayLike,
    actions: npt.ArrayLike,
    rewards: npt.ArrayLike,
    terminated: npt.ArrayLike,
    truncated: npt.ArrayLike,
    behavior_name: str,
    env_id: str,
    observation_space: spaces.Space[Any],
    action_space: spaces.Space[Any],
    source: dict[str, Any],
) -> Demonstrations:
    """Demonstrations of whole episodes, with their metadata filled in.

    :raises ValueError: the arrays differ in length, or the last step ends no episode.
    """
    from evtrain._version import __version__

    demo = Demonstrations(
        observations=np.asarray(observations),
        actions=np.asarray(actions),
        rewards=np.asarray(rewards, dtype=np.float32),
        terminated=np.asarray(terminated, dtype=np.bool_),
        truncated=np.asarray(truncated, dtype=np.bool_),
        metadata={},
    )
    problem = _layout_problem(demo)
    if problem is not None:
        raise ValueError(problem)
    returns = demo.episode_returns
    metadata = {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "behavior_name": behavior_name,
        "env_id": env_id,
        "observation_space": describe_space(observation_space),
        "action_space": describe_space(action_space),
        "episodes": len(returns),
        "steps": len(demo),
        "mean_return": float(np.mean(returns)),
        "source": source,
        "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "evtrain_version": __version__,
    }
    return attrs.evolve(demo, metadata=metadata)


def _layout_problem(demo: Demonstrations) -> str | None:
    """What is wrong with the arrays of ``demo``, if anything."""
    lengths = {name: int(np.shape(getattr(demo, name))[0]) for name in ARRAYS}
    if len(set(lengths.values())) != 1:
        return f"its arrays differ in length ({', '.join(f'{k} {v}' for k, v in lengths.items())})"
    if lengths["rewards"] == 0:
        return "it holds no steps"
    if not (demo.terminated[-1] or demo.truncated[-1]):
        return "its last step ends no episode (a demonstration holds whole episodes)"
    return None


def load_demonstrations(
    path: str | Path,
    observation_space: spaces.Space[Any],
    action_space: spaces.Space[Any],
    *,
    key: str,
) -> Demonstrations:
    """The demonstrations in ``path`` (a file, or a folder whose ``.npz`` files are read in
    name order and joined), checked against the environment's spaces.

    :param key: the option that named ``path`` (``behaviors.B.behavioral_cloning.demo_path``),
        which leads every error message.
    :raises ConfigError: the path does not exist, holds no evtrain demonstration file, a
        file is not one (or of a newer format), or its spaces differ from the environment's.
    """
    path = Path(path).expanduser()
    files = _files(path, key)
    parts = [_read(file, key) for file in files]
    for file, part in zip(files, parts, strict=True):
        _check_spaces(file, part.metadata, observation_space, action_space, key)
    if len(parts) == 1:
        return parts[0]
    joined = {name: np.concatenate([getattr(p, name) for p in parts]) for name in ARRAYS}
    metadata = {
        **parts[0].metadata,
        "episodes": sum(int(p.metadata["episodes"]) for p in parts),
        "steps": sum(len(p) for p in parts),
        "files": [str(f) for f in files],
    }
    return Demonstrations(**joined, metadata=metadata)


def _files(path: Path, key: str) -> list[Path]:
    if not path.exists():
        raise ConfigError(
            [
                f"{key}: {path} does not exist; give a demonstration file written by "
                "evtrain record (.npz), or a folder of them"
            ]
        )
    if path.is_file():
        return [path]
    # evtrain's own files by their content: evtrain record --output expert.demo writes one too.
    candidates = sorted(p for p in path.iterdir() if p.suffix in SUFFIXES and p.is_file())
    files = [p for p in candidates if p.suffix == ".npz" or _is_zip(p)]
    if not files:
        unity = any(p.suffix == ".demo" for p in candidates)
        demo = " (ML-Agents' Unity .demo files cannot be read)" if unity else ""
        raise ConfigError(
            [
                f"{key}: {path} is a folder without demonstration files (.npz){demo}; record "
                "some with evtrain record CONFIG --run-id ID --episodes N --output FILE"
            ]
        )
    return files


SUFFIXES = (".npz", ".demo")
"""The names a folder's demonstration files have: evtrain's ``.npz``, and ``.demo`` (Unity's,
or evtrain's written under that name), told apart by content."""

ZIP_MAGIC = b"PK\x03\x04"
"""How a ``.npz`` file (a zip archive) begins; Unity's ``.demo`` files (protobuf) do not."""


def _is_zip(file: Path) -> bool:
    try:
        with file.open("rb") as stream:
            return stream.read(len(ZIP_MAGIC)) == ZIP_MAGIC
    except OSError:
        return False


def _read(file: Path, key: str) -> Demonstrations:
    if file.suffix == ".demo" and not _is_zip(file):
        raise ConfigError(
            [
                f"{key}: {file} is an ML-Agents .demo file, recorded by Unity; evtrain reads "
                "its own demonstrations (.npz): record them with evtrain record CONFIG "
                "--run-id ID --episodes N --output FILE"
            ]
        )
    try:
        with np.load(file, allow_pickle=False) as archive:
            missing = [n for n in (*ARRAYS, "metadata") if n not in archive.files]
            if missing:
                raise ValueError(f"it lacks {', '.join(missing)}")
            arrays = {name: archive[name] for name in ARRAYS}
            metadata = json.loads(str(archive["metadata"][()]))
    except (OSError, ValueError, KeyError) as error:
        raise ConfigError(
            [
                f"{key}: {file} is not an evtrain demonstration file ({error}); record one "
                "with evtrain record"
            ]
        ) from None
    if not isinstance(metadata, dict) or metadata.get("format") != FORMAT:
        raise ConfigError(
            [f"{key}: {file} is not an evtrain demonstration file (no format {FORMAT!r})"]
        )
    version = metadata.get("format_version")
    if not isinstance(version, int) or version > FORMAT_VERSION:
        raise ConfigError(
            [
                f"{key}: {file} has format_version {version!r}; this evtrain reads version "
                f"{FORMAT_VERSION} or earlier: upgrade evtrain"
            ]
        )
    demo = Demonstrations(
        observations=arrays["observations"],
        actions=arrays["actions"],
        rewards=arrays["rewards"].astype(np.float32),
        terminated=arrays["terminated"].astype(np.bool_),
        truncated=arrays["truncated"].astype(np.bool_),
        metadata=metadata,
    )
    problem = _layout_problem(demo)
    if problem is not None:
        raise ConfigError([f"{key}: {file} is not a valid demonstration file: {problem}"])
    return demo


def _check_spaces(
    file: Path,
    metadata: dict[str, Any],
    observation_space: spaces.Space[Any],
    action_space: spaces.Space[Any],
    key: str,
) -> None:
    """Every way the recorded spaces differ from the environment's, as one error."""
    recorded_env = metadata.get("env_id", "?")
    differences = []
    for what, space in (("observation", observation_space), ("action", action_space)):
        recorded = metadata.get(f"{what}_space", {})
        expected = describe_space(space)
        # a space of another type differs in its type, whatever its fields say
        same_type = recorded.get("type") == expected["type"]
        for field in _compared_fields(what, expected) if same_type else ("type",):
            if recorded.get(field) != expected.get(field):
                differences.append(
                    f"{what} space {field} {_shown(recorded.get(field))} (this environment: "
                    f"{_shown(expected.get(field))})"
                )
    if differences:
        raise ConfigError(
            [
                f"{key}: {file} was recorded in {recorded_env}, whose spaces differ from this "
                f"behavior's environment: {'; '.join(differences)}. Record demonstrations in "
                "this environment (evtrain record), or train in the one they come from "
                "(env_settings.env_id)"
            ]
        )


def _compared_fields(what: str, description: dict[str, Any]) -> Sequence[str]:
    # dtypes may differ (float64 recorded, float32 trained): values are cast anyway; and an
    # observation's bounds do not change what it means, an action's do.
    if description["type"] == "Discrete":
        return ("type", "n", "start")
    return ("type", "shape") if what == "observation" else ("type", "shape", "low", "high")


def _shown(value: Any) -> str:
    if isinstance(value, list) and len(value) > 6:
        return f"[{', '.join(map(str, value[:6]))}, ...] ({len(value)} values)"
    return str(value)
