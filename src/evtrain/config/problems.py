"""The problem lines users see for options that could not be structured.

cattrs' :func:`~cattrs.v.transform_error` walks the exception groups a structuring error holds
and builds the path of each leaf error; :func:`problems` hands it evtrain's formatter, which
turns each leaf into evtrain's messages, and writes cattrs' path notation
(``$.behaviors['CartPole'].max_steps``) as evtrain's keys (``behaviors.CartPole.max_steps``).

A leaf error says which key is wrong in one of these ways, tried in this order:

- an unknown key: cattrs' :class:`~cattrs.errors.ForbiddenExtraKeysError` holds the class and
  the keys (a close typo gets "did you mean", an ML-Agents option evtrain does not implement
  its own message, :mod:`evtrain.config.mlagents`);
- a value cattrs could not structure: the path already ends at its key;
- a validator's error, raised while the class is built (cattrs reports it at the class's
  path): attrs' ``instance_of``, ``in_`` and evtrain's own validators put the
  :class:`attrs.Attribute` second in the exception's ``args``.  Only where that is missing is
  the message read: a check that cannot name an attribute (an ``__attrs_post_init__``, a
  plugin's validator) writes ``"<key>: what is wrong"`` (or ``"<key>[<i>]: ..."`` for an item
  of a list), and attrs' ``gt``/``ge``/``lt``/``le`` raise ``"'<key>' must be > 0: 0"`` with
  nothing else.
"""

from __future__ import annotations

import ast
import difflib
import re
from collections.abc import Iterable, Sequence
from typing import Any

import attrs
from cattrs.errors import ForbiddenExtraKeysError
from cattrs.v import format_exception, transform_error

from evtrain.config.mlagents import kind_of, unsupported

_STEP = re.compile(r"""\.(\w+)|\[('(?:[^'\\]|\\.)*'|"(?:[^"\\]|\\.)*"|[^\]]*)\]""")
"""One step of a cattrs path: ``.field``, or ``[index]`` / ``[key!r]``."""

_KEY = re.compile(r"^[A-Za-z_]\w*(?:\[\d+\])?(?:\.[A-Za-z_]\w*)*$")
"""What a check that cannot name an attribute writes before its ``": "``: a key, an item of a
list (``opponents[1]``), and the keys under it (``opponents[1].player``)."""
_ATTRS_COMPARISON = re.compile(r"^'(\w+)' must be (.+?): (.+)$")
"""The whole of what attrs' ``gt``/``ge``/``lt``/``le`` validators raise."""


VALUE_CHARS = 200
"""Most characters of a value a problem line shows; the rest is cut with "…" (a value may be a
list of a million items, whose repr would be megabytes of error message)."""
MESSAGE_CHARS = 1000
"""Most characters of a problem line without a ``got`` value to cut."""


def shorten(text: str, limit: int = VALUE_CHARS) -> str:
    """``text`` cut to ``limit`` characters, ending in "…" where it was cut."""
    return text if len(text) <= limit else text[: limit - 1] + "…"


def short_repr(value: Any) -> str:
    """``repr(value)`` for a problem line, cut to :data:`VALUE_CHARS` characters."""
    return shorten(repr(value))


def cut_values(message: str) -> str:
    """``message`` with the value after its ``got`` (what every "expected ..., got VALUE" line
    of evtrain's ends with) cut to :data:`VALUE_CHARS` characters, and the whole line to
    :data:`MESSAGE_CHARS`."""
    head, got, value = message.partition(", got ")
    if got and len(value) > VALUE_CHARS:
        message = head + got + shorten(value)
    return shorten(message, MESSAGE_CHARS)


@attrs.frozen
class Problem:
    """One bad option: where it is, and what is wrong with it."""

    path: tuple[str, ...]
    """The keys from the top of the options down to the bad one."""
    message: str = attrs.field(converter=cut_values)
    """What was expected and what came (a long value cut, :func:`cut_values`)."""

    def __str__(self) -> str:
        return f"{'.'.join(self.path) or '<root>'}: {self.message}"


