"""The stand-in's other scenes: one learnable dynamic under many behaviors' shapes.

Every agent sees a cue (its first vector observation's first value, +1 or -1, redrawn each
step) and earns +0.1 for a step whose action follows it: the first continuous action's sign, or
the first branch's action 1 for +1 and 2 for -1.  Each scene gives its behaviors the observation
and action shapes of what it stands for:

- ``duel``: ``Duel?team=0`` and ``Duel?team=1``, one agent each; after 10 steps the agent that
  followed its cue more often wins (+1, the other -1, 0 each on a tie) and the episode ends.
- ``mixed``: behavior ``Mixed``, hybrid actions (2 continuous, branches 3 and 2), a vector
  observation and a 16x16 PNG camera (``--layout hwc`` as package 2.x, ``--layout chw`` as 3.0+);
  agents 0-1 in group 1 and 2-3 in group 2 share group rewards, agents 1 and 3 decide every 2nd
  step, agent 4 appears at step 3, agent 2 leaves at step 5; episodes of 20 steps.
- ``multi``: ``Striker?team=0/1`` (self-play duel as above) and ``Coop`` (two groups of 3 with
  group rewards: +1 each to the group when all its agents followed their cues) in one build.
- ML-Agents' samples, with their behaviors' observation and action sizes (``--areas N``: N
  copies of the agents, as Unity's training areas): ``3DBall`` (12 agents,
  8 floats, 2 continuous), ``GridWorld`` (9 agents, an 84x84 camera and a goal signal of 2,
  one branch of 5 with action masks), ``PushBlock`` (ray perception of 210 floats, one branch
  of 7), ``SoccerTwos`` (``?team=0/1``, two agents each, rays of 264 and 72 floats, branches
  3, 3, 3).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

import numpy as np

from tests.standin import wire
from tests.standin.world import Body, Scenario

FOLLOW_REWARD = 0.1
DUEL_STEPS = 10


class Shape:
    """A behavior's observations and actions."""

    def __init__(self, vectors: Sequence[int], continuous: int = 0, branches: Sequence[int] = (),
                 *, camera: int = 0, goal: int = 0, masks: bool = False) -> None:  # fmt: skip
        self.vectors = tuple(vectors)
        self.continuous = continuous
        self.branches = tuple(branches)
        self.camera = camera
        self.goal = goal
        self.masks = masks


