"""``base_port: 5004`` without ``env_path`` trains in the Unity Editor: ``evtrain learn`` says it
waits for the Editor, and the Editor's Play (here: the stand-in corridor started by hand with
``--mlagents-port 5004``, as the Editor connects) is trained to the end."""

from __future__ import annotations

import queue
import socket
import subprocess
import sys
import threading
from pathlib import Path
from typing import IO

import pytest
import yaml

from tests.helpers import end_with_the_suite
from tests.standin import make_build

EDITOR_PORT = 5004
WAITING = f"waiting for the Unity Editor on port {EDITOR_PORT}: press Play"


def _port_is_free(port: int) -> bool:
    with socket.socket() as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _lines(stream: IO[str]) -> queue.SimpleQueue[str | None]:
    """``stream``'s lines as they come, ``None`` at its end (read on a thread of its own)."""
    lines: queue.SimpleQueue[str | None] = queue.SimpleQueue()

    def read() -> None:
        for line in stream:
            lines.put(line)
        lines.put(None)

    threading.Thread(target=read, daemon=True).start()
    return lines


def _wait_for(lines: queue.SimpleQueue[str | None], text: str, seen: list[str]) -> None:
    while True:
        line = lines.get(timeout=120)
        assert line is not None, "evtrain ended first:\n" + "".join(seen)
        seen.append(line)
        if text in line:
            return


def test_base_port_5004_waits_for_the_editor_and_trains_it(tmp_path: Path) -> None:
    if not _port_is_free(EDITOR_PORT):
        pytest.skip(f"port {EDITOR_PORT} (the Unity Editor's) is in use on this machine")
    editor = make_build(tmp_path / "editor", "corridor", "Basic")
    behavior = {
        "trainer_type": "ppo",
        "hyperparameters": {"batch_size": 32, "buffer_size": 128, "num_epoch": 1},
        "network_settings": {"hidden_units": 16, "num_layers": 1},
        "max_steps": 256,
        "summary_freq": 128,
    }
    config = {
        "behaviors": {"Basic": behavior},
        "env_settings": {"base_port": EDITOR_PORT, "timeout_wait": 120},
        "checkpoint_settings": {"run_id": "editor", "results_dir": str(tmp_path / "results")},
    }
    (tmp_path / "editor.yaml").write_text(yaml.safe_dump(config))
    learn = end_with_the_suite(
        subprocess.Popen(
            [sys.executable, "-m", "evtrain", "learn", "editor.yaml"],
            cwd=tmp_path,
            stderr=subprocess.PIPE,
            text=True,
        )
    )
    assert learn.stderr is not None
    lines = _lines(learn.stderr)
    seen: list[str] = []
    _wait_for(lines, WAITING, seen)
    log = tmp_path / "Editor.log"
    play = end_with_the_suite(
        subprocess.Popen(
            [str(editor), "--mlagents-port", str(EDITOR_PORT), "-logFile", str(log)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
    )
    assert learn.wait(timeout=180) == 0, "".join(seen)
    while (line := lines.get(timeout=30)) is not None:  # the reader has read to the end
        seen.append(line)
    learn.stderr.close()  # else finalized at the worker's exit, with a ResourceWarning
    assert play.wait(timeout=30) == 0  # told to quit at the end, as the Editor is
    assert (tmp_path / "results/editor/Basic.onnx").exists()
    assert not (tmp_path / "results/editor/run_logs/Player-0.log").exists()  # nothing started
