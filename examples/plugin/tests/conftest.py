"""Make the plugin importable from its source tree, without installing it.

The main repository's ``pytest`` collects these tests too (``testpaths``), in a venv where
the plugin is usually not installed.  The package is loaded from ``src/`` by file location
rather than by putting ``src/`` on ``sys.path``: an editable install leaves an ``*.egg-info``
folder in ``src/``, and on ``sys.path`` its entry points would show up in every other test's
plugin discovery.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

PACKAGE = "evtrain_example_plugin"
PACKAGE_DIR = Path(__file__).resolve().parent.parent / "src" / PACKAGE


def _load_from_source() -> None:
    spec = importlib.util.spec_from_file_location(
        PACKAGE, PACKAGE_DIR / "__init__.py", submodule_search_locations=[str(PACKAGE_DIR)]
    )
    assert spec is not None and spec.loader is not None, f"{PACKAGE_DIR} is not a package"
    module = importlib.util.module_from_spec(spec)
    # Registered before running it: the package's own imports of its submodules look it up.
    sys.modules[PACKAGE] = module
    spec.loader.exec_module(module)


# The source tree wins even where the plugin is installed: these tests are about this code.
_load_from_source()
