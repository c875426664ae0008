"""Cooperation: POCA vs MAPPO vs independent PPO vs random at equal steps (simple_spread, KAZ).

``--game spread`` (the default): three agents (behavior ``agent``) must cover three landmarks
without colliding (``simple_spread_v3.parallel_env(N=3, local_ratio=0.5, max_cycles=25)``,
discrete actions): each agent's reward is half the team's (minus the distances from each
landmark to its nearest agent) and half its own (minus its collisions).  The metric is the
mean per-agent episode return of the last 100 agent episodes (``Environment/Cumulative
Reward``).

``--game kaz``: PettingZoo's ``knights_archers_zombies_v11`` (defaults: 2 archers, 2 knights,
vector observations of 27x5, 6 actions), where agents die early: a zombie that touches one
removes it, and the game ends when a zombie reaches the bottom or every agent is dead.  All
four agents are one behavior (``agent_behaviors``), so that POCA's group is the whole team
and one environment step trains them all.  The metric is the team's return, the sum of its
four agents' kills in an episode: 4 times the mean return of the last 100 agent episodes
(each episode of the game is one episode of each agent, so this is the mean team return of
about the last 25 games).

The same settings and step budget for ``poca``, ``mappo`` and ``ppo`` (independent PPO: one
policy shared by the agents, a critic of each agent's own observation); ``random`` is
uniformly random actions on the PettingZoo environment itself.  Steps are agent steps (an
environment step of 3 agents is 3; a dead agent's are none), as evtrain counts them.  Each
run is its own subprocess with one torch thread.  Reports, per run: the metric, steps/s and
the learning curve (the mean return, or team return, of each summary period's episodes); per
variant the median and spread over seeds; prints a table and writes JSON to
``benchmarks/out/cooperation.json`` (``cooperation_kaz.json``).

    .venv/bin/python benchmarks/bench_cooperation.py --steps 300000 --seeds 0 1 2
    .venv/bin/python benchmarks/bench_cooperation.py --game kaz --steps 80000 \
        --variants poca ppo random
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from dataclasses import dataclass, field
from typing import Any

from common import (
    Column,
    add_run_args,
    episode_returns,
    header,
    learn_here,
    make_parser,
    median_of,
    one_torch_thread,
    row,
    run_worker,
    write_json,
)

VARIANTS = ("poca", "mappo", "ppo", "random")
LAST = 100
"""Agent episodes the reported mean is over."""
COLUMNS = (
    Column("variant", 8, align="<"),
    Column("seed", 5, "d"),
    Column("steps", 9, "d"),
    Column("last-100 return", 16, ".2f"),
    Column("steps/s", 9, ",.0f"),
    Column("s", 7, ".1f"),
)


@dataclass(frozen=True)
class Game:
    """A PettingZoo game and how the benchmark trains and scores it."""

    module: str
    """The module of its ``parallel_env``."""
    kwargs: dict[str, Any]
    agents: int
    """Agents per copy."""
    actions: int
    time_horizon: int
    rollout: int
    """Agent steps per rollout and environment copy."""
    minibatches: int
    """Per epoch: ``batch_size`` is the rollout over this."""
    copies: int
    """``--envs``' default."""
    team: bool
    """Score the team's return (the sum of its agents') rather than an agent's."""
    report: str
    behaviors: dict[str, str] = field(default_factory=dict)
    """``env_settings.agent_behaviors``."""

    @property
    def env_id(self) -> str:
        return f"{self.module}:parallel_env"

    def score(self, returns: list[float]) -> float:
        """The metric of the last :data:`LAST` agent episode returns (in the order they
        ended): their mean, times the agents per copy if it is the team's."""
        return (self.agents if self.team else 1) * statistics.fmean(returns[-LAST:])


def ended(returns: list[float], steps: int) -> list[float]:
    """``returns``, which must hold an episode.

    :raises SystemExit: naming ``--steps`` if no episode ended in ``steps``.
    """
    if not returns:
        raise SystemExit(f"--steps {steps} ended no episode: give more steps")
    return returns


GAMES = {
    "spread": Game(
        module="mpe2.simple_spread_v3",
        kwargs={"N": 3, "local_ratio": 0.5, "max_cycles": 25, "continuous_actions": False},
        agents=3,
        actions=5,
        time_horizon=25,
        rollout=3 * 75,  # three 25-step episodes of each of the 3 agents
        minibatches=3,
        copies=16,
        team=False,
        report="cooperation.json",
    ),
    "kaz": Game(
        module="pettingzoo.butterfly.knights_archers_zombies_v11",
        kwargs={},
        agents=4,
        actions=6,
        time_horizon=64,
        rollout=4 * 128,
        minibatches=4,
        copies=8,
        team=True,
        report="cooperation_kaz.json",
        behaviors={a: "agent" for a in ("archer_0", "archer_1", "knight_0", "knight_1")},
    ),
}


