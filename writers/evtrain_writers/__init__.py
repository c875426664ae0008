"""evtrain's default statistics writers: TensorBoard, gauges (``timers.json``) and the console.

They are plugins like any other: evtrain finds :func:`get_default_stats_writers` through the
``evtrain.stats_writer`` entry point ``default``, so disabling that entry point drops them all.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from evtrain_writers.console import ConsoleWriter
from evtrain_writers.gauge import GaugeWriter
from evtrain_writers.tensorboard import TensorboardWriter

if TYPE_CHECKING:
    from evtrain.bus.writers import StatsWriter
    from evtrain.config.options import RunOptions

__all__ = [
    "ConsoleWriter",
    "GaugeWriter",
    "TensorboardWriter",
    "get_default_stats_writers",
]


def get_default_stats_writers(
    run_options: RunOptions, *, hparams: bool = True
) -> list[StatsWriter]:
    """The writers of every run: TensorBoard files in the run folder (cleared unless resuming,
    hiding ``Is Training`` and ``Step``), gauges in ``run_logs/timers.json``, the console line.

    :param hparams: the TensorBoard writer's ``hparams``; a plugin that replaces the ``default``
        entry point passes ``False`` to keep runs out of the HParams dashboard
        (``docs/trackers.md``)."""
    checkpoint_settings = run_options.checkpoint_settings
    return [
        TensorboardWriter(
            checkpoint_settings.write_path,
            # An inference run adds to the trained run's curves; only a fresh run clears them.
            clear_past_data=not (checkpoint_settings.resume or checkpoint_settings.inference),
            hidden_keys=["Is Training", "Step"],
            hparams=hparams,
        ),
        GaugeWriter(checkpoint_settings.run_logs_dir),
        ConsoleWriter(),
    ]
