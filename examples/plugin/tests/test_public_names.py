"""The plugin contract is public: the example plugin uses only evtrain's public names.

Each module of the plugin is parsed.  It may import no evtrain module or name that starts with
``_``, and every ``_name`` attribute it reads, writes or defines must be the plugin's own: one
it assigns or defines itself, and one that no evtrain class among its classes' bases has (so a
plugin never reaches into, or overrides, a private part of evtrain).
"""

from __future__ import annotations

import ast
import importlib
import inspect
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "src" / "evtrain_example_plugin"
MODULES = sorted(PACKAGE.glob("*.py"))


def private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def evtrain_imports(tree: ast.AST) -> list[str]:
    """The private evtrain modules and names ``tree`` imports."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "evtrain":
            module = node.module or ""
            found += [module] if any(map(private, module.split("."))) else []
            found += [f"{module}.{a.name}" for a in node.names if private(a.name)]
        elif isinstance(node, ast.Import):
            found += [
                a.name
                for a in node.names
                if a.name.split(".")[0] == "evtrain" and any(map(private, a.name.split(".")))
            ]
    return found


def defined_names(tree: ast.AST) -> set[str]:
    """The private names ``tree`` defines: ``self._x = ...``, ``def _x``, ``_x = ...`` in a
    class body or at module level."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
            names.add(node.attr)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
    return {name for name in names if private(name)}


def evtrain_private_names(module_name: str) -> set[str]:
    """The private names of the evtrain classes the module's classes derive from: their
    methods and class attributes, and the attributes their code assigns."""
    module = importlib.import_module(module_name)
    names: set[str] = set()
    for _, cls in inspect.getmembers(module, inspect.isclass):
        for base in cls.__mro__:
            if not base.__module__.startswith("evtrain."):
                continue
            names |= {name for name in vars(base) if private(name)}
            names |= defined_names(ast.parse(inspect.getsource(base)))
    return names


def violations(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found = [f"imports {name}" for name in evtrain_imports(tree)]
    own = defined_names(tree)
    evtrains = evtrain_private_names(f"evtrain_example_plugin.{path.stem}")
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute):
            name, line = node.attr, node.lineno
        elif isinstance(node, ast.FunctionDef):
            name, line = node.name, node.lineno
        else:
            continue
        if not private(name):
            continue
        if name not in own:
            found.append(f"line {line}: {name} is not the plugin's own")
        elif name in evtrains:
            found.append(f"line {line}: {name} is private to an evtrain base class")
    return found


@pytest.mark.parametrize("path", MODULES, ids=[p.stem for p in MODULES])
def test_the_plugin_uses_only_public_names_of_evtrain(path: Path) -> None:
    assert violations(path) == []


def test_the_check_finds_what_it_looks_for(tmp_path: Path) -> None:
    """A module that overrides a loop's private step and reads a trainer's private state."""
    module = tmp_path / "a2c.py"
    module.write_text(
        "from evtrain.trainers.base import linear_decay as _decay\n"
        "from evtrain.trainers.loops.on_policy import OnPolicyTrainer\n"
        "class Sneaky(OnPolicyTrainer):\n"
        "    def _update(self, batch):\n"
        "        return self._acting\n",
        encoding="utf-8",
    )
    # (the names of the real a2c's evtrain bases stand in for the crafted module's)
    assert violations(module) == [
        "line 4: _update is private to an evtrain base class",
        "line 5: _acting is not the plugin's own",
    ]
    tree = ast.parse("import evtrain._private\nfrom evtrain.trainers import _x, public\n")
    assert evtrain_imports(tree) == ["evtrain._private", "evtrain.trainers._x"]
