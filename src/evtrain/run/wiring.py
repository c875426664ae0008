"""Wiring a run from its options: the bus, the plugins' writers and subscribers, the trainer
types of trainer plugins, and the one initializer.

:mod:`evtrain.plugins` finds and imports plugins; here their registration functions are called
with the run's options.  A plugin that fails to import, raises, or returns the wrong thing is
logged with its name and the reason and skipped; the others load.  Options can disable a
plugin or require it (then its failure stops the run with :class:`~evtrain.errors.PluginError`).
``KeyboardInterrupt`` and ``SystemExit`` raised by a plugin are never swallowed.  The default
writers arrive like any other plugin, through the ``evtrain.stats_writer`` entry point
``default``.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator, Sequence
from contextvars import ContextVar
from pathlib import Path
from typing import Any

import attrs

from evtrain.bus import Bus
from evtrain.bus.subscription import SubscriptionHandle
from evtrain.bus.writers import StatsWriter
from evtrain.config.options import PluginSettings, RunOptions
from evtrain.distributed import Initializer
from evtrain.errors import ConfigError, PluginError
from evtrain.plugins import (
    GROUPS,
    INITIALIZER,
    STATS_WRITER,
    SUBSCRIBER,
    TRAINER,
    FailedPlugin,
    Plugin,
    discover,
    load,
)
from evtrain.trainers.registry import TrainerType, merge_trainer_types

logger = logging.getLogger("evtrain.plugins")

DEFAULT_WRITERS = "default"
"""The ``evtrain.stats_writer`` entry point evtrain registers its own writers under."""


def journal_folder(options: RunOptions) -> Path:
    """Where the run's ``spool`` writers keep their journals: ``run_logs/journal``."""
    return options.checkpoint_settings.run_logs_dir / "journal"


def make_bus(options: RunOptions) -> Bus:
    """A bus with the delivery settings of ``options.bus``; spool subscribers keep their
    journals in the run folder's ``run_logs/journal``, so a resumed run (or a later sync)
    delivers what an earlier process could not."""
    settings = options.bus
    return Bus(
        capacity=settings.capacity,
        overflow=settings.overflow,
        on_error=settings.on_error,
        max_consecutive_failures=settings.max_consecutive_failures,
        subscribers=settings.subscribers,
        stall_timeout=settings.stall_timeout,
        block_timeout=settings.block_timeout,
        journal_dir=journal_folder(options),
        journal_max_bytes=settings.journal_max_bytes,
        journal_fsync_s=settings.journal_fsync_s,
        retry_backoff_s=settings.retry_backoff_s,
        retry_backoff_max_s=settings.retry_backoff_max_s,
    )


def attach_plugins(options: RunOptions, bus: Bus) -> list[SubscriptionHandle]:
    """Connect every stats-writer plugin's writers and let subscriber plugins connect; the
    handles of everything connected, for the run to disconnect at its end.

    :raises PluginError: a plugin listed in ``plugins.required`` failed.
    """
    # On a caller's bus too, the run's trackers journal into the run folder: a resumed run
    # (or evtrain sync) finds what they could not deliver.
    journal = journal_folder(options)
    handles = [
        bus.add_writer(writer, journal_dir=journal)
        for writer in register_stats_writer_plugins(options)
    ]
    # Subscriber plugins connect on their own and return nothing: what they connected is what
    # the bus holds now and did not before.  Its handles go with the writers', so that a
    # caller's bus, reused by a later run, does not keep feeding this run's subscribers.
    before = {id(sub) for sub in bus.subscriptions}
    register_subscriber_plugins(options, bus)
    handles += [SubscriptionHandle(bus, sub) for sub in bus.subscriptions if id(sub) not in before]
    return handles


class _Selection:
    """Applies ``plugins.disabled``/``plugins.required`` to one group, and reports failures."""

    def __init__(
        self,
        group: str,
        settings: PluginSettings,
        found: Sequence[Plugin] | None,
    ) -> None:
        self.group = group
        required = settings.required
        self.required = [r for r in required if ":" not in r or r.startswith(group + ":")]
        self.disabled = settings.disabled
        self.paths = settings.paths
        self.found = list(discover([group], self.paths) if found is None else found)

    def plugins(self) -> list[Plugin]:
        found = self.found
        chosen = [p for p in found if not p.matches(self.disabled)]
        for name in self.required:
            if ":" not in name and any(p.matches([name]) for p in discover(GROUPS, self.paths)):
                continue  # a plain name is satisfied by whichever group provides it
            if not any(p.matches([name]) for p in chosen):
                have = ", ".join(p.qualified for p in found) or "none"
                raise PluginError(
                    f"required plugin {name!r} is not installed or is disabled (installed in "
                    f"{self.group}: {have}). Install its package, or remove it from "
                    "plugins.required."
                )
        return chosen

    def fail(self, plugin: Plugin, reason: str, error: BaseException | None = None) -> None:
        message = f"Plugin {plugin.label} failed: {reason}. This plugin will not be used."
        if plugin.matches(self.required):
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
        except (ConfigError, PluginError):
            raise  # the plugin's word on the run's options (writers.NAME...): the run stops
        except Exception as error:  # isolate each plugin
            selection.fail(plugin, f"raised {type(error).__name__}: {error}", error)
            continue
        yield plugin, made


