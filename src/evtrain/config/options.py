"""Run options: attrs classes structured from YAML/dicts by :mod:`evtrain.config.converter`.

The shape follows ML-Agents' ``RunOptions`` so its users feel at home: ``behaviors`` (name →
:class:`TrainerSettings`), ``default_settings`` merged under every behavior, ``env_settings``,
``checkpoint_settings``, ``torch_settings``, plus evtrain's ``bus`` and ``plugins``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import attrs

from evtrain.bus.delivery import FailurePolicy
from evtrain.bus.inbox import Overflow, SubscriberSettings
from evtrain.config.environment_parameters import EnvironmentParameter
from evtrain.config.environment_settings import EngineSettings as EngineSettings
from evtrain.config.environment_settings import EnvironmentSettings as EnvironmentSettings
from evtrain.config.environment_settings import RaySettings as RaySettings
from evtrain.config.environment_settings import finite_seconds, positive, seconds
from evtrain.config.names import behavior_names, folder_name
from evtrain.config.sweep import SweepSettings
from evtrain.trainers.settings import TrainerSettings


@attrs.define(kw_only=True)
class CheckpointSettings:
    """Where a run writes, and how it relates to earlier runs."""

    run_id: str = attrs.field(default="evtrain", validator=folder_name)
    """Name of the run; its folder is ``results_dir/run_id``."""
    results_dir: str = "results"
    """Parent folder of every run."""
    resume: bool = False
    """Continue the run ``run_id`` from its last checkpoint."""
    force: bool = False
    """Overwrite an existing run ``run_id``."""
    initialize_from: str | None = attrs.field(default=None, validator=folder_name)
    """Start from the weights of this earlier run id (at step 0)."""
    inference: bool = False
    """Run the policy without training."""

    @property
    def write_path(self) -> Path:
        """``results_dir/run_id``: the run folder."""
        return Path(self.results_dir) / self.run_id

    @property
    def maybe_init_path(self) -> Path | None:
        """``results_dir/initialize_from`` when set."""
        return Path(self.results_dir) / self.initialize_from if self.initialize_from else None

    @property
    def run_logs_dir(self) -> Path:
        """``write_path/run_logs``: timers.json and training_status.json."""
        return self.write_path / "run_logs"


@attrs.define(kw_only=True)
class BusSettings:
    """Delivery defaults for every subscriber of the run's bus."""

    capacity: int = attrs.field(default=10_000, validator=positive)
    """Inbox capacity per subscriber."""
    overflow: Overflow = Overflow.BLOCK
    """What emit does when an inbox is full: block (lossless), drop_oldest, drop_newest, latest,
    spool (journal on disk: lossless, never waits; remote trackers' writers default to it)."""
    on_error: FailurePolicy = FailurePolicy.DISABLE
    """A subscriber's exception: log, disable (after max_consecutive_failures), raise."""
    max_consecutive_failures: int = attrs.field(default=100, validator=positive)
    drain_timeout: float = attrs.field(default=30.0, validator=seconds)
    """Seconds a run waits, at its end (completed, interrupted or failed) and before its final
    save, for subscribers to handle what was emitted; whoever is still behind is logged and
    the run goes on.  Training itself never waits for this."""
    stall_timeout: float = attrs.field(default=10.0, validator=seconds)
    """Seconds one subscriber call may run before the bus emits ``subscriber_stalled``; a spool
    subscriber's later events then wait in its journal until the call returns."""
    block_timeout: float = attrs.field(default=10.0, validator=finite_seconds)
    """Seconds ``emit`` waits on a subscriber's full ``block`` inbox before it drops the event
    (counted) and emits ``subscriber_stalled``: every subscriber's, unless its
    ``subscribers.<name>.block_timeout`` or ``connect(block_timeout=)`` says otherwise."""
    journal_max_bytes: int = attrs.field(default=1 << 30, validator=positive)
    """Most bytes a spool subscriber's journal (``run_logs/journal/``) keeps; beyond, the
    oldest undelivered events are dropped, with a warning."""
    journal_fsync_s: float = attrs.field(default=1.0, validator=seconds)
    """Seconds between fsyncs of a journal (and saves of its ack): what a power cut may lose."""
    retry_backoff_s: float = attrs.field(default=0.5, validator=seconds)
    """How often a spool subscriber whose sink is down is probed (its ``probe()``, else the event
    that raised is tried again): a fixed interval, never doubled, so a sink that is back is
    noticed within it."""
    retry_backoff_max_s: float = attrs.field(default=30.0, validator=seconds)
    """An upper bound on ``retry_backoff_s``: the smaller of the two is the interval."""
    subscribers: dict[str, SubscriberSettings] = attrs.field(factory=dict)
    """Overrides by subscriber name, e.g. ``{"evtrain_writers.tensorboard.TensorboardWriter":
    {"overflow": "latest"}}``."""


