"""Files from elsewhere never run code: a crafted journal, a run's own plugin folders, a crafted
checkpoint.  Each is placed in a real run folder and met by the real CLI (``evtrain sync``,
``evtrain learn --resume``/``--initialize-from``); a marker file shows whether code ran."""

from __future__ import annotations

import json
import pickle
import struct
import zlib
from pathlib import Path
from typing import Any

import pytest
import torch

from evtrain.bus.journal import journal_path
from tests.helpers import config, run_config, sync
from tests.writers.mlflow_server import MlflowServer

PLUGIN = """
from evtrain import StatsWriter


class Tracker(StatsWriter):
    overflow = "spool"

    def __init__(self, folder):
        self.folder = folder

    def write_stats(self, category, values, step):
        with open(self.folder / "tracked.txt", "a") as file:
            file.write(f"{step}\\n")


def writers(run_options):
    return [Tracker(run_options.checkpoint_settings.write_path)]


EVTRAIN_PLUGINS = {"evtrain.stats_writer": {"spool_tracker": writers}}
"""
"""A ``--plugins`` module: a writer with the ``spool`` policy, so the run has a journal."""

WRITER = "spool_plugin.Tracker"
MLFLOW_WRITER = "evtrain_writers.mlflow_writer.MlflowWriter"


class Touch:
    """Unpickling it creates the file ``path``: what a crafted pickle would do."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def __reduce__(self) -> tuple[Any, ...]:
        return (open, (str(self.path), "w"))


def old_segment(payload: bytes) -> bytes:
    """A segment of evtrain's earlier pickle journal (format 1) holding one valid record."""
    head = bytearray(struct.pack("<IIQd", len(payload), 0, 1, 0.0))
    struct.pack_into("<I", head, 4, zlib.crc32(payload, zlib.crc32(head[8:])))
    return b"EVTJRNL1" + bytes(head) + payload


def tracked_run(tmp_path: Path) -> tuple[dict[str, Any], Path]:
    """A finished 256-step run with the spool writer of ``plugins/``; its run folder."""
    plugins = tmp_path / "plugins"
    plugins.mkdir()
    (plugins / "spool_plugin.py").write_text(PLUGIN)
    options = config(tmp_path, max_steps=256, summary_freq=128)
    options["plugins"] = {"paths": [str(plugins)]}
    learned = run_config(tmp_path, options)
    assert learned.returncode == 0, learned.stderr
    folder = Path(options["checkpoint_settings"]["results_dir"]) / "run"
    assert (folder / "tracked.txt").read_text() == "128\n256\n"
    return options, folder


def craft_journal(folder: Path, content: bytes) -> Path:
    journal = journal_path(folder / "run_logs" / "journal", WRITER)
    journal.mkdir(parents=True)
    segment = journal / "0000000000000001.seg"
    segment.write_bytes(content)
    return segment


@pytest.mark.parametrize("kind", ["pickle journal", "bare pickle"])
def test_a_crafted_journal_is_refused_by_sync_and_resume_without_running_code(
    tmp_path: Path, kind: str
) -> None:
    options, folder = tracked_run(tmp_path)
    marker = tmp_path / "marker"
    crafted = pickle.dumps(Touch(marker))
    segment = craft_journal(folder, old_segment(crafted) if kind == "pickle journal" else crafted)
    if kind == "pickle journal":
        why = (
            "it is in format 1 (pickled payloads) of an earlier evtrain, which is no longer "
            "read because unpickling a file can run code; deliver it with the evtrain that "
            f"wrote it, or remove {segment.parent} to give up what it holds"
        )
    else:
        why = (
            f"it does not start with 'evtrain-journal 2'; remove {segment.parent} if nothing "
            "in it is yours"
        )
    expected = f"evtrain: error: {segment} is not an evtrain journal: {why}\n"

    results = options["checkpoint_settings"]["results_dir"]
    synced = sync("run", "--results-dir", results, cwd=tmp_path)
    assert (synced.returncode, synced.stdout, synced.stderr) == (2, "", expected)
    assert not marker.exists()

    options["behaviors"]["CartPole"]["max_steps"] = 512
    resumed = run_config(tmp_path, options, "--resume")
    assert resumed.returncode == 2, resumed.stderr
    assert resumed.stderr.splitlines()[-1] == expected.strip()
    assert "Traceback" not in resumed.stderr
    assert not marker.exists()
    assert segment.read_bytes()[:8] in (b"EVTJRNL1", crafted[:8])  # left for its owner


