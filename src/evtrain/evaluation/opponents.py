"""``behaviors.<name>.evaluation.opponents``: who a PettingZoo behavior is evaluated against.

Each item is a player, or ``{name: <label>, player: <player>}`` to choose the label its stats
go under (``Evaluation/<label>/Win Rate``, ...).  A player is one of:

``random``
    uniformly random actions, legal ones where the observation carries PettingZoo's
    ``action_mask``;
``latest``
    the evaluated policy itself (as of the evaluation's step) in the other seats;
``<module>:<function>``
    a scripted player, ``function(observation, action_mask) -> action`` for one agent (its
    raw observation: the ``observation`` entry of a ``Dict`` observation that has one; its
    ``action_mask``, else ``None``), imported in the evaluation worker with the run's working
    folder importable (as ``env_id``'s factories are);
``<path>.onnx``
    an exported policy (another run's ``<Behavior>.onnx``), run in onnxruntime, each input fed
    by its name as evtrain exports them (``obs``, a ``Dict`` observation's entries by their
    keys, a ``Discrete`` one one-hot), its action taken as it is (evtrain exports the most
    likely action);
``<path>`` (a ``.pt`` file, or a run or behavior folder)
    the policy of another run's checkpoint: a ``.pt`` file, a behavior folder's
    ``checkpoint.pt`` or a run folder's ``<behavior>/checkpoint.pt``, loaded into the
    evaluated behavior's network (same trainer type and network settings), as
    ``--initialize-from`` loads one.

The label of a bare player (:func:`default_label`) is ``random``, ``latest``, a callable's
function name, or a file or folder's name without its suffix (a checkpoint's file named
``checkpoint.pt``: its folder's name); any character but letters, digits, ``-``, ``_`` and
``.`` becomes ``_``.  Labels must differ.  Everything here is plain Python (the config layer
checks the items; files are looked at when the run starts, callables imported in the worker).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from pathlib import PurePath
from typing import Any, Literal

import attrs

Kind = Literal["random", "latest", "callable", "onnx", "checkpoint"]

MEAN_RETURN = "Mean Return"
"""The stat of an evaluation without opponents (``Evaluation/Mean Return``), and of each
opponent (``Evaluation/<label>/Mean Return``)."""
WIN_RATE = "Win Rate"
DRAW_RATE = "Draw Rate"
LOSS_RATE = "Loss Rate"
OPPONENT_STATS = (WIN_RATE, DRAW_RATE, LOSS_RATE, MEAN_RETURN)
"""Each opponent's stats, under ``Evaluation/<label>/``."""
LOWER_IS_BETTER = frozenset({LOSS_RATE})
"""The stats whose best is their lowest (``best_by``)."""

_CALLABLE = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$")
_LABEL = re.compile(r"^[\w.\- ]+$")
_UNSAFE = re.compile(r"[^\w.\-]")
FORMS = (
    "random, latest, module:function, a .onnx file, a checkpoint (.pt file, run or behavior "
    "folder), or {name: <label>, player: <one of these>}"
)
"""What an item may be, as errors say it."""


@attrs.frozen(kw_only=True)
class Opponent:
    """One item of ``opponents``: its label and its player."""

    label: str
    player: str

    @property
    def kind(self) -> Kind:
        """What :attr:`player` is (:func:`kind_of`)."""
        return kind_of(self.player)


def kind_of(player: str) -> Kind:
    """``random``, ``latest``, ``onnx`` (ends in ``.onnx``), ``callable``
    (``module:function``) or ``checkpoint`` (any other: a path)."""
    if player in ("random", "latest"):
        return "random" if player == "random" else "latest"
    if player.lower().endswith(".onnx"):
        return "onnx"
    if _CALLABLE.match(player):
        return "callable"
    return "checkpoint"


def default_label(player: str) -> str:
    """The label of a bare player (the module's docstring)."""
    kind = kind_of(player)
    if kind in ("random", "latest"):
        return player
    if kind == "callable":
        name = player.rpartition(":")[2]
    else:
        path = PurePath(player)
        name = path.stem if path.suffix.lower() in (".onnx", ".pt") else path.name
        if path.name == "checkpoint.pt" and path.parent.name:
            name = path.parent.name
    return _UNSAFE.sub("_", name) or "opponent"


def opponents_of(items: Sequence[Any]) -> list[Opponent]:
    """The items of ``opponents`` (checked by :func:`opponent_problems`) as
    :class:`Opponent`\\ s."""
    found = []
    for item in items:
        if isinstance(item, Mapping):
            player = str(item["player"])
            label = str(item.get("name") or default_label(player))
        else:
            player = str(item)
            label = default_label(player)
        found.append(Opponent(label=label, player=player))
    return found


def opponent_problems(items: Any) -> list[str]:
    """What is wrong with ``opponents``, one ``opponents[i]: ...`` line each."""
    if not isinstance(items, list):
        return [f"opponents: expected a list of opponents ({FORMS}), got {items!r}"]
    problems = []
    for i, item in enumerate(items):
        where = f"opponents[{i}]"
        if isinstance(item, Mapping):
            extra = sorted(set(map(str, item)) - {"name", "player"})
            if extra:
                problems.append(
                    f"{where}: unknown key {', '.join(extra)} (an opponent's keys are name and "
                    "player)"
                )
            player, name = item.get("player"), item.get("name")
            if not isinstance(player, str) or not player:
                problems.append(f"{where}.player: expected one of {FORMS}, got {player!r}")
            if name is not None and (not isinstance(name, str) or not _LABEL.match(name)):
                problems.append(
                    f"{where}.name: expected a label of letters, digits, spaces, '_', '-' and "
                    f"'.' (it names the stats Evaluation/<name>/...), got {name!r}"
                )
        elif not isinstance(item, str) or not item:
            problems.append(f"{where}: expected one of {FORMS}, got {item!r}")
    if problems:
        return problems
    seen: dict[str, int] = {}
    for i, opponent in enumerate(opponents_of(items)):
        first = seen.setdefault(opponent.label, i)
        if first != i:
            problems.append(
                f"opponents[{i}]: its label {opponent.label!r} is opponents[{first}]'s too; "
                f"give one of them another: {{name: <label>, player: {opponent.player}}}"
            )
    return problems


def best_by_choices(opponents: Sequence[Opponent]) -> list[str]:
    """What ``best_by`` may name: ``Mean Return``, or ``<label>/<stat>`` of an opponent."""
    return [MEAN_RETURN, *(f"{o.label}/{s}" for o in opponents for s in OPPONENT_STATS)]
