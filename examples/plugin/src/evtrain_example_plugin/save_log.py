"""A subscriber plugin: record every checkpoint and exported model as it becomes durable.

This is the shape of "upload each checkpoint somewhere": evtrain emits ``save`` only after the
checkpoint file is completely written, and ``export`` after the exported model is, so the
subscriber may read (or copy, or upload) ``event.path`` straight away.  Here it appends one
JSON line per file to ``<run folder>/artifacts.jsonl``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from evtrain import Bus, ExportEvent, RunOptions, SaveEvent, signals


class ArtifactLog:
    """Appends ``{"signal", "category", "step", "path", ...}`` lines to ``path``.

    A sync subscriber runs on its own worker thread, so blocking I/O — a real upload — may take
    as long as it needs without delaying training or other subscribers.
    """

    def __init__(self, path: Path) -> None:
        self.path = path

    def __call__(self, event: SaveEvent | ExportEvent) -> None:
        record: dict[str, Any] = {
            "signal": "save" if isinstance(event, SaveEvent) else "export",
            "category": event.category,
            "step": event.step,
            "path": str(event.path),
        }
        if isinstance(event, SaveEvent):
            record["reward"] = event.reward
        else:
            record["format"] = event.format
        self.path.parent.mkdir(parents=True, exist_ok=True)
        # Opened per event: artifacts are rare, and each line is then on disk before the next
        # checkpoint, even if the run is killed.
        with self.path.open("a", encoding="utf-8") as file:
            file.write(json.dumps(record) + "\n")


def connect_save_log(run_options: RunOptions, bus: Bus) -> None:
    """Registration function of the ``evtrain.subscriber`` entry point ``save_log``.

    evtrain calls it once per run, before the first event, with the run's options and bus.
    """
    log = ArtifactLog(run_options.checkpoint_settings.write_path / "artifacts.jsonl")
    # ranks={0}: checkpoints are written on rank 0 only, and one process must own the file.
    # The name is what bus.metrics() and bus.subscribers overrides in the options call it.
    bus.connect(
        (signals.save, signals.export), log, ranks={0}, name="evtrain_example_plugin.save_log"
    )