def test_sync_imports_only_the_plugin_folders_given_on_its_command_line(tmp_path: Path) -> None:
    options, folder = tracked_run(tmp_path)
    plugins = options["plugins"]["paths"][0]
    marker = tmp_path / "imported"
    (Path(plugins) / "spool_plugin.py").write_text(f"open({str(marker)!r}, 'w').close()\n" + PLUGIN)
    results = options["checkpoint_settings"]["results_dir"]
    synced = sync("run", "--results-dir", results, cwd=tmp_path, process=True)
    assert (synced.returncode, synced.stdout, synced.stderr) == (
        0,
        "run: nothing journaled; every tracker has every event\n",
        f"[WARNING] {folder}/configuration.yaml names plugin folders that evtrain sync does "
        f"not import unless given on the command line: {plugins}. If you trust them, add "
        f"--plugins {plugins}\n",
    )
    assert not marker.exists()

    synced = sync("run", "--results-dir", results, "--plugins", plugins, cwd=tmp_path, process=True)
    assert (synced.returncode, synced.stdout, synced.stderr) == (
        0,
        "run: nothing journaled; every tracker has every event\n",
        "",
    )
    assert marker.exists()


def test_sync_delivers_a_journal_of_this_format_through_the_given_plugins(
    tmp_path: Path,
) -> None:
    """The writer is down (its output is a folder) for the run: the journal keeps the events,
    and sync, given the plugin folder, delivers them once the writer works again."""
    options, folder = tracked_run(tmp_path)
    options["behaviors"]["CartPole"]["max_steps"] = 512
    tracked = folder / "tracked.txt"
    tracked.unlink()
    tracked.mkdir()  # writing it fails: every event stays journaled
    options["bus"] = {"retry_backoff_s": 0.05, "retry_backoff_max_s": 0.1, "drain_timeout": 1.0}
    resumed = run_config(tmp_path, options, "--resume")
    assert resumed.returncode == 0, resumed.stderr
    tracked.rmdir()
    results = options["checkpoint_settings"]["results_dir"]
    plugins = options["plugins"]["paths"][0]
    synced = sync("run", "--results-dir", results, "--plugins", plugins, cwd=tmp_path)
    assert synced.returncode == 0, synced.stderr
    assert tracked.read_text() == "384\n512\n"


@pytest.mark.parametrize("kind", ["pickle with code", "truncated", "not a checkpoint"])
def test_a_refused_checkpoint_is_one_line_naming_the_file(tmp_path: Path, kind: str) -> None:
    options = config(tmp_path, max_steps=256)
    learned = run_config(tmp_path, options)
    assert learned.returncode == 0, learned.stderr
    checkpoint = Path(options["checkpoint_settings"]["results_dir"]) / "run/CartPole/checkpoint.pt"
    marker = tmp_path / "marker"
    if kind == "pickle with code":
        torch.save({"step": Touch(marker)}, checkpoint)
    elif kind == "truncated":
        checkpoint.write_bytes(checkpoint.read_bytes()[:1000])
    else:
        checkpoint.write_text("step: 5\n")
    options["behaviors"]["CartPole"]["max_steps"] = 512
    for args in (["--resume"], ["--run-id", "other", "--initialize-from", "run"]):
        result = run_config(tmp_path, options, *args)
        assert (result.returncode, result.stdout) == (2, ""), result.stderr
        assert result.stderr == (
            f"evtrain: error: {checkpoint} cannot be loaded as an evtrain checkpoint: "
            f"{REASONS[kind]}\n"
        )
        assert not marker.exists()


REASONS = {
    "pickle with code": (
        "it holds objects other than tensors and plain data (refused unread, since loading "
        "them would run code); use checkpoints evtrain wrote"
    ),
    "truncated": "the file is cut short or corrupt; resume from another copy, or start afresh",
    "not a checkpoint": (
        "the file is cut short or corrupt; resume from another copy, or start afresh"
    ),
}