class CueScene(Scenario):
    """Agents following cues; subclasses set the behaviors, the agents and the endings."""

    shapes: ClassVar[dict[str, Shape]] = {}
    max_step = 0

    def __init__(self, options: dict[str, str], rng: Any) -> None:
        super().__init__(options, rng)
        self.layout = wire.CHW if options.get("layout", "hwc") == "chw" else wire.HWC
        self.frames: dict[tuple[int, int], bytes] = {}
        # Precomputed observations: one per (behavior, cue).
        self.vector_obs = {
            (name, cue): [
                wire.vector_observation([float(cue)] + [0.5] * (size - 1), f"Vector{i}")
                for i, size in enumerate(shape.vectors)
            ]
            for name, shape in self.shapes.items()
            for cue in (-1, 1)
        }

    def behaviors(self) -> list[Any]:
        return [wire.brain_parameters(n, s.continuous, s.branches) for n, s in self.shapes.items()]

    def begin(self, body: Body) -> None:
        body.state = {"cue": self.rng.choice((-1, 1)), "followed": 0, "step": 0}

    def followed(self, body: Body, action: Any) -> bool:
        cue = body.state["cue"]
        if action.continuous_actions:
            return bool(action.continuous_actions[0] * cue > 0)
        if action.discrete_actions:
            return bool(action.discrete_actions[0] == (1 if cue > 0 else 2))
        return False

    def act(self, body: Body, action: Any) -> None:
        hit = self.followed(body, action)
        body.reward += FOLLOW_REWARD if hit else 0.0
        body.state["followed"] += int(hit)
        body.state["hit"] = hit
        body.state["step"] += 1
        body.state["cue"] = self.rng.choice((-1, 1))

    def observe(self, body: Body) -> Sequence[Any]:
        shape = self.shapes[body.behavior]
        cue = body.state["cue"]
        obs = list(self.vector_obs[(body.behavior, cue)])
        if shape.camera:
            obs.insert(0, self.camera(shape.camera, cue))
        if shape.goal:
            goal = [1.0 if i == body.index % shape.goal else 0.0 for i in range(shape.goal)]
            obs.append(wire.vector_observation(goal, "GoalSignal", observation_type=1))
        return obs

    def camera(self, size: int, cue: int) -> Any:
        if (size, cue) not in self.frames:
            image = np.zeros((size, size, 3))
            image[:, : size // 2, 0 if cue > 0 else 2] = 1.0  # the cue, in colour
            self.frames[(size, cue)] = wire.png(image)
        return wire.camera_observation(self.frames[(size, cue)], size, size, self.layout, "Camera")

    def mask(self, body: Body) -> Sequence[bool] | None:
        shape = self.shapes[body.behavior]
        if not shape.masks:
            return None
        # GridWorld masks the moves into walls: here, the last action of the first branch.
        return [index == shape.branches[0] - 1 for index in range(sum(shape.branches))]


class Duel(CueScene):
    names = ("Duel?team=0", "Duel?team=1")
    shapes: ClassVar[dict[str, Shape]] = {name: Shape([4], 0, (3,)) for name in names}

    def bodies(self) -> list[Body]:
        return [Body(name) for name in self.names]

    def frame(self, step: int) -> None:
        pairs = [self.academy.bodies[i : i + 2] for i in range(0, len(self.academy.bodies), 2)]
        for pair in pairs:
            self.judge(pair)

    def judge(self, pair: Sequence[Body]) -> None:
        first, second = pair
        if first.state is None or first.state["step"] < DUEL_STEPS:
            return
        score = np.sign(first.state["followed"] - second.state["followed"])
        first.reward += float(score)
        second.reward -= float(score)
        self.academy.end(first)
        self.academy.end(second)


class Multi(Duel):
    names = ("Striker?team=0", "Striker?team=1")
    shapes: ClassVar[dict[str, Shape]] = {
        **{name: Shape([6], 0, (3,)) for name in names},
        "Coop": Shape([5], 0, (3,)),
    }

    def bodies(self) -> list[Body]:
        strikers = [Body(name) for name in self.names]
        return strikers + [Body("Coop", group=1 + i // 3) for i in range(6)]

    def frame(self, step: int) -> None:
        self.judge(self.academy.bodies[:2])
        coop = self.academy.bodies[2:]
        for group in (coop[:3], coop[3:]):
            if all(body.state and body.state.get("hit") for body in group):
                for body in group:
                    body.group_reward += 1.0
                    body.state["hit"] = False
        if step and step % 25 == 0:  # the groups' episodes end together
            for body in coop:
                self.academy.end(body, interrupted=True)


class Mixed(CueScene):
    max_step = 20
    shapes: ClassVar[dict[str, Shape]] = {"Mixed": Shape([4], 2, (3, 2), camera=16)}

    def bodies(self) -> list[Body]:
        bodies = [Body("Mixed", period=1 + i % 2, group=1 + i // 2) for i in range(4)]
        late = Body("Mixed")
        late.active = False
        return [*bodies, late]

    def frame(self, step: int) -> None:
        bodies = self.academy.bodies
        if step == 3 and not bodies[4].active:
            self.academy.enter(bodies[4])
        if step == 5 and bodies[2].active:
            self.academy.end(bodies[2], leave=True)
        for group in (bodies[:2], bodies[2:4]):
            if all(body.state and body.state.get("hit") for body in group if body.active):
                for body in group:
                    body.group_reward += 0.5
                    body.state["hit"] = False


class Sample(CueScene):
    """An ML-Agents sample's behavior: ``agents`` agents in ``teams`` teams (each team a group,
    as SoccerTwos' ``SimpleMultiAgentGroup``s), 50-step episodes; ``--areas N`` puts N such
    training areas in the build, each with groups of its own."""

    max_step = 50
    behavior = ""
    agents = 1
    teams = 0

    def bodies(self) -> list[Body]:
        areas = int(self.options.get("areas", "1"))
        if not self.teams:
            return [Body(self.behavior) for _ in range(self.agents * areas)]
        return [
            Body(
                f"{self.behavior}?team={i % self.teams}",
                group=1 + area * self.teams + i % self.teams,
            )
            for area in range(areas)
            for i in range(self.agents)
        ]


def sample(behavior: str, shape: Shape, agents: int, teams: int = 0) -> type[Sample]:
    names = [f"{behavior}?team={t}" for t in range(teams)] if teams else [behavior]
    attributes = {"behavior": behavior, "agents": agents, "teams": teams,
                  "shapes": {name: shape for name in names}}  # fmt: skip
    return type(behavior, (Sample,), attributes)


SAMPLES: dict[str, type[Scenario]] = {
    "3DBall": sample("3DBall", Shape([8], 2), 12),
    "GridWorld": sample("GridWorld", Shape([], 0, (5,), camera=84, goal=2, masks=True), 9),
    "PushBlock": sample("PushBlock", Shape([210], 0, (7,)), 1),
    "SoccerTwos": sample("SoccerTwos", Shape([264, 72], 0, (3, 3, 3)), 4, teams=2),
}
