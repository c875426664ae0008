"""Text rendering shared by the console and TensorBoard writers."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def render_nested(value: Any, depth: int = 0) -> str:
    """Render a nested mapping as ML-Agents prints hyperparameters: one ``key:\\tvalue`` line per
    leaf, each line starting with a tab and two spaces per level of nesting.

    Unlike ML-Agents, a key that holds a mapping ends its line at the colon (ML-Agents leaves a
    trailing tab there).  The leading tab also makes TensorBoard's markdown text plugin show the
    block as preformatted text, so the indentation survives there too.

    :param value: a mapping (rendered line by line) or any other value (``str(value)``).
    :param depth: nesting level of ``value``'s keys.
    """
    if not isinstance(value, Mapping):
        return str(value)
    if not value:
        return "{}"
    lines = []
    indent = "\t" + "  " * depth
    for key, item in value.items():
        if isinstance(item, Mapping) and item:  # an empty one reads better as {}
            lines.append(f"{indent}{key}:")
            lines.append(render_nested(item, depth + 1))
        else:
            lines.append(f"{indent}{key}:\t{render_nested(item, depth + 1)}")
    return "\n".join(lines)