def test_a_journal_of_another_format_version_is_refused_whole(tmp_path: Path) -> None:
    from evtrain import Bus, JournalFormatError, StatsEvent, signals
    from evtrain.bus import journal_backlog

    folder = journal_path(tmp_path, "tracker")
    folder.mkdir(parents=True)
    segment = folder / "0000000000000001.seg"
    segment.write_bytes(b"evtrain-journal 3\nwhatever comes in version 3")
    expected = (
        f"{segment} is not an evtrain journal: it is in format version '3', this evtrain "
        f"reads version 2; deliver it with the evtrain that wrote it, or remove {folder}"
    )
    with pytest.raises(JournalFormatError) as refused:
        journal_backlog(tmp_path, "tracker")
    assert str(refused.value) == expected
    seen: list[StatsEvent] = []
    with Bus(journal_dir=tmp_path) as bus, pytest.raises(JournalFormatError) as refused:
        bus.connect(signals.stats, seen.append, name="tracker", overflow="spool")
    assert str(refused.value) == expected
    assert segment.read_bytes() == b"evtrain-journal 3\nwhatever comes in version 3"


def test_journal_records_hold_plain_values_and_name_only_registered_types() -> None:
    import numpy as np

    from evtrain import ExportEvent, RunFinished, RunStarted, RunStatus, StatsEvent
    from evtrain.bus.records import decode, encode
    from evtrain.events.stats import StatsAggregationMethod, StatsSummary

    payloads = [
        RunStarted(run_id="r", options={"a": [1, (2, 3)], "b": None}, rank=0, time=1.5),
        StatsEvent(
            category="C",
            step=7,
            values={"k": StatsSummary(full_dist=(1.0, float("inf")))},
            rank=0,
            time=2.0,
        ),
        StatsSummary(full_dist=(0.5,), aggregation_method=StatsAggregationMethod.HISTOGRAM),
        ExportEvent(category="C", step=3, path=Path("/x/C.onnx")),
        RunFinished(run_id="r", status=RunStatus.COMPLETED, steps=9, time=3.0),
    ]
    for payload in payloads:
        assert decode(encode(payload)) == payload
    array = np.arange(6, dtype=np.float32).reshape(2, 3)
    back = decode(encode({"obs": array}))["obs"]
    assert back.dtype == np.float32 and back.tolist() == array.tolist()
    assert encode(RunFinished(run_id="r", status=RunStatus.FAILED, steps=1, time=0.0)) == (
        b'{"attrs":"evtrain.events.payloads:RunFinished","fields":{"run_id":"r",'
        b'"status":{"enum":"evtrain.events.payloads:RunStatus","member":"FAILED"},'
        b'"steps":1,"reason":null,"time":0.0}}'
    )
    # A record journaled before a field was added (RunFinished.reason) still decodes.
    assert decode(
        b'{"attrs":"evtrain.events.payloads:RunFinished","fields":{"run_id":"r",'
        b'"status":{"enum":"evtrain.events.payloads:RunStatus","member":"FAILED"},'
        b'"steps":1,"time":0.0}}'
    ) == RunFinished(run_id="r", status=RunStatus.FAILED, steps=1, time=0.0)
    with pytest.raises(ValueError) as refused:
        decode(b'{"attrs":"os:system","fields":{"command":"touch marker"}}')
    assert str(refused.value) == (
        "payload type 'os:system' is not registered in this process (evtrain decodes only "
        "its own payload types and those registered with register_payload_type)"
    )
    with pytest.raises(TypeError) as unencodable:
        encode(object())
    assert str(unencodable.value) == "cannot journal a builtins.object"


