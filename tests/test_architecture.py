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
            "evtrain.evaluation.video",
            "evtrain.extras",
            "evtrain.checksums",
        ),
    ),
    ("events", ("evtrain.events",)),
    ("bus", ("evtrain.bus", "evtrain.stopping")),
    ("world", ("evtrain.world",)),
    ("multiagent", ("evtrain.multiagent",)),
    ("unity", ("evtrain.unity",)),
    ("evaluation", ("evtrain.evaluation",)),
    ("trainers", ("evtrain.trainers",)),
    ("config", ("evtrain.config",)),
    ("plugins", ("evtrain.plugins",)),
    ("distributed", ("evtrain.distributed",)),
    ("writers", ("evtrain_writers",)),
    ("run", ("evtrain.run",)),
    ("compare", ("evtrain.compare",)),
    ("sweep", ("evtrain.sweep",)),
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
    assert "evtrain.run.checkpoints.checkpoint" in GRAPH["evtrain.run.learn"]


# -- the rooms of evtrain.trainers ---------------------------------------------------------------

TRAINERS = "evtrain.trainers"
SHARED_ROOMS: tuple[str, ...] = ("ghost", "loops", "networks", "rewards")
"""The folders of :mod:`evtrain.trainers` every algorithm builds on.  Every other folder of it
is an algorithm (``ppo``, ``sac``, ``poca``, ``mappo``; a new one is one more folder);
``ghost`` (self-play) drives any algorithm from outside and imports none.  The modules
directly in ``trainers/`` (base, registry, settings, threaded, optim, envs, finite,
observations, demonstrations) are shared too."""

TRAINER_RULES: tuple[tuple[str, str], ...] = (
    ("networks", "never import an algorithm"),
    ("rewards", "never import an algorithm"),
    ("loops", "know no algorithm"),
    ("an algorithm", "never imports another algorithm"),
    ("trainers/*.py", "never import an algorithm (the registry names them as strings)"),
)
"""The sub-layers docs/architecture.md states; :func:`algorithm_of` and the test below enforce
them all with one rule: only an algorithm's own modules import it."""


def algorithm_of(module: str) -> str | None:
    """The algorithm folder ``module`` is in (``evtrain.trainers.ppo``), or ``None``."""
    parts = module.split(".")
    if parts[:2] != TRAINERS.split(".") or len(parts) < 3 or parts[2] in SHARED_ROOMS:
        return None
    folder = ".".join(parts[:3])
    is_package = MODULES.get(folder, Path()).name == "__init__.py"
    return folder if is_package else None


def test_the_algorithms_are_the_folders_of_trainers_but_the_shared_rooms() -> None:
    algorithms = sorted({a for m in MODULES if (a := algorithm_of(m)) is not None})
    assert algorithms == [
        "evtrain.trainers.mappo",
        "evtrain.trainers.poca",
        "evtrain.trainers.ppo",
        "evtrain.trainers.sac",
    ]
    assert algorithm_of("evtrain.trainers.ppo.update") == "evtrain.trainers.ppo"
    assert algorithm_of("evtrain.trainers.networks.mlp") is None
    assert algorithm_of("evtrain.trainers.base") is None
    assert algorithm_of("evtrain.run.loop") is None


@pytest.mark.parametrize("module", sorted(m for m in MODULES if m.startswith(TRAINERS)))
def test_only_an_algorithms_own_modules_import_it(module: str) -> None:
    own = algorithm_of(module)
    crossing = [
        f"{MODULES[module].relative_to(ROOT)}:{line} imports {target} (only "
        f"{algorithm_of(target)}'s own modules may)"
        for target, line in imports_of(module)
        if algorithm_of(target) not in (None, own)
    ]
    assert crossing == []


# -- sizes ---------------------------------------------------------------------------------------

LIMITS = {"module": 400, "class": 300, "function": 60}
"""STYLE.md's guideline, in lines, held in :mod:`evtrain.trainers` (its docstrings included)."""

OVER_LIMITS: set[str] = set()
"""What is still over :data:`LIMITS` in ``trainers/``: the test fails on anything else over, and
on anything listed here that is no longer over (so the list only shrinks)."""


def sizes(package: str) -> Iterator[tuple[str, str, int]]:
    """(kind, qualified name, lines) of every module, class and function of ``package``."""
    for module, path in MODULES.items():
        if module != package and not module.startswith(package + "."):
            continue
        source = path.read_text()
        yield "module", module, len(source.splitlines())
        yield from _definitions(ast.parse(source, str(path)), module)


