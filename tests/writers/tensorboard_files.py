"""Reading and writing TensorBoard event files for the writer tests: the raw events of a file,
the HParams plugin's records, a writer's whole life for one behavior."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from tensorboard.backend.event_processing.event_file_loader import RawEventFileLoader
from tensorboard.compat.proto.event_pb2 import Event
from tensorboard.plugins.hparams import metadata

from evtrain import RunFinished, RunStatus, StatsPropertyType, StatsSummary
from evtrain_writers import TensorboardWriter


def stats(**values: float) -> dict[str, StatsSummary]:
    return {key.replace("_", " "): StatsSummary(full_dist=[value]) for key, value in values.items()}


def raw_events(path: Path) -> list[Event]:
    """The events of one file as written (EventFileLoader would migrate scalars to tensors)."""
    return [Event.FromString(record) for record in RawEventFileLoader(str(path)).Load()]


def hparams_content(folder: Path) -> dict[str, bytes]:
    """The hparams plugin's metadata content by tag, as TensorBoard's accumulator keeps it."""
    accumulator = EventAccumulator(str(folder))
    accumulator.Reload()
    try:
        content: dict[str, bytes] = accumulator.PluginTagToContent(metadata.PLUGIN_NAME)
    except KeyError:  # no tag of that plugin in the folder
        return {}
    return content


def run(
    base_dir: Path,
    category: str,
    hyperparameters: dict[str, Any],
    rewards: list[float],
    status: RunStatus | None = RunStatus.COMPLETED,
    **options: Any,
) -> TensorboardWriter:
    """A writer's whole life for one behavior: hyperparameters, a reward per 100 steps, the end."""
    writer = TensorboardWriter(base_dir, **options)
    writer.add_property(category, StatsPropertyType.HYPERPARAMETERS, hyperparameters)
    for i, reward in enumerate(rewards, start=1):
        writer.write_stats(category, stats(Reward=reward, Loss=-reward), i * 100)
    if status is not None:
        writer.on_run_finished(RunFinished(run_id="r", status=status, time=1234.5))
    writer.close()
    return writer
