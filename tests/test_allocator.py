"""evtrain.run.build.keep_freed_memory: an update's freed tensors stay in the heap."""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys

import pytest

pytestmark = pytest.mark.skipif(
    platform.system() != "Linux" or platform.libc_ver()[0] != "glibc", reason="glibc only"
)

PROBE = """
import json, resource, sys
import torch
from evtrain.run.build import keep_freed_memory

applied = keep_freed_memory() if sys.argv[1] == "tune" else False

def update():
    # what an update does: allocate a few 1 MiB tensors, touch them, free them
    tensors = [torch.empty(256 * 1024).fill_(1.0) for _ in range(4)]
    return sum(float(t[0]) for t in tensors)

update()
faults = []
for _ in range(50):
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    update()
    faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
# the median update: a one-off growth of the heap (fragmentation by objects allocated between
# the tensors) is paid once, not at every update
faults.sort()
print(json.dumps({"applied": applied, "faults_per_update": faults[len(faults) // 2]}))
"""


def probe(mode: str, **env: str) -> dict[str, float]:
    environ = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_")}
    environ.update(env)
    done = subprocess.run(
        [sys.executable, "-c", PROBE, mode],
        check=True,
        capture_output=True,
        text=True,
        env=environ,
        timeout=120,
    )
    result: dict[str, float] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def test_freed_tensors_are_reused_without_page_faults() -> None:
    # glibc's own behaviour with these sizes, pinned to its static defaults
    baseline = probe("default", MALLOC_TRIM_THRESHOLD_="131072", MALLOC_MMAP_THRESHOLD_="131072")
    tuned = probe("tune")
    assert tuned["applied"]
    # the four 1 MiB tensors are 1,024 pages: mapped again at every update
    assert baseline["faults_per_update"] >= 512
    assert tuned["faults_per_update"] < 1


def test_a_users_malloc_settings_win() -> None:
    result = probe("tune", MALLOC_TRIM_THRESHOLD_="131072")
    assert not result["applied"]