@attrs.define(kw_only=True)
class PluginSettings:
    """Which entry-point plugins load.  Names are ``name`` or ``group:name``."""

    disabled: list[str] = attrs.field(factory=list)
    """Plugins not loaded, e.g. ``["evtrain.stats_writer:default"]`` to drop the defaults."""
    required: list[str] = attrs.field(factory=list)
    """Plugins whose failure stops the run with an error instead of a warning."""
    paths: list[str] = attrs.field(factory=list)
    """Folders whose top-level modules declare plugins in ``EVTRAIN_PLUGINS`` (``--plugins``)."""
    trainer_types: dict[str, str] = attrs.field(factory=dict)
    """Which source wins when two provide one trainer type: ``{ppo: my-dist}`` (``evtrain``
    for the built-in)."""
    initializer: str | None = None
    """The ``evtrain.initializer`` plugin to use (``--initializer``); ``none`` for none.
    Unset: the installed one that applies to this process, if any (an error when several
    do)."""


@attrs.define(kw_only=True)
class TorchSettings:
    """Where and how torch runs."""

    device: str | None = None
    """``cpu``, ``cuda``, ``cuda:1``...; ``None`` picks CUDA when available."""
    num_threads: int | None = 1
    """torch intra-op threads; small policy networks are fastest on one. ``None`` keeps
    torch's default."""
    distributed_timeout: float = attrs.field(default=300.0, validator=seconds)
    """Seconds a rank waits in a collective for the others before giving up (a rank that
    exits is noticed at once; this bounds a rank that hangs)."""

    def check_device(self) -> None:
        """Refuse a ``device`` this machine's torch cannot use, before the run starts (checked
        at run start, not when structuring: a config written on a GPU machine stays valid).

        :raises ConfigError: the string is no torch device, or names a CUDA device that is
            not there.
        """
        import torch

        from evtrain.errors import ConfigError

        if self.device is None:
            return
        where = f"torch_settings.device: {self.device!r}"
        try:
            device = torch.device(self.device)
        except RuntimeError:
            raise ConfigError(
                [f"{where} is not a torch device; use cpu, cuda or cuda:N (--torch-device)"]
            ) from None
        if device.type == "mps" and not torch.backends.mps.is_available():
            raise ConfigError(
                [
                    f"{where}: MPS (Apple's Metal GPUs) is not available to this torch "
                    f"({torch.__version__}) on this machine; use --torch-device cpu "
                    "(torch_settings.device), or leave the device unset"
                ]
            )
        if device.type != "cuda":
            return
        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if count == 0:
            raise ConfigError(
                [
                    f"{where}: no CUDA device is available to this torch ({torch.__version__}); "
                    "use --torch-device cpu (torch_settings.device), or leave the device unset "
                    "to use CUDA only when it is available"
                ]
            )
        if device.index is not None and device.index >= count:
            raise ConfigError(
                [
                    f"{where}: only {count} CUDA device(s) available (cuda:0 to "
                    f"cuda:{count - 1}); use one of those, or leave the device unset"
                ]
            )


