"""What a journal holds: a segment's first line (the format and its version), and per record
one payload as JSON of plain values, never code.

A journal may come from elsewhere — a run folder copied from another machine, a crafted file
— and ``evtrain sync`` or ``--resume`` reads it back.  So a record names its payload's class
only by a registered name and holds only plain fields; decoding looks the name up in a table
of classes this process already has and builds the payload through that class's own
constructor.  A name missing from the table is refused; nothing is imported, nothing is
unpickled.

The table holds evtrain's own payload classes and enums (:mod:`evtrain.events`) from the
start; a class of a user's own signal is added by :func:`register_payload_type`, or the first
time this process journals one of its payloads (the class is live here, so it is trusted).

The JSON, by value (every JSON object is one tagged value, so none can pass for another):

=====================  ==========================================================
``None``, bool, int,   themselves (floats ``NaN``/``Infinity`` as Python's ``json``)
float, str
list                   a JSON array of encoded items
tuple                  ``{"tuple": [...]}``
mapping                ``{"map": [[key, value], ...]}`` (keys encoded too)
path                   ``{"path": "..."}``
enum member            ``{"enum": "module:Class", "member": "NAME"}``
attrs instance         ``{"attrs": "module:Class", "fields": {"name": value, ...}}``
numpy array            ``{"array": dtype, "shape": [...], "data": base64 of the bytes}``
numpy scalar           its Python value
=====================  ==========================================================
"""

from __future__ import annotations

import base64
import enum
import json
from collections.abc import Mapping
from pathlib import Path, PurePath
from typing import Any, BinaryIO, TypeVar

import attrs
import numpy as np

from evtrain.errors import JournalFormatError
from evtrain.events import payloads, stats

T = TypeVar("T", bound=type)

FORMAT = b"evtrain-journal"
VERSION = 2
MAGIC = FORMAT + b" %d\n" % VERSION
"""The first line of every journal segment: the format and its version."""
PICKLE_MAGIC = b"EVTJRNL1"
"""The first bytes of a segment of format 1 (pickled payloads), no longer read."""

_TYPES: dict[str, type] = {}
"""Registered name to class: the only classes a record can name."""


def type_name(cls: type) -> str:
    """A class's name in records: ``module:QualName``."""
    return f"{cls.__module__}:{cls.__qualname__}"


def register_payload_type(cls: T) -> T:
    """Let journals of this process name ``cls`` (an attrs class or an enum); a decorator.

    A payload of a user's own signal is registered the first time it is journaled; a process
    that only reads journals (``evtrain sync``) registers it by importing the module that
    defines it, which calls this.

    :raises TypeError: ``cls`` is neither an attrs class nor an enum.
    """
    if not (attrs.has(cls) or issubclass(cls, enum.Enum)):
        raise TypeError(f"a journal payload type is an attrs class or an enum, got {cls!r}")
    _TYPES[type_name(cls)] = cls
    return cls


for _module in (payloads, stats):
    for _value in list(vars(_module).values()):
        if (
            isinstance(_value, type)
            and _value.__module__ == _module.__name__
            and (attrs.has(_value) or issubclass(_value, enum.Enum))
        ):
            register_payload_type(_value)


def encode(payload: Any) -> bytes:
    """``payload`` as a record's bytes.

    :raises TypeError: it holds a value of a kind the table above does not list.
    """
    return json.dumps(_encode(payload), separators=(",", ":")).encode()


def decode(data: bytes) -> Any:
    """The payload of a record's bytes.

    :raises ValueError: they are not what :func:`encode` writes, or name a class this process
        has not registered.
    """
    try:
        return _decode(json.loads(data))
    except RecursionError:
        raise ValueError("a record nested too deep") from None


def _encode(value: Any) -> Any:
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, enum.Enum):  # before int: an IntEnum is an int
        return {"enum": _registered(type(value)), "member": value.name}
    if isinstance(value, (int, float)):
        return value
    if attrs.has(type(value)):
        fields = {f.alias: _encode(getattr(value, f.name)) for f in attrs.fields(type(value))}
        return {"attrs": _registered(type(value)), "fields": fields}
    if isinstance(value, list):
        return [_encode(v) for v in value]
    if isinstance(value, tuple):
        return {"tuple": [_encode(v) for v in value]}
    if isinstance(value, Mapping):
        return {"map": [[_encode(k), _encode(v)] for k, v in value.items()]}
    if isinstance(value, PurePath):
        return {"path": str(value)}
    if isinstance(value, np.ndarray):
        if value.dtype.hasobject:
            raise TypeError("cannot journal a numpy array of Python objects")
        data = base64.b64encode(np.ascontiguousarray(value).tobytes()).decode()
        return {"array": value.dtype.str, "shape": list(value.shape), "data": data}
    if isinstance(value, np.generic):
        return _encode(value.item())
    raise TypeError(f"cannot journal a {type(value).__module__}.{type(value).__qualname__}")


