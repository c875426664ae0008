"""Entry-point plugins: discover, load and classify are three separate steps.

======================== ================================================ =================
group                    registration function                            used for
======================== ================================================ =================
``evtrain.stats_writer`` ``(RunOptions) -> list[StatsWriter]``            writers (defaults
                                                                          register here as
                                                                          ``default``)
``evtrain.subscriber``   ``(RunOptions, Bus) -> None``                    any subscriber
``evtrain.trainer``      ``() -> dict[str, type[Trainer]]``               trainer types
``evtrain.initializer``  ``() -> Initializer``                            distributed setup
                                                                          (at most one)
======================== ================================================ =================

This module only finds plugins and imports them; it knows nothing of runs.  Calling their
registration functions with a run's options is :mod:`evtrain.run.wiring`'s: there a plugin that
fails to import, raises, or returns the wrong thing is logged with its name and the reason and
skipped; options can disable a plugin or require it.
"""

from __future__ import annotations

import importlib
import logging
import os
import pkgutil
import sys
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import attrs
import importlib_metadata

from evtrain.errors import ConfigError

logger = logging.getLogger("evtrain.plugins")

STATS_WRITER = "evtrain.stats_writer"
SUBSCRIBER = "evtrain.subscriber"
TRAINER = "evtrain.trainer"
INITIALIZER = "evtrain.initializer"
GROUPS: tuple[str, ...] = (STATS_WRITER, SUBSCRIBER, TRAINER, INITIALIZER)
"""Every plugin group evtrain reads, in the order ``evtrain plugins`` lists them."""


@attrs.frozen(kw_only=True)
class Plugin:
    """A discovered entry point, not yet imported."""

    group: str
    name: str
    value: str
    """``module:attribute`` the entry point names."""
    distribution: str | None
    version: str | None
    entry_point: importlib_metadata.EntryPoint = attrs.field(eq=False, repr=False)

    @property
    def qualified(self) -> str:
        """``group:name``, the unambiguous way to name it in options."""
        return self.qualified_name(self.group, self.name)

    @staticmethod
    def qualified_name(group: str, name: str) -> str:
        """``group:name``."""
        return f"{group}:{name}"

    def matches(self, names: Iterable[str]) -> bool:
        """Whether ``names`` (``name`` or ``group:name`` entries) name this plugin."""
        names = set(names)
        return self.name in names or self.qualified in names

    @property
    def label(self) -> str:
        """How log lines name it: ``'name' (group, from dist version)``."""
        source = f", from {self.distribution} {self.version}" if self.distribution else ""
        return f"{self.name!r} ({self.group}{source})"


@attrs.frozen(kw_only=True)
class LoadedPlugin:
    """A plugin whose object imported and is callable."""

    plugin: Plugin
    obj: Callable[..., Any]


@attrs.frozen(kw_only=True)
class FailedPlugin:
    """A plugin that could not be used, and why."""

    plugin: Plugin
    reason: str


def from_entry_point(entry_point: importlib_metadata.EntryPoint) -> Plugin:
    """Wrap one entry point (tests build ``EntryPoint`` objects directly)."""
    dist = entry_point.dist
    return Plugin(
        group=entry_point.group,
        name=entry_point.name,
        value=entry_point.value,
        distribution=None if dist is None else dist.name,
        version=None if dist is None else dist.version,
        entry_point=entry_point,
    )


def discover(groups: Iterable[str] = GROUPS, paths: Sequence[str] = ()) -> list[Plugin]:
    """Every installed plugin of ``groups``, plus those declared by modules under ``paths``
    (``--plugins``), sorted by group, name and distribution.

    The same distribution seen twice on ``sys.path`` is listed once.
    """
    groups = tuple(groups)
    found: dict[tuple[str, str, str, str | None], Plugin] = {}
    installed = _installed_entry_points()
    for group in groups:
        for entry_point in installed.select(group=group):
            plugin = from_entry_point(entry_point)
            found.setdefault((plugin.group, plugin.name, plugin.value, plugin.distribution), plugin)
    for plugin in discover_paths(paths):
        if plugin.group in groups:
            found.setdefault((plugin.group, plugin.name, plugin.value, plugin.distribution), plugin)
    return sorted(found.values(), key=lambda p: (p.group, p.name, p.distribution or ""))