def test_a_record_naming_an_unregistered_type_is_dropped_and_the_rest_delivered(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    from evtrain import Bus, StatsEvent, signals
    from evtrain.bus.records import MAGIC, encode
    from tests.helpers import stats_event

    def record(seq: int, payload: bytes) -> bytes:
        head = bytearray(struct.pack("<IIQd", len(payload), 0, seq, 0.0))
        struct.pack_into("<I", head, 4, zlib.crc32(payload, zlib.crc32(head[8:])))
        return bytes(head) + payload

    folder = journal_path(tmp_path, "tracker")
    folder.mkdir(parents=True)
    crafted = b'{"attrs":"os:system","fields":{"command":"touch marker"}}'
    (folder / "0000000000000001.seg").write_bytes(
        MAGIC + record(1, crafted) + record(2, encode(stats_event(7)))
    )
    seen: list[StatsEvent] = []
    with Bus(journal_dir=tmp_path) as bus:
        bus.connect(signals.stats, seen.append, name="tracker", overflow="spool")
        bus.flush(timeout=60)
        metrics = bus.metrics()["tracker"]
    assert [event.step for event in seen] == [7]
    assert (metrics.delivered, metrics.dropped) == (1, 1)
    assert [r.getMessage() for r in caplog.records if r.levelname == "ERROR"] == [
        "Journal of subscriber 'tracker': event 1 cannot be read back (ValueError: payload "
        "type 'os:system' is not registered in this process (evtrain decodes only its own "
        "payload types and those registered with register_payload_type)); it is counted as "
        "dropped."
    ]


def journal_events(folder: Path, subscriber: str, payloads: list[Any]) -> list[int]:
    """Append ``payloads`` to ``subscriber``'s journal in run folder ``folder`` as the bus
    would (a crafted journal of valid records); their seqs."""
    from evtrain.bus.journal import Journal

    journal = Journal(
        journal_path(folder / "run_logs" / "journal", subscriber),
        label=subscriber,
        max_bytes=1 << 20,
        fsync_s=0.0,
        temporary=False,
    )
    seqs = list(range(journal.next_seq, journal.next_seq + len(payloads)))
    journal.append([(seq, 0.0, payload) for seq, payload in zip(seqs, payloads, strict=True)])
    journal.close(journal.acked, seqs[-1])
    return seqs


def test_sync_uploads_only_files_evtrain_wrote_in_the_run_folder(
    mlflow_server: MlflowServer, tmp_path: Path
) -> None:
    """A crafted journal names a file outside the run folder, a link inside it that points out,
    and a file inside it that is no artifact: sync refuses each (one warning naming its journal
    record, dead-lettered, counted) and uploads only the checkpoint evtrain wrote."""
    from mlflow import MlflowClient

    from evtrain import ArtifactEvent, ExportEvent, SaveEvent

    options = config(tmp_path, max_steps=256, summary_freq=128, checkpoint_interval=256)
    options["writers"] = {
        "mlflow": {
            "tracking_uri": mlflow_server.uri,
            "experiment": "crafted-journal",
            "upload_artifacts": True,
            "upload_videos": True,
        }
    }
    learned = run_config(tmp_path, options)
    assert learned.returncode == 0, learned.stderr
    folder = Path(options["checkpoint_settings"]["results_dir"]) / "run"
    secret = tmp_path / "secret.pt"
    secret.write_bytes(b"the user's secret")
    link = folder / "CartPole" / "CartPole-9999.onnx"
    link.symlink_to(secret)
    checkpoint = folder / "CartPole" / "checkpoint.pt"
    config_file = folder / "configuration.yaml"
    seqs = journal_events(
        folder,
        MLFLOW_WRITER,
        [
            SaveEvent(category="CartPole", step=9999, path=secret),
            ExportEvent(category="CartPole", step=9999, path=link),
            ArtifactEvent(
                category="CartPole",
                step=9999,
                path=config_file,
                kind="video",
                media_type="image/gif",
            ),
            SaveEvent(category="CartPole", step=9999, path=checkpoint),
        ],
    )

    synced = sync("run", "--results-dir", str(folder.parent), cwd=tmp_path)
    assert synced.returncode == 0, synced.stderr
    assert synced.stdout == (
        f"{MLFLOW_WRITER}: 1 of 4 journaled events delivered, 3 refused "
        "(see run_logs/dead_letter/)\n"
    )
    kinds = ".pt (checkpoint), .onnx (exported model), .gif (video), .mp4 (video)"
    dead_letter = folder / "run_logs" / "dead_letter" / f"{MLFLOW_WRITER}.jsonl"
    reasons = [
        f"{secret} is not uploaded: it is outside the run folder {folder}",
        f"{link} is not uploaded: it leads to {secret}, outside the run folder {folder}",
        f"{config_file} is not uploaded: configuration.yaml is not a checkpoint, an exported "
        "model or a video",
    ]
    # A busy machine may add a stall warning: the refusals are these lines.
    refusals = [line for line in synced.stderr.splitlines() if " refused " in line]
    assert refusals == [
        f"[WARNING] Subscriber {MLFLOW_WRITER!r} refused an event {signal!r} (journal record "
        f"{seq}) for good ({reason}; only the files evtrain writes in the run folder are: "
        f"{kinds}); written to {dead_letter}, later events go on."
        for signal, seq, reason in zip(["save", "export", "artifact"], seqs, reasons, strict=False)
    ], synced.stderr
    assert [json.loads(line)["seq"] for line in dead_letter.read_text().splitlines()] == seqs[:3]

    client = MlflowClient(mlflow_server.uri)
    experiment = client.get_experiment_by_name("crafted-journal")
    assert experiment is not None
    (run,) = client.search_runs([experiment.experiment_id])
    assert run.data.tags["CartPole/checkpoint"] == str(checkpoint)  # the last save delivered
    assert "CartPole/onnx" not in run.data.tags or run.data.tags["CartPole/onnx"] != str(link)
    uploaded = Path(client.download_artifacts(run.info.run_id, "", str(tmp_path / "down")))
    files = [p for p in uploaded.rglob("*") if p.is_file()]
    assert (uploaded / "CartPole" / "checkpoints" / "checkpoint.pt").read_bytes() == (
        checkpoint.read_bytes()
    )
    assert all(p.read_bytes() != secret.read_bytes() for p in files)
    assert not any(p.name in ("secret.pt", link.name, "configuration.yaml") for p in files)


def test_wandb_uploads_only_files_evtrain_wrote_in_the_run_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The wandb writer checks a path as the MLflow writer does: a checkpoint outside the run
    folder is dead-lettered, not logged nor staged for upload; the run's own is uploaded."""
    pytest.importorskip("wandb")
    from evtrain import Bus, SaveEvent, signals
    from evtrain_writers.wandb_writer import WandbOptions, WandbWriter

    monkeypatch.setenv("WANDB_DATA_DIR", str(tmp_path / "wandb-data"))  # its artifact staging
    monkeypatch.setenv("WANDB_CACHE_DIR", str(tmp_path / "wandb-cache"))
    run = tmp_path / "run"
    (run / "CartPole").mkdir(parents=True)
    checkpoint = run / "CartPole" / "CartPole-10.pt"
    checkpoint.write_bytes(b"the run's own checkpoint")
    secret = tmp_path / "secret.pt"
    secret.write_bytes(b"the user's secret")
    options = WandbOptions(mode="offline", project="tests", upload_artifacts=True)
    writer = WandbWriter(options, run_id="run", run_folder=run, run_logs=run / "run_logs")
    with Bus(journal_dir=run / "run_logs" / "journal") as bus:
        bus.add_writer(writer, name="wandb")
        bus.emit(signals.save, SaveEvent(category="CartPole", step=5, path=secret))
        bus.emit(signals.save, SaveEvent(category="CartPole", step=10, path=checkpoint))
        report = bus.close(timeout=120)
    written = [p for p in tmp_path.rglob("*") if p.is_file() and not p.is_symlink()]
    staged = [p for p in written if p not in (secret, checkpoint)]
    assert any(p.read_bytes() == checkpoint.read_bytes() for p in staged)  # staged to upload
    assert not any(p.read_bytes() == secret.read_bytes() for p in staged)
    assert report.dead_lettered == {"wandb": 1}
    [refused] = [
        json.loads(line)
        for line in (run / "run_logs" / "dead_letter" / "wandb.jsonl").read_text().splitlines()
    ]
    assert refused["reason"].startswith(
        f"{secret} is not uploaded: it is outside the run folder {run}"
    )