@attrs.define(kw_only=True)
class RunOptions:
    """Everything ``evtrain learn`` needs; ``RunOptions()`` is a valid default run."""

    behaviors: dict[str, TrainerSettings] = attrs.field(factory=dict, validator=behavior_names)
    """Trainer settings per behavior name (the stats category)."""
    default_settings: TrainerSettings | None = None
    """Merged under every behavior's settings (keys a behavior sets win)."""
    env_settings: EnvironmentSettings = attrs.field(factory=EnvironmentSettings)
    engine_settings: EngineSettings = attrs.field(factory=EngineSettings)
    """A Unity build's engine (ML-Agents' section); no effect on ``env_id``."""
    checkpoint_settings: CheckpointSettings = attrs.field(factory=CheckpointSettings)
    torch_settings: TorchSettings = attrs.field(factory=TorchSettings)
    bus: BusSettings = attrs.field(factory=BusSettings)
    plugins: PluginSettings = attrs.field(factory=PluginSettings)
    environment_parameters: dict[str, EnvironmentParameter] = attrs.field(factory=dict)
    """ML-Agents' curricula and samplers, by parameter name; set on every environment at each
    episode reset (:mod:`evtrain.run.parameters.curriculum`)."""
    writers: dict[str, dict[str, Any]] = attrs.field(factory=dict)
    """Optional writers to run, by the name of their ``evtrain.stats_writer`` plugin, each with
    its own options: ``{csv: {}, jsonl: {}}`` (``--writer NAME[:key=value,...]``)."""
    sweep: SweepSettings | None = None
    """What ``evtrain sweep`` searches (:mod:`evtrain.config.sweep`); a config with it is a
    sweep's, which ``evtrain learn`` refuses.  Absent from :meth:`as_dict` when unset."""
    debug: bool = False

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RunOptions:
        """Structure options from plain data (parsed YAML), merging ``default_settings`` under
        each behavior first (:mod:`evtrain.config.defaults`) and translating ML-Agents'
        deprecated options (:mod:`evtrain.config.mlagents`); a Unity build with a Gymnasium
        environment's keys is refused (:func:`~evtrain.config.environment_settings.
        unity_problems`).

        Pure: ``trainer_type`` is checked against the trainer types in effect
        (:func:`evtrain.trainers.registry.use_trainer_types`; the built-in ones by default).
        :func:`evtrain.run.options.options_from_data` loads the trainer plugins first.

        :raises ConfigError: listing every bad key with its full path.
        """
        from evtrain.config.converter import structure
        from evtrain.config.defaults import drop_inherited, merge_default_settings
        from evtrain.config.environment_parameters import parameter_problems
        from evtrain.config.environment_settings import unity_problems
        from evtrain.config.mlagents import translate_deprecated, warn_without_effect
        from evtrain.errors import ConfigError

        data = translate_deprecated(data)
        problems = unity_problems(data.get("env_settings") if isinstance(data, dict) else None)
        if problems:
            raise ConfigError(problems)
        options = structure(
            merge_default_settings(data), cls, keep=lambda found: drop_inherited(found, data)
        )
        problems = parameter_problems(options.environment_parameters, options.behaviors)
        if problems:
            raise ConfigError(problems)
        warn_without_effect(options.behaviors)
        return options

    def as_dict(self) -> dict[str, Any]:
        """Plain data that :meth:`from_dict` turns back into equal options."""
        from evtrain.config.converter import converter

        data: dict[str, Any] = converter.unstructure(self)
        if self.sweep is None:
            del data["sweep"]  # a run's configuration reads as it did before sweeps
        if self.env_settings.unity:  # what a Unity run refuses to be given
            for key in ("env_id", "env_kwargs", "agent_behaviors", "vectorization"):
                del data["env_settings"][key]
        return data
