from __future__ import annotations

import subprocess
import textwrap
from pathlib import Path

from tests.helpers import isolated_python

SCRIPT = textwrap.dedent(
    """
    import sys, time
    from evtrain import Bus, StatsEvent, signals

    out = open(sys.argv[1], "w")

    def slow_file_writer(event):
        time.sleep(0.0005)
        out.write(f"{event.step}\\n")

    def close():
        out.close()

    slow_file_writer.close = close
    bus = Bus()
    bus.connect(signals.stats, slow_file_writer)
    for step in range(2000):
        bus.emit(signals.stats, StatsEvent(category="C", step=step, values={}))
    # no bus.close(): the interpreter exits with ~2000 events still queued
    """
)


def test_unclosed_bus_is_drained_at_exit_with_resource_warning(tmp_path: Path) -> None:
    out = tmp_path / "steps.txt"
    result = subprocess.run(
        [isolated_python(), "-W", "always::ResourceWarning", "-c", SCRIPT, str(out)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert out.read_text().split() == [str(s) for s in range(2000)]
    assert "ResourceWarning: evtrain Bus was never closed; draining it at interpreter exit" in (
        result.stderr
    )
