"""Unity exchanges: steps/s of one build with 1, 8 and 32 agents, three trainers' sides.

The build is the stand-in player (``tests/standin``, the ``corridor`` scene: ML-Agents' Basic,
20 one-hot floats and one branch of 3 per agent, ``--areas N`` agents), launched as a build.
Each case times ``--steps`` exchanges after a warm-up, the actions made beforehand:

* ``evtrain``: :class:`evtrain.unity.connection.UnityConnection` (``set_actions`` + ``step``,
  the steps decoded into numpy);
* ``mlagents-envs``: mlagents-envs 0.28.0's ``UnityEnvironment`` (``set_actions`` + ``step`` +
  ``get_steps``) in its own venv (tests/standin/reference.py; protobuf's pure-Python
  implementation, the only one its generated code runs on with Python 3.11);
* ``floor``: a bare gRPC server answering every call with a precomputed reply of the same
  size (no decoding, no encoding): what the build and gRPC cost alone.

Goals (issue 33): evtrain >= 1.5x mlagents-envs at 32 agents; evtrain's time per step within
1.3x the floor's plus 20 us per agent.  Writes ``benchmarks/out/unity.json``::

    .venv/bin/python benchmarks/bench_unity.py --steps 2000 --agents 1 8 32
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from common import ROOT, machine, make_parser, write_json

sys.path.insert(0, str(ROOT))

WARMUP = 50


def launch(build: Path, port: int, folder: Path, agents: int) -> subprocess.Popen[bytes]:
    from tests.standin.launch import launch as start

    return start(build, port, folder / f"player-{port}.log", "--areas", str(agents))


def bench_evtrain(build: Path, folder: Path, agents: int, steps: int) -> float:
    import numpy as np
    from tests.helpers import free_port

    from evtrain.unity.connection import UnityConnection
    from evtrain.unity.side_channels import StatsSideChannel
    from evtrain.unity.steps import ActionTuple

    port = free_port()
    action = ActionTuple(
        continuous=np.zeros((agents, 0), np.float32), discrete=np.full((agents, 1), 2, np.int32)
    )
    with UnityConnection(port, side_channels=[StatsSideChannel()]).open() as connection:
        process = launch(build, port, folder, agents)
        connection.handshake(30.0, alive=lambda: process.poll() is None)
        connection.reset()
        for index in range(WARMUP + steps):
            if index == WARMUP:
                started = time.perf_counter()
            connection.set_actions("Basic", action)
            connection.step()
        seconds = time.perf_counter() - started
    process.wait(10)
    return seconds


def bench_mlagents(build: Path, folder: Path, agents: int, steps: int) -> float:
    from tests.helpers import free_port
    from tests.standin.reference import drive, reference_python

    plan = {"build": str(build.with_suffix("")), "port": free_port(), "steps": WARMUP,
            "time_steps": steps, "policy": "right", "args": ["--areas", str(agents)],
            "log_folder": str(folder / "mlagents")}  # fmt: skip
    report = drive(reference_python(), plan, cwd=folder)
    if report.get("error"):
        raise RuntimeError(report["error"])
    seconds: float = report["seconds"]
    return seconds


def bench_floor(build: Path, folder: Path, agents: int, steps: int) -> float:
    import grpc
    from tests.helpers import free_port

    from evtrain.unity import schema

    replies = [schema.UnityMessageProto(), schema.UnityMessageProto(), schema.UnityMessageProto()]
    for reply in replies:
        reply.header.status = 200
    replies[0].unity_input.rl_initialization_input.communication_version = "1.5.0"
    replies[1].unity_input.rl_input.command = schema.CommandProto["RESET"]
    step = replies[2].unity_input.rl_input
    step.agent_actions["Basic"].value.extend(
        schema.AgentActionProto(discrete_actions=[2]) for _ in range(agents)
    )
    wire = [reply.SerializeToString() for reply in replies]
    quit_reply = schema.UnityMessageProto(header=schema.HeaderProto(status=400))
    calls = {"count": 0, "started": 0.0, "ended": 0.0}
    done = threading.Event()

    def exchange(request: bytes, context: Any) -> bytes:
        calls["count"] += 1
        count = calls["count"]
        if count == 3 + WARMUP:
            calls["started"] = time.perf_counter()
        if count == 3 + WARMUP + steps:
            calls["ended"] = time.perf_counter()
            done.set()
            return quit_reply.SerializeToString()  # type: ignore[no-any-return]
        return wire[min(count, 3) - 1]

    handler = grpc.method_handlers_generic_handler(
        schema.SERVICE, {"Exchange": grpc.unary_unary_rpc_method_handler(exchange)}
    )
    server = grpc.server(ThreadPoolExecutor(max_workers=2), handlers=[handler])
    port = free_port()
    server.add_insecure_port(f"127.0.0.1:{port}")
    server.start()
    process = launch(build, port, folder, agents)
    finished = done.wait(300)
    process.wait(10)
    server.stop(None)
    if not finished:
        raise RuntimeError("the floor's build stopped before its steps")
    return calls["ended"] - calls["started"]


CASES = {"evtrain": bench_evtrain, "mlagents-envs": bench_mlagents, "floor": bench_floor}


def main() -> None:
    parser = make_parser(__doc__)
    parser.add_argument("--steps", type=int, default=2000, help="timed exchanges per case")
    parser.add_argument("--agents", type=int, nargs="+", default=[1, 8, 32])
    parser.add_argument("--cases", nargs="+", default=list(CASES), choices=list(CASES))
    args = parser.parse_args()
    from tests.standin import make_build

    rows: dict[str, dict[str, float]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        build = make_build(folder, "corridor", "Basic")
        print(f"{'agents':>6} " + " ".join(f"{case:>14}" for case in args.cases) + "  (steps/s)")
        for agents in args.agents:
            row = {}
            for case in args.cases:
                row[case] = args.steps / CASES[case](build, folder, agents, args.steps)
            rows[str(agents)] = row
            print(f"{agents:>6} " + " ".join(f"{row[c]:>14.0f}" for c in args.cases), flush=True)
    goals = goals_of(rows)
    for line in goals["lines"]:
        print(line)
    path = write_json("unity.json", {"args": vars(args), "machine": machine(),
                                     "steps_per_s": rows, "goals": goals})  # fmt: skip
    print(f"wrote {path}")


def goals_of(rows: dict[str, dict[str, float]]) -> dict[str, Any]:
    """The issue's two goals, each with its figures and whether it is met."""
    lines, met = [], {}
    for agents, row in rows.items():
        if "evtrain" in row and "floor" in row:
            us = 1e6 / row["evtrain"]
            bound = 1.3 * 1e6 / row["floor"] + 20 * int(agents)
            met[f"floor_{agents}"] = us <= bound
            lines.append(f"{agents} agents: evtrain {us:.0f} us/step, bound {bound:.0f} us")
    last = rows.get("32", {})
    if "evtrain" in last and "mlagents-envs" in last:
        ratio = last["evtrain"] / last["mlagents-envs"]
        met["mlagents_32"] = ratio >= 1.5
        lines.append(f"32 agents: evtrain / mlagents-envs = {ratio:.2f}x (goal >= 1.5x)")
    return {"met": met, "lines": lines}


if __name__ == "__main__":
    main()
