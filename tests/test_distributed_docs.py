"""docs/distributed.md's walk-through of two nodes, run as written: the two ``torchrun``
commands of its "Several machines" block, read out of the doc, both at once in a folder holding
a small ``config.yaml``, only the rendezvous port changed to a free one."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import yaml

from evtrain.run.checkpoints.checkpoint import load_checkpoint
from tests.helpers import ROOT, clean_env, free_port

DOC = ROOT / "docs" / "distributed.md"
PORT = "127.0.0.1:29400"


def walk_through() -> list[str]:
    """The commands of the first ``sh`` block under "## Several machines", one per command
    (continued lines joined, comments dropped)."""
    section = DOC.read_text().split("## Several machines", 1)[1]
    match = re.search(r"^```sh\n(.*?)^```$", section, re.DOTALL | re.MULTILINE)
    assert match is not None, "no sh block under ## Several machines"
    lines = match[1].replace("\\\n", " ").splitlines()
    return [line for line in lines if line.strip() and not line.lstrip().startswith("#")]


def test_the_walk_through_shows_two_nodes_of_one_c10d_rendezvous() -> None:
    commands = walk_through()
    assert len(commands) == 2 and commands[0] == commands[1]
    words = shlex.split(commands[0])
    assert words[:3] == ["torchrun", "--nnodes", "2"]
    assert "--rdzv-backend" in words and f"{PORT}" in words


def test_the_two_node_walk_through_runs_as_written(tmp_path: Path) -> None:
    config = {
        "behaviors": {
            "CartPole": {
                "trainer_type": "ppo",
                "hyperparameters": {"batch_size": 32, "buffer_size": 64, "num_epoch": 1},
                "network_settings": {"hidden_units": 16},
                "max_steps": 512,
                "time_horizon": 16,
                "summary_freq": 128,
            }
        },
        "env_settings": {"env_id": "CartPole-v1", "num_envs": 4, "seed": 1},
    }
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(config))
    port = f"127.0.0.1:{free_port()}"
    # torchrun and evtrain as this test's interpreter has them (the evtrain under test).
    path = os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])
    env = clean_env(PATH=path, OMP_NUM_THREADS="1")
    nodes = [
        subprocess.Popen(
            shlex.split(command.replace(PORT, port)),
            cwd=tmp_path,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        for command in walk_through()
    ]
    outputs = []
    for node in nodes:
        try:
            outputs.append(node.communicate(timeout=180))
        finally:
            node.kill()
    assert [node.returncode for node in nodes] == [0, 0], [err[-3000:] for _, err in outputs]
    assert sorted(out for out, _ in outputs) == [
        "",
        "CartPole: 512 steps, policy exported to results/two-nodes/CartPole.onnx\n"
        "TensorBoard: tensorboard --logdir results\n",
    ]
    run = tmp_path / "results" / "two-nodes"
    assert load_checkpoint(run / "CartPole" / "checkpoint.pt")["step"] == 512
    assert len(list((run / "CartPole").glob("events.out.tfevents.*"))) == 1
