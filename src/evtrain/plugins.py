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

A plugin that fails to import, raises, or returns the wrong thing is logged with its name and
the reason and skipped; the others load.  Options can disable a plugin or require it (then its
failure stops the run with :class:`~evtrain.errors.PluginError`).  ``KeyboardInterrupt`` and
``SystemExit`` raised by a plugin are never swallowed.
"""

from __future__ import annotations

import importlib
import logging
import os
import pkgutil
import sys
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

import attrs
import importlib_metadata

from evtrain.errors import ConfigError, PluginError
from evtrain.stats import StatsWriter

if TYPE_CHECKING:
    from evtrain.bus import Bus
    from evtrain.distributed import Initializer
    from evtrain.registry import TrainerType
    from evtrain.settings import RunOptions

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
        return f"{self.group}:{self.name}"

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
    for group in groups:
        for entry_point in importlib_metadata.entry_points(group=group):
            plugin = from_entry_point(entry_point)
            found.setdefault((plugin.group, plugin.name, plugin.value, plugin.distribution), plugin)
    for plugin in discover_paths(paths):
        if plugin.group in groups:
            found.setdefault((plugin.group, plugin.name, plugin.value, plugin.distribution), plugin)
    return sorted(found.values(), key=lambda p: (p.group, p.name, p.distribution or ""))


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


def _matches(plugin: Plugin, names: Sequence[str]) -> bool:
    return plugin.name in names or plugin.qualified in names


class _Selection:
    """Applies ``plugins.disabled``/``plugins.required`` to one group, and reports failures."""

    def __init__(
        self,
        group: str,
        run_options: RunOptions,
        found: Sequence[Plugin] | None,
    ) -> None:
        self.group = group
        required = run_options.plugins.required
        self.required = [r for r in required if ":" not in r or r.startswith(group + ":")]
        self.disabled = run_options.plugins.disabled
        self.paths = run_options.plugins.paths
        self.found = list(discover([group], self.paths) if found is None else found)

    def plugins(self) -> list[Plugin]:
        found = self.found
        chosen = [p for p in found if not _matches(p, self.disabled)]
        for name in self.required:
            if ":" not in name and any(
                _matches(p, [name]) for p in discover(GROUPS, self.paths)
            ):
                continue  # a plain name is satisfied by whichever group provides it
            if not any(_matches(p, [name]) for p in chosen):
                have = ", ".join(p.qualified for p in found) or "none"
                raise PluginError(
                    f"required plugin {name!r} is not installed or is disabled (installed in "
                    f"{self.group}: {have}). Install its package, or remove it from "
                    "plugins.required."
                )
        return chosen

    def fail(self, plugin: Plugin, reason: str, error: BaseException | None = None) -> None:
        message = f"Plugin {plugin.label} failed: {reason}. This plugin will not be used."
        if _matches(plugin, self.required):
            raise PluginError(
                f"Plugin {plugin.label} is required but failed: {reason}. Fix the plugin, or "
                "remove it from plugins.required."
            ) from error
        logger.warning(message, exc_info=error)


def _call_each(selection: _Selection, *args: Any) -> Iterator[tuple[Plugin, Any]]:
    """Load and call each selected plugin with ``args``; yield what each returned.  Import
    and call failures are reported through ``selection`` and skipped."""
    for plugin in selection.plugins():
        result = load(plugin)
        if isinstance(result, FailedPlugin):
            selection.fail(plugin, result.reason)
            continue
        try:
            made = result.obj(*args)
        except Exception as error:  # isolate each plugin
            selection.fail(plugin, f"raised {type(error).__name__}: {error}", error)
            continue
        yield plugin, made


def register_stats_writer_plugins(
    run_options: RunOptions, found: Sequence[Plugin] | None = None
) -> list[StatsWriter]:
    """Call every ``evtrain.stats_writer`` plugin with ``run_options``; return all writers.

    ``found`` replaces discovery (tests pass plugins built from ``EntryPoint`` objects).
    """
    selection = _Selection(STATS_WRITER, run_options, found)
    writers: list[StatsWriter] = []
    if not any(p.name == "default" for p in selection.found):
        writers.extend(_fallback_default_writers(run_options))
    for plugin, made in _call_each(selection, run_options):
        if not isinstance(made, (list, tuple)) or not all(isinstance(w, StatsWriter) for w in made):
            selection.fail(plugin, f"returned {made!r}, expected a list of StatsWriter instances")
            continue
        writers.extend(made)
    return writers


def register_subscriber_plugins(
    run_options: RunOptions, bus: Bus, found: Sequence[Plugin] | None = None
) -> list[Plugin]:
    """Call every ``evtrain.subscriber`` plugin with ``(run_options, bus)``; return those that
    registered without error.  ``found`` replaces discovery."""
    selection = _Selection(SUBSCRIBER, run_options, found)
    return [plugin for plugin, _ in _call_each(selection, run_options, bus)]


def load_trainer_plugins(
    run_options: RunOptions, found: Sequence[Plugin] | None = None
) -> list[TrainerType]:
    """Call every ``evtrain.trainer`` plugin; each returns ``{name: trainer class}`` where the
    class has a ``settings_type`` attrs class (its ``hyperparameters``).  Failures are logged
    and skipped, or raise :class:`PluginError` when required."""
    from evtrain.registry import TrainerType

    selection = _Selection(TRAINER, run_options, found)
    types: list[TrainerType] = []
    for plugin, made in _call_each(selection):
        valid = isinstance(made, dict) and all(
            isinstance(name, str)
            and isinstance(cls, type)
            and attrs.has(getattr(cls, "settings_type", object))
            and callable(getattr(cls, "advance", None))
            for name, cls in made.items()
        )
        if not valid:
            selection.fail(
                plugin,
                f"returned {made!r}, expected {{name: Trainer subclass with a settings_type "
                "attrs class}}",
            )
            continue
        source = plugin.distribution or plugin.value
        types.extend(
            TrainerType(name=name, settings=cls.settings_type, trainer=cls, source=source)
            for name, cls in made.items()
        )
    return types


NO_INITIALIZER = "none"
"""``plugins.initializer`` value (``--initializer none``) that runs without any initializer."""


def load_initializer(
    run_options: RunOptions, found: Sequence[Plugin] | None = None
) -> Initializer | None:
    """The run's initializer, made but not loaded: the one ``plugins.initializer`` names, or
    else the one installed, not disabled, that applies to this process
    (:meth:`~evtrain.distributed.Initializer.applies`); ``None`` when none does.

    Unlike other plugins, an initializer that fails stops the run: without the process group
    it was to set up, every rank would train its own model into the same folder.

    :raises PluginError: several apply and none is chosen, the chosen one is not available,
        or one fails to import, raises, or returns something else.
    """
    settings = run_options.plugins
    found = list(discover([INITIALIZER], settings.paths) if found is None else found)
    active = [p for p in found if not _matches(p, settings.disabled)]
    if settings.initializer == NO_INITIALIZER:
        return None
    if settings.initializer is not None:
        chosen = [p for p in active if _matches(p, [settings.initializer])]
        if len(chosen) != 1:
            listed = ", ".join(p.label for p in active) or "none"
            problem = "is not installed or is disabled" if not chosen else "is ambiguous"
            raise PluginError(
                f"initializer {settings.initializer!r} {problem} (active initializers: "
                f"{listed}). Choose one of them with plugins.initializer or --initializer NAME, "
                f"or {NO_INITIALIZER!r} for none."
            )
        return _make_initializer(chosen[0])
    made = [(plugin, _make_initializer(plugin)) for plugin in active]
    applying = [(plugin, made) for plugin, made in made if made.applies(run_options)]
    if len(applying) > 1:
        listed = ", ".join(plugin.label for plugin, _ in applying)
        raise PluginError(
            f"{len(applying)} initializers apply to this process ({listed}) and at most one "
            "may be used. Choose one with plugins.initializer in the config or "
            "--initializer NAME, or disable the others in plugins.disabled."
        )
    return applying[0][1] if applying else None


def _make_initializer(plugin: Plugin) -> Initializer:
    from evtrain.distributed import Initializer

    result = load(plugin)
    if isinstance(result, FailedPlugin):
        raise PluginError(f"Initializer {plugin.label} failed: {result.reason}.")
    try:
        made = result.obj()
    except Exception as error:
        raise PluginError(
            f"Initializer {plugin.label} failed: raised {type(error).__name__}: {error}."
        ) from error
    if not isinstance(made, Initializer):
        raise PluginError(
            f"Initializer {plugin.label} failed: returned {made!r}, expected an "
            "evtrain.distributed.Initializer instance."
        )
    return made


def _fallback_default_writers(run_options: RunOptions) -> list[StatsWriter]:
    # A stale or source-only install has no entry points at all; writing nothing would look
    # like a silent success, so use the defaults directly and say how to repair the install.
    if "default" in run_options.plugins.disabled or (
        f"{STATS_WRITER}:default" in run_options.plugins.disabled
    ):
        return []
    logger.warning(
        "No 'default' entry point found in %s; the evtrain installation looks stale. "
        "Reinstall it (pip install -e . or pip install evtrain). Using the default writers.",
        STATS_WRITER,
    )
    try:
        from evtrain_writers import get_default_stats_writers
    except ImportError as error:
        logger.error("The default writers cannot be imported either: %s", error)
        return []
    return list(get_default_stats_writers(run_options))
