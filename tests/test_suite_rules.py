"""Rules of the test suite itself, checked on its sources."""

from __future__ import annotations

import ast
from pathlib import Path

from tests.helpers import ROOT

SUITES = [ROOT / "tests", ROOT / "examples" / "plugin" / "tests"]


def imported_modules(path: Path) -> list[tuple[int, str]]:
    """Every module ``path`` imports, with its line (``from a import b`` counts ``a`` and
    ``a.b``)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module is not None and node.level == 0:
            found.append((node.lineno, node.module))
            found += [(node.lineno, f"{node.module}.{alias.name}") for alias in node.names]
    return found


def test_no_module_of_the_suite_imports_a_test_module() -> None:
    """Shared helpers live in helper modules (tests/helpers.py, conftest.py, ...): importing a
    test module runs its module-level code again under another name and ties two test files'
    edits together."""
    offenders = [
        f"{path.relative_to(ROOT)}:{line} imports {module}"
        for suite in SUITES
        for path in sorted(suite.rglob("*.py"))
        for line, module in imported_modules(path)
        if module.rpartition(".")[2].startswith("test_")
        and module.partition(".")[0] in ("tests", "evtrain_example_plugin")
    ]
    assert offenders == []


def test_the_check_sees_an_import_of_a_test_module(tmp_path: Path) -> None:
    module = tmp_path / "test_x.py"
    module.write_text(
        "import tests.test_learn\nfrom tests.writers import test_wandb_writer\n"
        "from tests.helpers import config\n"
    )
    assert [m for _, m in imported_modules(module) if m.rpartition(".")[2].startswith("test_")] == [
        "tests.test_learn",
        "tests.writers.test_wandb_writer",
    ]
