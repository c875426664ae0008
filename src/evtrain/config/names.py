"""The one rule for the names that become folders and files of a run: run ids and behavior names.

A run id is the name of ``results_dir/<run_id>``, a behavior name that of
``results_dir/<run_id>/<behavior>`` and ``<behavior>.onnx``.  Were they paths, ``--run-id ..``
with ``--force`` would remove the parent of the results folder and a behavior named ``../../x``
would write outside the run; so each is refused unless it names one entry of its folder.
"""

from __future__ import annotations

import unicodedata
from typing import Any

import attrs

NAME_RULE = "a folder name (not empty, not . or .., no / or \\, no control characters)"
"""What a run id or a behavior name must be, as the errors say it."""


def is_name(name: str) -> bool:
    """Whether ``name`` is one entry of a folder: not empty, ``.`` or ``..``, without a
    separator (``/``, ``\\``: an absolute path holds one) or a control character (a newline,
    NUL, an escape sequence)."""
    return (
        name not in ("", ".", "..")
        and "/" not in name
        and "\\" not in name
        and not any(unicodedata.category(c) == "Cc" for c in name)
    )


def name_problem(name: str, what: str = "") -> str | None:
    """``expected [what ]a folder name (...), got 'name'``, or ``None`` if it is one."""
    if is_name(name):
        return None
    return f"expected {what + ' ' if what else ''}{NAME_RULE}, got {name!r}"


def folder_name(_: Any, attribute: attrs.Attribute[Any], value: str | None) -> None:
    """attrs validator of an option that names a run (``None`` passes: the option is unset)."""
    problem = None if value is None else name_problem(value)
    if problem is not None:
        raise ValueError(problem, attribute)


def behavior_names(_: Any, attribute: attrs.Attribute[Any], value: dict[str, Any]) -> None:
    """attrs validator of ``behaviors``: each key names the behavior's folder."""
    for name in value:
        problem = name_problem(name, "each behavior name to be")
        if problem is not None:
            raise ValueError(problem, attribute)
