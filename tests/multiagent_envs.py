"""Small deterministic PettingZoo environments whose every number a test can predict
(``env_id: tests.multiagent_envs:walkers`` / ``tests.multiagent_envs:countdown``).

:class:`Walkers` (Parallel API): walkers ``walker_0`` (there all episode), ``walker_1`` (leaves
at step ``leave_at``, terminated), ``walker_2`` (appears after step ``appear_at``) and one
``guide_0`` (another behavior).  Each observation is ``[step, agent index, last action]``; each
step rewards an agent its own action, and all agents' infos carry ``group_reward`` = the step
number.  Every agent still there is truncated after ``max_cycles`` steps.

:class:`Countdown` (AEC API): two players take turns taking 1 to 3 from a counter starting at
``start``; only takes up to the counter are legal (``action_mask``; an illegal one raises).
After each move the other player is rewarded 0.5; whoever takes the last one gets 1, the other
-1, and both are terminated.
"""

from __future__ import annotations

import copy
import threading
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import onnxruntime  # type: ignore[import-untyped]  # ships no type information
from gymnasium import spaces
from pettingzoo import AECEnv, ParallelEnv
from pettingzoo.utils import AgentSelector

WALKERS = ["walker_0", "walker_1", "walker_2", "guide_0"]
OBS = spaces.Box(-1.0, 1000.0, (3,), np.float32)