def options(game: Game, variant: str, steps: int, seed: int, copies: int) -> dict[str, Any]:
    """The run's configuration: the MAPPO paper's MPE settings where evtrain has the key
    (learning rate 7e-4, 10 epochs, entropy 0.01, 64 units, gamma 0.99, lambda 0.95)."""
    rollout = copies * game.rollout
    behavior = {
        "trainer_type": variant,
        "hyperparameters": {
            "batch_size": rollout // game.minibatches,
            "buffer_size": rollout,
            "learning_rate": 7.0e-4,
            "learning_rate_schedule": "constant",
            "beta": 0.01,
            "num_epoch": 10,
            "lambd": 0.95,
        },
        "network_settings": {"hidden_units": 64, "num_layers": 2, "normalize": True},
        "reward_signals": {"extrinsic": {"gamma": 0.99}},
        "max_steps": steps,
        "time_horizon": game.time_horizon,
        "summary_freq": max(steps // 10, rollout),
        "checkpoint_interval": steps,
        "keep_checkpoints": 1,
    }
    environment: dict[str, Any] = {
        "env_id": game.env_id,
        "env_kwargs": game.kwargs,
        "num_envs": copies,
        "seed": seed,
    }
    if game.behaviors:
        environment["agent_behaviors"] = game.behaviors
    return {
        "behaviors": {"agent": behavior},
        "env_settings": environment,
        "torch_settings": {"device": "cpu"},
    }


def run_trainer(game: Game, variant: str, steps: int, seed: int, copies: int) -> dict[str, Any]:
    """One training run in this process."""
    one_torch_thread()
    returns: list[float] = []
    curve: list[list[float]] = []

    def on_stats(event: Any) -> None:
        period = episode_returns(event)
        returns.extend(period)
        if period:
            scale = game.agents if game.team else 1
            curve.append([event.step, round(scale * statistics.fmean(period), 3)])

    result, seconds = learn_here(options(game, variant, steps, seed, copies), on_stats)
    done = result.steps["agent"]
    ended(returns, steps)
    return {
        "variant": variant,
        "seed": seed,
        "steps": done,
        "seconds": round(seconds, 1),
        "steps_per_s": round(done / seconds, 1),
        "episodes": len(returns),
        "mean_return_last_100": round(statistics.fmean(returns[-LAST:]), 3),
        "score": round(game.score(returns), 3),
        "curve": curve,
    }


def run_random(game: Game, steps: int, seed: int) -> dict[str, Any]:
    """Uniformly random actions on the PettingZoo environment, ``steps`` agent steps."""
    import importlib

    import numpy as np

    env = importlib.import_module(game.module).parallel_env(**game.kwargs)
    rng = np.random.default_rng(seed)
    returns: list[float] = []
    teams: list[float] = []
    done = 0
    start = time.perf_counter()
    env.reset(seed=seed)
    totals = dict.fromkeys(env.agents, 0.0)
    while done < steps:
        actions = {agent: int(rng.integers(game.actions)) for agent in env.agents}
        rewards = env.step(actions)[1]
        done += len(actions)
        for agent, reward in rewards.items():
            totals[agent] += float(reward)
        if not env.agents:
            returns.extend(totals.values())
            teams.append(sum(totals.values()))
            env.reset(seed=int(rng.integers(2**31)))
            totals = dict.fromkeys(env.agents, 0.0)
    seconds = time.perf_counter() - start
    env.close()
    scores = teams if game.team else returns
    ended(returns, steps)
    return {
        "variant": "random",
        "seed": seed,
        "steps": done,
        "seconds": round(seconds, 1),
        "steps_per_s": round(done / seconds, 1),
        "episodes": len(returns),
        "mean_return_last_100": round(statistics.fmean(returns[-LAST:]), 3),
        "score": round(game.score(returns), 3),
        "mean_return_all": round(statistics.fmean(scores), 3),
        "std_return_all": round(statistics.pstdev(scores), 3),
    }


def summarize(runs: list[dict[str, Any]], variants: list[str], team: bool) -> dict[str, Any]:
    """Per variant: the median, min and max of the metric over seeds, and the median steps/s."""
    name = "team_last_100" if team else "last_100"
    summary = {}
    for variant in variants:
        finals = [r["score"] for r in runs if r["variant"] == variant]
        summary[variant] = {
            f"median_{name}": median_of(runs, "score", variant=variant),
            f"min_{name}": min(finals),
            f"max_{name}": max(finals),
            "median_steps_per_s": median_of(runs, "steps_per_s", variant=variant),
        }
        median = summary[variant][f"median_{name}"]
        print(
            f"{variant}: median last-100 {'team ' if team else ''}return {median:.2f} "
            f"(seeds {min(finals):.2f} .. {max(finals):.2f})"
        )
    return summary


def main() -> None:
    parser = make_parser(__doc__)
    add_run_args(parser, steps=300_000, seeds=[0, 1, 2])
    parser.add_argument("--variants", nargs="+", choices=VARIANTS, default=list(VARIANTS))
    parser.add_argument("--envs", type=int, help="environment copies per run (spread 16, kaz 8)")
    parser.add_argument("--game", choices=sorted(GAMES), default="spread")
    parser.add_argument("--worker", choices=VARIANTS, help=argparse.SUPPRESS)
    args = parser.parse_args()
    game = GAMES[args.game]
    copies = args.envs or game.copies
    if args.worker:
        seed = args.seeds[0]
        if args.worker == "random":
            print(json.dumps(run_random(game, args.steps, seed)))
        else:
            print(json.dumps(run_trainer(game, args.worker, args.steps, seed, copies)))
        return

    runs = []
    print(header(COLUMNS, " "))
    for seed in args.seeds:
        for variant in args.variants:
            cmd = [sys.executable, __file__, "--worker", variant, "--steps", str(args.steps)]
            cmd += ["--seeds", str(seed), "--envs", str(copies), "--game", args.game]
            r = run_worker(cmd)
            runs.append(r)
            values = (variant, seed, r["steps"], r["score"])
            print(row(COLUMNS, (*values, r["steps_per_s"], r["seconds"]), " "), flush=True)
    summary = summarize(runs, args.variants, game.team)
    environment = {"id": game.env_id, **game.kwargs}
    if game.behaviors:
        environment["agent_behaviors"] = game.behaviors
    report = {"args": vars(args), "env": environment, "runs": runs}
    path = write_json(game.report, {**report, "summary": summary})
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