def register_stats_writer_plugins(
    run_options: RunOptions, found: Sequence[Plugin] | None = None
) -> list[StatsWriter]:
    """Call every ``evtrain.stats_writer`` plugin with ``run_options``; return all writers.

    ``found`` replaces discovery (tests pass plugins built from ``EntryPoint`` objects).

    :raises PluginError: evtrain's own ``default`` entry point is missing (a broken or stale
        install) and not disabled, or a required plugin failed.
    """
    selection = _Selection(STATS_WRITER, run_options.plugins, found)
    default = Plugin.qualified_name(STATS_WRITER, DEFAULT_WRITERS)
    if not any(p.name == DEFAULT_WRITERS for p in selection.found) and not any(
        name in selection.disabled for name in (DEFAULT_WRITERS, default)
    ):
        raise PluginError(
            f"evtrain's default writers are not registered: no {default!r} entry point is "
            "installed, so the evtrain installation is incomplete or stale. Reinstall it "
            f"(pip install evtrain, or pip install -e . in a checkout), or run without them "
            f"with plugins.disabled: [{default}]."
        )
    installed = sorted({p.name for p in selection.found} - {DEFAULT_WRITERS})
    unknown = [name for name in run_options.writers if name not in installed]
    if unknown:
        raise ConfigError(
            [
                f"writers.{name}: no installed writer plugin is named {name!r} (installed: "
                f"{', '.join(installed) or 'none'}); install the package that provides it, "
                "or remove it"
                for name in unknown
            ]
        )
    writers: list[StatsWriter] = []
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
    selection = _Selection(SUBSCRIBER, run_options.plugins, found)
    return [plugin for plugin, _ in _call_each(selection, run_options, bus)]


def load_trainer_plugins(
    settings: PluginSettings, found: Sequence[Plugin] | None = None
) -> list[TrainerType]:
    """Call every ``evtrain.trainer`` plugin ``settings`` allows; each returns ``{name: trainer
    class}`` where the class has a ``settings_type`` attrs class (its ``hyperparameters``).
    Failures are logged and skipped, or raise :class:`PluginError` when required."""
    selection = _Selection(TRAINER, settings, found)
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


def trainer_types_for(settings: PluginSettings) -> dict[str, TrainerType]:
    """The built-in trainer types plus those of the trainer plugins ``settings`` allows.

    :raises PluginError: a required trainer plugin failed, or a name clash is not settled.
    """
    # Only trainer plugins are due now; other required names are checked when the run
    # registers its writers and subscribers.
    names = {p.name for p in discover([TRAINER], settings.paths)}
    required = [r for r in settings.required if r.startswith(f"{TRAINER}:") or r in names]
    allowed = attrs.evolve(settings, required=required)
    return merge_trainer_types(load_trainer_plugins(allowed), settings.trainer_types)


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
    active = [p for p in found if not p.matches(settings.disabled)]
    if settings.initializer == NO_INITIALIZER:
        return None
    if settings.initializer is not None:
        chosen = [p for p in active if p.matches([settings.initializer])]
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


_ACTIVE: ContextVar[Initializer | None] = ContextVar("evtrain_initializer", default=None)


def active_initializer() -> Initializer | None:
    """The initializer :func:`initialized` loaded for the run in progress, if any."""
    return _ACTIVE.get()


@contextlib.contextmanager
def initialized(options: RunOptions) -> Iterator[Initializer | None]:
    """Load the run's initializer (if one is active) and tear it down on the way out.

    Nested use is a no-op: the CLI loads it before creating its progress display and bus,
    and :func:`evtrain.learn` inside finds it loaded.

    :raises PluginError: see :func:`load_initializer`.
    """
    if _ACTIVE.get() is not None:
        yield _ACTIVE.get()
        return
    initializer = load_initializer(options)
    if initializer is None:
        yield None
        return
    try:
        initializer.load(options)
        token = _ACTIVE.set(initializer)
        try:
            yield initializer
        finally:
            _ACTIVE.reset(token)
    finally:
        initializer.teardown()