class Walkers(ParallelEnv):  # type: ignore[misc]  # an untyped base class
    """Agents that leave and appear at fixed steps (see the module's docs)."""

    metadata: ClassVar[dict[str, Any]] = {"name": "walkers_v0", "is_parallelizable": True}

    def __init__(
        self,
        leave_at: int = 2,
        appear_at: int = 3,
        max_cycles: int = 6,
        guide: bool = True,
        guide_actions: int = 3,
    ) -> None:
        self.leave_at, self.appear_at, self.max_cycles = leave_at, appear_at, max_cycles
        self.guide_actions = guide_actions
        self.possible_agents = WALKERS if guide else WALKERS[:3]
        self.agents: list[str] = []
        self.steps = 0
        self.seeds: list[int | None] = []
        """Every seed ``reset`` was given, in order."""
        self.played: list[dict[str, Any]] = []
        """Every step's actions, in order."""
        self.closed = False

    def observation_space(self, agent: str) -> spaces.Space[Any]:
        return OBS

    def action_space(self, agent: str) -> spaces.Space[Any]:
        return spaces.Discrete(self.guide_actions if agent == "guide_0" else 3)

    def _obs(self, agent: str, action: float) -> np.ndarray:
        index = self.possible_agents.index(agent)
        return np.array([self.steps, index, action], dtype=np.float32)

    def reset(
        self, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        self.seeds.append(seed)
        self.steps = 0
        self.agents = [a for a in self.possible_agents if a != "walker_2"]
        return {a: self._obs(a, -1.0) for a in self.agents}, {a: {} for a in self.agents}

    def step(self, actions: dict[str, Any]) -> tuple[dict[str, Any], ...]:
        assert set(actions) == set(self.agents), (sorted(actions), self.agents)
        self.played.append(dict(actions))
        self.steps += 1
        acting = list(self.agents)
        rewards = {a: float(actions[a]) for a in acting}
        terminations = {a: a == "walker_1" and self.steps == self.leave_at for a in acting}
        truncations = {a: self.steps >= self.max_cycles for a in acting}
        obs = {a: self._obs(a, float(actions[a])) for a in acting}
        infos = {a: {"group_reward": float(self.steps)} for a in acting}
        self.agents = [a for a in acting if not (terminations[a] or truncations[a])]
        if self.steps == self.appear_at and self.steps < self.max_cycles:
            self.agents.append("walker_2")
            obs["walker_2"] = self._obs("walker_2", -1.0)
        return obs, rewards, terminations, truncations, infos

    def close(self) -> None:
        self.closed = True


def walkers(**kwargs: Any) -> Walkers:
    return Walkers(**kwargs)


def guide_still(observation: Any, action_mask: Any) -> int:
    """A scripted ``guide_0`` (``evaluation.opponents``): always action 0, so a reward of 0."""
    return 0


MADE: list[Walkers] = []
"""Every :class:`Walkers` that :func:`made_walkers` made, in order (a test clears it)."""


def made_walkers(**kwargs: Any) -> Walkers:
    """:func:`walkers`, kept in :data:`MADE`: how many instances a run makes."""
    env = Walkers(**kwargs)
    MADE.append(env)
    return env


class TurnGame(AECEnv):  # type: ignore[misc]  # an untyped base class
    """A turn-based (AEC) game's PettingZoo bookkeeping, typed, and how a game starts."""

    agent_selection: str
    terminations: dict[str, bool]
    truncations: dict[str, bool]

    def _start_turns(self) -> None:
        """PettingZoo's per-agent rewards, flags and infos at their start for ``agents``, the
        first agent to move selected."""
        self.rewards = dict.fromkeys(self.agents, 0.0)
        self._cumulative_rewards = dict.fromkeys(self.agents, 0.0)
        self.terminations = dict.fromkeys(self.agents, False)
        self.truncations = dict.fromkeys(self.agents, False)
        self.infos: dict[str, dict[str, Any]] = {a: {} for a in self.agents}
        self._selector = AgentSelector(self.agents)
        self.agent_selection = self._selector.reset()


class Countdown(TurnGame):
    """A take-away game for two (see the module's docs)."""

    metadata: ClassVar[dict[str, Any]] = {"name": "countdown_v0", "is_parallelizable": False}

    def __init__(self, start: int = 7) -> None:
        super().__init__()
        self.start = start
        self.possible_agents = ["player_0", "player_1"]
        self.counter = start
        self.moves: list[tuple[str, int]] = []
        """Every move of the current episode: (agent, action)."""
        self._spaces = spaces.Dict(
            {
                "observation": spaces.Box(0.0, 100.0, (2,), np.float32),
                "action_mask": spaces.Box(0, 1, (3,), np.int8),
            }
        )

    def observation_space(self, agent: str) -> spaces.Space[Any]:
        return self._spaces

    def action_space(self, agent: str) -> spaces.Space[Any]:
        return spaces.Discrete(3)

    def observe(self, agent: str) -> Any:
        legal = [1 if take + 1 <= self.counter else 0 for take in range(3)]
        mine = self.possible_agents.index(agent)
        return {
            "observation": np.array([self.counter, mine], dtype=np.float32),
            "action_mask": np.array(legal, dtype=np.int8),
        }

    def reset(self, seed: int | None = None, options: dict[str, Any] | None = None) -> None:
        self.agents = list(self.possible_agents)
        self.counter = self.start
        self.moves = []
        self._start_turns()

    def step(self, action: Any) -> None:
        agent = self.agent_selection
        if self.terminations[agent] or self.truncations[agent]:
            self._was_dead_step(action)
            return
        take = int(action) + 1
        if take > self.counter:
            raise AssertionError(f"{agent} played illegal move {int(action)} at {self.counter}")
        self._clear_rewards()
        self._cumulative_rewards[agent] = 0.0
        self.moves.append((agent, int(action)))
        self.counter -= take
        other = self.possible_agents[1 - self.possible_agents.index(agent)]
        if self.counter == 0:
            self.rewards[agent], self.rewards[other] = 1.0, -1.0
            self.terminations = dict.fromkeys(self.agents, True)
        else:
            self.rewards[other] = 0.5
        self.agent_selection = self._selector.next()
        self._accumulate_rewards()


def countdown(**kwargs: Any) -> Countdown:
    return Countdown(**kwargs)


class Failing(Walkers):
    """:class:`Walkers` whose ``step`` raises at step ``fail_at``, and whose ``close`` never
    returns with ``hang`` (``vectorization: async``'s errors and closing)."""

    def __init__(self, fail_at: int = 3, hang: bool = False) -> None:
        super().__init__()
        self.fail_at, self.hang = fail_at, hang

    def step(self, actions: dict[str, Any]) -> tuple[dict[str, Any], ...]:
        if self.steps + 1 == self.fail_at:
            raise ValueError(f"walkers broke at step {self.fail_at}")
        return super().step(actions)

    def close(self) -> None:
        if self.hang:
            threading.Event().wait()


def tiny(behavior: dict[str, Any], env: dict[str, Any], names: tuple[str, ...]) -> dict[str, Any]:
    settings = {
        "trainer_type": "ppo",
        "hyperparameters": {"batch_size": 64, "buffer_size": 192, "num_epoch": 1},
        "network_settings": {"hidden_units": 16, "num_layers": 1},
        "max_steps": 1152,
        "time_horizon": 16,
        "summary_freq": 576,
        "checkpoint_interval": 1152,
        "keep_checkpoints": 1,
        **behavior,
    }
    return {
        "behaviors": {name: copy.deepcopy(settings) for name in names},
        "env_settings": {"seed": 1, **env},
        "checkpoint_settings": {"run_id": "run", "results_dir": "results"},
    }


def onnx_actions(model: Path, inputs: dict[str, np.ndarray]) -> np.ndarray:
    session = onnxruntime.InferenceSession(str(model), providers=["CPUExecutionProvider"])
    assert {i.name for i in session.get_inputs()} == set(inputs)
    actions: np.ndarray = session.run(None, inputs)[0]
    return actions