def _definitions(node: ast.AST, prefix: str) -> Iterator[tuple[str, str, int]]:
    for child in ast.iter_child_nodes(node):
        if isinstance(child, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            kind = "class" if isinstance(child, ast.ClassDef) else "function"
            name = f"{prefix}.{child.name}"
            assert child.end_lineno is not None
            yield kind, name, child.end_lineno - child.lineno + 1
            yield from _definitions(child, name)
        else:
            yield from _definitions(child, prefix)


def test_trainers_modules_classes_and_functions_keep_to_the_size_limits() -> None:
    measured = sorted(sizes(TRAINERS), key=lambda s: -s[2])
    for kind in LIMITS:
        largest = next(s for s in measured if s[0] == kind)
        print(f"largest {kind}: {largest[1]} ({largest[2]} lines, limit {LIMITS[kind]})")
    over = {f"{kind} {name}" for kind, name, lines in measured if lines > LIMITS[kind]}
    assert over == OVER_LIMITS


def test_the_documented_trainer_paths_still_import() -> None:
    """The paths of before the folders, named in docs/ and by plugins, reach the same objects."""
    from evtrain.trainers import PPOTrainer, SACTrainer, Trainer, compute_gae
    from evtrain.trainers.base import Trainer as BaseTrainer
    from evtrain.trainers.loops.gae import compute_gae as loop_gae
    from evtrain.trainers.mappo import MAPPOTrainer
    from evtrain.trainers.network_settings import MemorySettings, NetworkSettings
    from evtrain.trainers.networks import ObservationNormalizer, flatten_parameters
    from evtrain.trainers.networks.mlp import flatten_parameters as mlp_flatten
    from evtrain.trainers.networks.normalizer import ObservationNormalizer as Normalizer
    from evtrain.trainers.poca import POCATrainer
    from evtrain.trainers.ppo import PPOTrainer as DocumentedPPO
    from evtrain.trainers.ppo import clipped_surrogate_loss
    from evtrain.trainers.ppo.update import clipped_surrogate_loss as update_loss
    from evtrain.trainers.registry import TRAINER_TYPES
    from evtrain.trainers.sac import SACTrainer as DocumentedSAC
    from evtrain.trainers.settings import MemorySettings as SettingsMemory
    from evtrain.trainers.settings import NetworkSettings as SettingsNetwork

    assert PPOTrainer is DocumentedPPO is TRAINER_TYPES["ppo"].load()
    assert SACTrainer is DocumentedSAC is TRAINER_TYPES["sac"].load()
    assert TRAINER_TYPES["ppo"].trainer == "evtrain.trainers.ppo:PPOTrainer"
    assert TRAINER_TYPES["sac"].trainer == "evtrain.trainers.sac:SACTrainer"
    assert POCATrainer is TRAINER_TYPES["poca"].load()
    assert MAPPOTrainer is TRAINER_TYPES["mappo"].load()
    assert Trainer is BaseTrainer and compute_gae is loop_gae
    assert clipped_surrogate_loss is update_loss
    assert (NetworkSettings, MemorySettings) == (SettingsNetwork, SettingsMemory)
    assert (ObservationNormalizer, flatten_parameters) == (Normalizer, mlp_flatten)


# -- the rooms of evtrain.run ---------------------------------------------------------------------

RUN_ROOMS = ("checkpoints", "environments", "evaluation", "parameters")
"""The sub-packages of :mod:`evtrain.run` (docs/architecture.md's ``run`` row)."""

MOST_FLAT_IN_A_FOLDER = 15
"""STYLE.md: a folder with more than ~15 modules wants rooms of its own."""


def test_run_is_rooms_and_at_most_15_modules_flat() -> None:
    run = ROOT / "src" / "evtrain" / "run"
    flat = sorted(path.name for path in run.glob("*.py"))
    rooms = sorted(p.name for p in run.iterdir() if (p / "__init__.py").exists())
    assert len(flat) <= MOST_FLAT_IN_A_FOLDER, flat
    assert rooms == sorted(RUN_ROOMS)
    for room in RUN_ROOMS:
        assert len(list((run / room).glob("*.py"))) <= MOST_FLAT_IN_A_FOLDER, room


def test_the_documented_run_paths_still_import() -> None:
    """The flat paths docs/ named before run/ had rooms reach the rooms' objects."""
    from evtrain.run.checkpoints import saver
    from evtrain.run.env_parameters import EnvironmentParameters  # regroup: keep
    from evtrain.run.parameters import env_parameters, pettingzoo_parameters
    from evtrain.run.pettingzoo_parameters import ParallelParameters  # regroup: keep
    from evtrain.run.saver import BackgroundSaver  # regroup: keep

    assert BackgroundSaver is saver.BackgroundSaver
    assert EnvironmentParameters is env_parameters.EnvironmentParameters
    assert ParallelParameters is pettingzoo_parameters.ParallelParameters
