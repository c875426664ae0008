"""Run under ``torchrun`` by tests/test_distributed.py: every World collective on N ranks.

Writes ``<folder>/rank<R>.json`` per rank with what each collective returned there.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch
import torch.distributed as dist

from evtrain import StatsAggregationMethod, StatsSummary
from evtrain.distributed import World


def main() -> None:
    dist.init_process_group("gloo")
    world = World.current()
    rank = world.rank
    gradient = torch.full((5,), float(rank + 1))
    world.average_(gradient)
    weights = torch.full((3,), float(rank))
    world.broadcast_([weights])
    summaries = {
        "Environment/Cumulative Reward": StatsSummary(full_dist=[float(rank)] * (rank + 1)),
        "Step": StatsSummary(
            full_dist=[100.0 + rank], aggregation_method=StatsAggregationMethod.MOST_RECENT
        ),
    }
    merged = world.merge_stats(summaries)
    result = {
        "rank": rank,
        "average": gradient.tolist(),
        "broadcast": weights.tolist(),
        "sum": world.sum([1.0, float(rank)]),
        "any": [world.any(rank == 1), world.any(False)],
        "object": world.broadcast_object(f"from {rank}"),
        "gathered": [t.tolist() for t in world.all_gather(torch.tensor([float(rank)]))],
        "merged": {key: list(s.full_dist) for key, s in merged.items()},
    }
    (Path(sys.argv[1]) / f"rank{rank}.json").write_text(json.dumps(result))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