_scanned: tuple[object, importlib_metadata.EntryPoints] | None = None


def _installed_entry_points() -> importlib_metadata.EntryPoints:
    """Every installed entry point, scanned again only when ``sys.path`` or one of its
    folders has changed (a distribution installed or removed changes its folder's mtime).
    A scan reads every distribution's metadata, tens of milliseconds, and a run asks for
    each plugin group in turn."""
    global _scanned
    key = (
        importlib_metadata.entry_points,  # tests swap it for their own selection
        tuple(sys.path),
        tuple(_mtime(path) for path in sys.path),
    )
    if _scanned is None or _scanned[0] != key:
        _scanned = (key, importlib_metadata.entry_points())
    return _scanned[1]


def _mtime(path: str) -> int | None:
    try:
        return os.stat(path or ".").st_mtime_ns
    except OSError:
        return None


PATH_PLUGINS = "EVTRAIN_PLUGINS"
"""Module attribute a ``--plugins`` module declares: ``{group: {name: registration function}}``,
the same functions an entry point would name."""


def discover_paths(paths: Sequence[str]) -> list[Plugin]:
    """Plugins declared by the top-level modules found under ``paths`` (ML-Agents'
    ``--plugins``).  The paths are appended to ``sys.path``; a module that fails to import is
    logged and skipped.

    :raises ConfigError: a path is missing or not a folder.
    """
    plugins: list[Plugin] = []
    for path in paths:
        if not os.path.isdir(path):
            what = "is not a folder" if os.path.exists(path) else "does not exist"
            raise ConfigError(
                [
                    f"plugins.paths: {path!r} {what}; give a folder of plugin modules "
                    "(--plugins PATH)"
                ]
            )
        if path not in sys.path:
            sys.path.append(path)
        for module_info in sorted(pkgutil.iter_modules([path]), key=lambda m: m.name):
            try:
                module = importlib.import_module(module_info.name)
            except Exception as error:
                logger.warning(
                    "Plugin module %r under %s failed to import: %s: %s. It will not be used.",
                    module_info.name,
                    path,
                    type(error).__name__,
                    error,
                )
                continue
            table = getattr(module, PATH_PLUGINS, {})
            for group, entries in sorted(table.items()):
                for name, function in sorted(entries.items()):
                    value = f"{module.__name__}:{function.__qualname__}"
                    entry_point = importlib_metadata.EntryPoint(name=name, value=value, group=group)
                    plugins.append(
                        Plugin(
                            group=group,
                            name=name,
                            value=value,
                            distribution=f"path:{path}",
                            version=None,
                            entry_point=entry_point,
                        )
                    )
    return plugins


def load(plugin: Plugin) -> LoadedPlugin | FailedPlugin:
    """Import ``plugin``'s object; an import error becomes a :class:`FailedPlugin`."""
    try:
        obj = plugin.entry_point.load()
    except Exception as error:
        return FailedPlugin(plugin=plugin, reason=f"import failed: {type(error).__name__}: {error}")
    if not callable(obj):
        return FailedPlugin(
            plugin=plugin, reason=f"{plugin.value} is a {type(obj).__name__}, not a function"
        )
    return LoadedPlugin(plugin=plugin, obj=obj)


def classify(
    results: Iterable[LoadedPlugin | FailedPlugin],
) -> tuple[dict[str, list[LoadedPlugin]], list[FailedPlugin]]:
    """Split load results into loaded plugins by group, and failures."""
    loaded: dict[str, list[LoadedPlugin]] = {group: [] for group in GROUPS}
    failed: list[FailedPlugin] = []
    for result in results:
        if isinstance(result, FailedPlugin):
            failed.append(result)
        else:
            loaded.setdefault(result.plugin.group, []).append(result)
    return loaded, failed