def problems(error: BaseException, root: Sequence[str] = ()) -> list[Problem]:
    """Every leaf error of a cattrs structuring error, in cattrs' order, under ``root``."""
    found: list[list[Problem]] = []

    def formatter(leaf: BaseException, type_: type | None) -> str:
        found.append(_leaf_problems(leaf, type_))
        return str(len(found) - 1)  # the line's handle on what was found for it

    result: list[Problem] = []
    for line in transform_error(error, "$", formatter):
        handle, _, path = line.partition(" @ ")
        where = (*root, *cattrs_path(path))
        result.extend(Problem((*where, *p.path), p.message) for p in found[int(handle)])
    return result


def cattrs_path(path: str) -> tuple[str, ...]:
    """The keys of a :func:`~cattrs.v.transform_error` path: ``$.bus.subscribers['tb']`` is
    ``("bus", "subscribers", "tb")``; an index or a key that is no string is written as its
    ``repr`` (``plugins.disabled.1``)."""
    steps: list[str] = []
    position = 1  # past the "$" of the root
    while position < len(path):
        step = _STEP.match(path, position)
        if step is None:  # no cattrs notation: keep the rest as it is rather than lose it
            steps.append(path[position:])
            break
        name, key = step.groups()
        if name is not None:
            steps.append(name)
        elif key.startswith(("'", '"')):
            steps.append(str(ast.literal_eval(key)))
        else:
            steps.append(key)
        position = step.end()
    return tuple(steps)


def _leaf_problems(leaf: BaseException, type_: type | None) -> list[Problem]:
    """What ``leaf`` says is wrong, each with the path from where cattrs reports it.

    ``type_`` is the type cattrs was structuring ``leaf``'s value as, ``None`` for an error
    raised while the class was built from its structured values (a validator's).
    """
    if isinstance(leaf, ForbiddenExtraKeysError):
        keys = sorted(map(str, leaf.extra_fields))
        return [Problem((key,), _extra_key(leaf.cl, key)) for key in keys]
    if isinstance(leaf, KeyError):  # cattrs' path already ends at the missing key
        return [Problem((), "required key is missing")]
    args = leaf.args
    if len(args) > 1 and isinstance(args[1], attrs.Attribute):
        return [Problem((args[1].name,), _validator_message(leaf))]
    if not isinstance(leaf, (TypeError, ValueError)):
        return [Problem((), format_exception(leaf, type_))]
    message = str(leaf)
    if type_ is not None:  # raised by a structure hook: evtrain's hooks say what they expected
        return [Problem((), message)]
    key, sep, rest = message.partition(": ")
    if sep and _KEY.match(key):
        return [Problem((key,), rest)]
    comparison = _ATTRS_COMPARISON.match(message)
    if comparison:
        name, requirement, value = comparison.groups()
        return [Problem((name,), f"must be {requirement}, got {value}")]
    return [Problem((), message)]


def _validator_message(error: BaseException) -> str:
    """The message of a validator's error whose ``args`` are attrs' ``(message, attribute,
    expected, value)`` (``instance_of``, ``in_``) or evtrain's ``(message, attribute)``."""
    message, _, *details = error.args
    if len(details) == 2:
        expected, value = details
        if isinstance(error, TypeError) and isinstance(expected, (type, tuple)):
            types = expected if isinstance(expected, tuple) else (expected,)
            names = " or ".join(getattr(t, "__name__", repr(t)) for t in types)
            return f"expected {names}, got {value!r}"
        if isinstance(error, ValueError) and isinstance(expected, (list, tuple, set, frozenset)):
            return f"expected one of {choices(expected)}, got {value!r}"
    return str(message)


def choices(values: Iterable[Any]) -> str:
    """``'a', 'b'``: the values a key accepts, as a message lists them."""
    return ", ".join(repr(value) for value in values)


def _extra_key(cls: type[Any], key: str) -> str:
    if kind_of(cls, key) is not None:  # Unity-only ones never get here: they are dropped
        return unsupported(key)
    valid = [a.name for a in attrs.fields(cls)] if attrs.has(cls) else []
    # 0.8: a typo (learning_rat, run_idd) stays well above it; an unrelated key that only
    # shares a suffix (checkpoint_freq vs checkpoint_interval, 0.65) falls below it.
    close = difflib.get_close_matches(key, valid, n=1, cutoff=0.8)
    if close:
        return f"unknown key (did you mean {close[0]}?)"
    return f"unknown key (valid keys: {', '.join(valid)})"