def _registered(cls: type) -> str:
    name = type_name(cls)
    if _TYPES.get(name) is not cls:
        register_payload_type(cls)  # live in this process: trusted
    return name


def _decode(value: Any) -> Any:
    if isinstance(value, list):
        return [_decode(v) for v in value]
    if not isinstance(value, dict):
        return value
    tag = next(iter(value), None)
    if tag == "tuple":
        return tuple(_decode(v) for v in _list(value, "tuple"))
    if tag == "map":
        return {_decode(k): _decode(v) for k, v in map(_pair, _list(value, "map"))}
    if tag == "path":
        return Path(_str(value, "path"))
    if tag == "enum":
        cls = _lookup(_str(value, "enum"))
        if not issubclass(cls, enum.Enum):
            raise ValueError(f"{type_name(cls)} is not an enum")
        return cls[_str(value, "member")]
    if tag == "attrs":
        cls = _lookup(_str(value, "attrs"))
        fields = value.get("fields")
        if not attrs.has(cls) or not isinstance(fields, dict):
            raise ValueError(f"a record of {type_name(cls)} without fields")
        return cls(**{str(k): _decode(v) for k, v in fields.items()})
    if tag == "array":
        shape = _list(value, "shape")
        dtype = np.dtype(_str(value, "array"))
        if dtype.hasobject or not all(isinstance(n, int) for n in shape):
            raise ValueError("an array record of objects, or with a bad shape")
        raw = base64.b64decode(_str(value, "data"), validate=True)
        return np.frombuffer(raw, dtype=dtype).reshape(shape).copy()
    raise ValueError(
        f"an object tagged {tag!r}, expected one of tuple, map, path, enum, attrs, array"
    )


def _lookup(name: str) -> type:
    try:
        return _TYPES[name]
    except KeyError:
        raise ValueError(
            f"payload type {name!r} is not registered in this process (evtrain decodes only "
            "its own payload types and those registered with register_payload_type)"
        ) from None


def _list(value: dict[str, Any], key: str) -> list[Any]:
    item = value.get(key)
    if not isinstance(item, list):
        raise ValueError(f"{key!r}: expected a list, got {type(item).__name__}")
    return item


def _str(value: dict[str, Any], key: str) -> str:
    item = value.get(key)
    if not isinstance(item, str):
        raise ValueError(f"{key!r}: expected a string, got {type(item).__name__}")
    return item


def _pair(item: Any) -> tuple[Any, Any]:
    if not isinstance(item, list) or len(item) != 2:
        raise ValueError("a map entry that is not a [key, value] pair")
    return item[0], item[1]


def check_magic(path: Path, file: BinaryIO) -> bool:
    """Read a segment's first line: ``True`` for MAGIC, ``False`` for a segment cut short
    before its first line was whole (a crash right after it was created).

    :raises JournalFormatError: anything else.
    """
    head = file.read(len(MAGIC))
    if head == MAGIC:
        return True
    if MAGIC.startswith(head):
        return False
    folder = path.parent
    if head.startswith(PICKLE_MAGIC):
        what = (
            "it is in format 1 (pickled payloads) of an earlier evtrain, which is no longer "
            "read because unpickling a file can run code; deliver it with the evtrain that "
            f"wrote it, or remove {folder} to give up what it holds"
        )
    elif head.startswith(FORMAT + b" "):
        version = head[len(FORMAT) + 1 :].split(b"\n")[0].decode("ascii", "replace")[:20]
        what = (
            f"it is in format version {version!r}, this evtrain reads version {VERSION}; "
            f"deliver it with the evtrain that wrote it, or remove {folder}"
        )
    else:
        what = (
            f"it does not start with {MAGIC.decode().strip()!r}; remove {folder} if nothing "
            "in it is yours"
        )
    raise JournalFormatError(f"{path} is not an evtrain journal: {what}")
