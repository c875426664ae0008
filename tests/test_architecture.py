"""The package tree reads as the architecture: every import, including those made only for type
checking and those inside functions, goes to the importing module's own layer or one below it,
and no two modules import each other, directly or round a circle.

The layer order is the one docs/architecture.md draws; this test is what holds the code to it.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers import ROOT

LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    (
        "leaves",
        (
            "evtrain._version",
            "evtrain.errors",
            "evtrain.atomic",
            "evtrain.timers",
            "evtrain.ranks",
            "evtrain.export",
        ),
    ),
    ("events", ("evtrain.events",)),
    ("bus", ("evtrain.bus",)),
    ("world", ("evtrain.world",)),
    ("trainers", ("evtrain.trainers",)),
    ("config", ("evtrain.config",)),
    ("plugins", ("evtrain.plugins",)),
    ("distributed", ("evtrain.distributed",)),
    ("writers", ("evtrain_writers",)),
    ("run", ("evtrain.run",)),
    ("face", ("evtrain", "evtrain.__main__", "evtrain.cli", "evtrain.demo", "evtrain.testing")),
)
"""From the bottom up.  ``evtrain`` itself is the package's ``__init__``: the public face."""

SOURCES = (ROOT / "src", ROOT / "writers")


def module_files() -> dict[str, Path]:
    modules: dict[str, Path] = {}
    for root in SOURCES:
        for path in sorted(root.rglob("*.py")):
            parts = list(path.relative_to(root).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            modules[".".join(parts)] = path
    return modules


MODULES = module_files()


def _known(name: str) -> str | None:
    """The module of ours that ``name`` (a module, or a name in one) is, if any."""
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name or None


def imports_of(module: str) -> Iterator[tuple[str, int]]:
    """Every module of ours that ``module`` imports, anywhere in its body, with the line."""
    path = MODULES[module]
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            # `from pkg import mod` imports pkg.mod; `from mod import name` imports mod
            targets = [f"{base}.{alias.name}" for alias in node.names]
        else:
            continue
        for target in targets:
            found = _known(target)
            if found is not None and found != module:
                yield found, node.lineno


def layer_of(module: str) -> int:
    best: tuple[int, int] | None = None  # (prefix length, layer) of the longest match
    for index, (_, prefixes) in enumerate(LAYERS):
        for prefix in prefixes:
            inside = module == prefix or module.startswith(prefix + ".")
            if inside and (best is None or len(prefix) > best[0]):
                best = (len(prefix), index)
    assert best is not None, f"{module} is in no layer: add it to LAYERS and the docs"
    return best[1]


GRAPH = {module: sorted({target for target, _ in imports_of(module)}) for module in MODULES}


def test_every_module_has_a_layer() -> None:
    for module in MODULES:
        layer_of(module)


@pytest.mark.parametrize("module", sorted(MODULES))
def test_a_module_imports_only_its_own_layer_or_lower(module: str) -> None:
    own = layer_of(module)
    upward = [
        f"{MODULES[module].relative_to(ROOT)}:{line} imports {target} "
        f"({LAYERS[layer_of(target)][0]} is above {LAYERS[own][0]})"
        for target, line in imports_of(module)
        if layer_of(target) > own
    ]
    assert upward == []


def test_no_module_reaches_the_default_writers_but_through_entry_points() -> None:
    reaching = [m for m in MODULES if m.startswith("evtrain") and "evtrain_writers" in GRAPH[m]]
    assert [m for m in reaching if not m.startswith("evtrain_writers")] == []


def cycles(graph: dict[str, list[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for successor in graph[node]:
            if successor not in index:
                visit(successor)
                low[node] = min(low[node], low[successor])
            elif successor in on_stack:
                low[node] = min(low[node], index[successor])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in graph:
        if node not in index:
            visit(node)
    return found


def test_no_import_cycle_between_modules() -> None:
    assert cycles(GRAPH) == []


def test_the_cycle_finder_finds_a_circle() -> None:
    assert cycles({"a": ["b"], "b": ["c"], "c": ["a"], "d": ["a"]}) == [["a", "b", "c"]]


def test_imports_of_sees_type_checking_and_function_level_imports() -> None:
    # evtrain.run.learn imports the checkpoint manager only for type checking, and inside
    # a function: both count.
    assert "evtrain.run.checkpoint" in GRAPH["evtrain.run.learn"]
