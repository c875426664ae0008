"""``corridor``: ML-Agents' Basic sample, and ``crash``, the same scene that dies after N steps.

Basic (``BasicController.cs``): a 20-cell corridor, the agent starts at cell 10, observes its cell
one-hot (the ``BasicSensor``, 20 floats); one branch of 3 actions: 0 stays, 1 moves left, 2 moves
right.  Each step costs 0.01; reaching the small goal (cell 7) gives +0.1 and reaching the large
goal (cell 17) +1, each ending the episode; an episode lasts at most 100 steps (then it ends as
max_step_reached).  ``--areas N`` puts N such agents in the build (Unity's training areas).

At each goal the scene records, as ``Academy.Instance.StatsRecorder.Add`` would: the goal's
cell (``Basic/Goal Cell``, averaged), 1 (``Basic/Goals``, summed), the seed this instance got
in the handshake (``Basic/Seed``, most recent: it tells the instances apart) and the episode's
steps so far (``Basic/Goal Steps``, a histogram).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tests.standin import wire
from tests.standin.world import Body, Scenario

CELLS = 20
START = 10
SMALL_GOAL, SMALL_REWARD = 7, 0.1
LARGE_GOAL, LARGE_REWARD = 17, 1.0
STEP_PENALTY = 0.01
BEST_RETURN = LARGE_REWARD - STEP_PENALTY * (LARGE_GOAL - START)
"""The best episode's return: straight to the large goal (0.93)."""


class Corridor(Scenario):
    max_step = 100
    behavior = "Basic"

    def __init__(self, options: dict[str, str], rng: Any) -> None:
        super().__init__(options, rng)
        self.pending_stats: list[bytes] = []
        # Precomputed: one observation per cell (the player is timed in benchmarks).
        self.cells = [
            wire.vector_observation(
                [1.0 if i == cell else 0.0 for i in range(CELLS)], "BasicSensor"
            )
            for cell in range(CELLS)
        ]

    def behaviors(self) -> list[Any]:
        return [wire.brain_parameters(self.behavior, 0, (3,))]

    def bodies(self) -> list[Body]:
        return [Body(self.behavior) for _ in range(int(self.options.get("areas", "1")))]

    def begin(self, body: Body) -> None:
        body.state = START

    def act(self, body: Body, action: Any) -> None:
        move = action.discrete_actions[0] if action.discrete_actions else 0
        body.state = min(
            max(body.state + (-1 if move == 1 else 1 if move == 2 else 0), 0), CELLS - 1
        )
        body.reward -= STEP_PENALTY
        if body.state in (SMALL_GOAL, LARGE_GOAL):
            body.reward += SMALL_REWARD if body.state == SMALL_GOAL else LARGE_REWARD
            # What a scene's StatsRecorder.Add would send.
            self.pending_stats.append(
                wire.stat_message("Basic/Goal Cell", body.state, wire.STATS_AVERAGE)
            )
            self.pending_stats.append(wire.stat_message("Basic/Goals", 1.0, wire.STATS_SUM))
            self.pending_stats.append(
                wire.stat_message("Basic/Seed", self.seed, wire.STATS_MOST_RECENT)
            )
            self.pending_stats.append(
                wire.stat_message("Basic/Goal Steps", body.steps, wire.STATS_HISTOGRAM)
            )
            self.academy.end(body)

    def observe(self, body: Body) -> Sequence[Any]:
        return (self.cells[body.state],)

    def stats(self) -> list[bytes]:
        sent, self.pending_stats = self.pending_stats, []
        return sent
