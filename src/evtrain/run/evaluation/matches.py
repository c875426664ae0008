"""A PettingZoo behavior's evaluation: its policy against each opponent, in every seat.

Played in the evaluation worker (:mod:`evtrain.run.evaluation.evaluation_worker`) on one copy
of the environment, episode after episode.  The **seats**: a self-playing behavior's teams,
each in turn (its agents of that team are the learner's, every other agent the opponent's);
a behavior without self-play has one seat, all its agents (the other behaviors' agents are
the opponent's).  For each opponent (in ``opponents`` order) and seat, episode ``i`` starts
from ``reset(seed=seed + i)``; Python's ``random`` and numpy's global generator (a scripted
player's) are seeded with ``seed + i`` too, and ``random`` opponents draw from a generator of
their own seeded from it, so an evaluation can be repeated.

The learner acts with the evaluated policy's most likely action (observation normaliser
included), as a Gymnasium evaluation does.  An episode's **return** for a team is the sum of
its agents' rewards over the episode (an AEC game's as ``last()`` gives them, the reward of
its last turn included); its length, the learner's moves (AEC) or the parallel steps.

**Win, draw or loss**: the learner's team's return against the best return of the other teams
(an agent of another behavior, or of another team, grouped by behavior and team): greater is a
win, equal a draw, less a loss.  Where there is no other team (every agent is the behavior's,
without self-play) an episode is none of them, and only ``<label>/Mean Return`` is reported.
A self-playing behavior's win rate in each seat is ``<label>/Win Rate as Team <N>`` too.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import attrs
import numpy as np
import torch
from gymnasium import spaces

from evtrain.errors import ConfigError
from evtrain.evaluation.opponents import (
    DRAW_RATE,
    LOSS_RATE,
    MEAN_RETURN,
    WIN_RATE,
    Opponent,
)
from evtrain.multiagent.coplayers import (
    RandomCoPlayer,
    ScriptedPlayer,
    import_player,
    stack,
)
from evtrain.multiagent.mapping import AgentRole
from evtrain.multiagent.slots import behavior_spaces
from evtrain.trainers.networks.action_heads import to_env
from evtrain.trainers.observations import policy_inputs

Act = Callable[[str, Any], Any]
"""An action for ``(agent, observation)``."""

_RANDOM_STREAM = 0x0FF_0AE
"""Mixed into an episode's seed for the random opponents' draws."""


@attrs.frozen(kw_only=True)
class Results:
    """An evaluation against opponents: every episode's learner return and length (opponent
    by opponent, seat by seat), and each opponent's stats by ``<label>/<stat>``."""

    returns: list[float]
    lengths: list[int]
    stats: dict[str, float]


@attrs.define
class Game:
    """Who plays which agent of one copy of the environment."""

    env: Any
    api: str
    """``"aec"`` or ``"parallel"``."""
    behavior: str
    roles: Mapping[str, AgentRole]
    seats: list[int | None]
    """The learner's seats: teams of a self-playing behavior, else ``[None]`` (all its agents)."""
    observation_spaces: dict[str, spaces.Space[Any]]
    action_spaces: dict[str, spaces.Space[Any]]

    def learners(self, seat: int | None) -> set[str]:
        return {
            agent
            for agent, role in self.roles.items()
            if role.behavior == self.behavior and (seat is None or role.team == seat)
        }

    def team_of(self, agent: str, seat: int | None) -> tuple[str, int]:
        """The team an agent's return counts for; the learner's is ``(behavior, -1)``."""
        role = self.roles[agent]
        if agent in self.learners(seat):
            return self.behavior, -1
        return role.behavior, role.team


def game_of(slots: Any) -> Game:
    """The game of an evaluation worker's :class:`~evtrain.multiagent.slots.AgentSlots` (of
    one copy, which it plays on directly)."""
    env = slots.copy_envs[0]
    roles = slots.roles
    observation_spaces, action_spaces = behavior_spaces(env, roles)
    seats: list[int | None] = list(slots.teams) if slots.learning_team is not None else [None]
    return Game(
        env=env,
        api=slots.api,
        behavior=slots.behavior,
        roles=roles,
        seats=seats,
        observation_spaces=observation_spaces,
        action_spaces=action_spaces,
    )


class PolicyPlayer:
    """A policy module's most likely action for one agent's observation."""

    def __init__(
        self, module: torch.nn.Module, observation: spaces.Space[Any], action: spaces.Space[Any]
    ) -> None:
        self.module = module
        self.observation = observation
        self.action = action

    def __call__(self, obs: Any) -> Any:
        inputs = policy_inputs(self.observation, stack([obs], self.observation)).values()
        tensors = [torch.as_tensor(np.asarray(x, dtype=np.float32)) for x in inputs]
        with torch.no_grad():
            chosen = self.module(*tensors).cpu().numpy()
        return _row(to_env(self.action, chosen))


def _row(batch: Any) -> Any:
    if isinstance(batch, Mapping):
        return {key: value[0] for key, value in batch.items()}
    return batch[0]


class OnnxPlayer:
    """An exported policy in onnxruntime, for the agents of one observation space: each input
    fed by its name, as evtrain exports them (``obs``, or a ``Dict`` observation's entries by
    their keys; a ``Discrete`` one one-hot, :func:`~evtrain.trainers.observations.policy_inputs`).
    """

    def __init__(self, session: Any, observation: spaces.Space[Any]) -> None:
        self.session = session
        self.observation = observation
        self.names = [i.name for i in session.get_inputs()]

    def __call__(self, obs: Any) -> Any:
        inputs = policy_inputs(self.observation, stack([obs], self.observation))
        feed = {name: np.asarray(inputs[name], dtype=np.float32) for name in self.names}
        return np.asarray(self.session.run(None, feed)[0])[0]


def onnx_session(path: Path) -> Any:
    import onnxruntime  # type: ignore[import-untyped]  # ships no type information

    return onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])


class Opponents:
    """The players of one behavior's opponents, built once per worker.

    :param fixed: the policy modules of the checkpoint opponents, by label (loaded by the run).
    :param where: how errors name ``opponents`` (``behaviors.<name>.evaluation.opponents``).
    """

    def __init__(
        self,
        game: Game,
        opponents: Sequence[Opponent],
        fixed: Mapping[str, torch.nn.Module],
        where: str,
    ) -> None:
        self.game = game
        self.opponents = list(opponents)
        self.players: dict[tuple[str, str], Callable[[Any], Any]] = {}
        """Each opponent's player for the agents of each behavior, by ``(label, behavior)``
        (``random`` and ``latest`` have none)."""
        self.rng = np.random.default_rng()
        """The random opponents' generator: reseeded for each episode."""
        self.policy: PolicyPlayer | None = None
        """The evaluated policy (``latest``): replaced at each evaluation."""
        learner_spaces = (
            game.observation_spaces[game.behavior],
            game.action_spaces[game.behavior],
        )
        behaviors = {role.behavior for role in game.roles.values()}
        for i, opponent in enumerate(self.opponents):
            here = f"{where}[{i}]"
            kind, label = opponent.kind, opponent.label
            if kind in ("latest", "checkpoint"):
                self._check_spaces(here, opponent, learner_spaces)
            if kind == "callable":
                scripted = ScriptedPlayer(import_player(opponent.player, here))
                self.players.update({(label, b): scripted for b in behaviors})
            elif kind == "onnx":
                session = onnx_session(Path(opponent.player))
                for b in behaviors:
                    self.players[label, b] = OnnxPlayer(session, game.observation_spaces[b])
            elif kind == "checkpoint":
                fixed_player = PolicyPlayer(fixed[label], *learner_spaces)
                self.players.update({(label, b): fixed_player for b in behaviors})

    def _check_spaces(
        self, where: str, opponent: Opponent, learner: tuple[spaces.Space[Any], ...]
    ) -> None:
        for agent, role in self.game.roles.items():
            theirs = (
                self.game.observation_spaces[role.behavior],
                self.game.action_spaces[role.behavior],
            )
            if role.behavior != self.game.behavior and theirs != learner:
                raise ConfigError(
                    [
                        f"{where}: {opponent.player!r} plays with behavior "
                        f"{self.game.behavior!r}'s network, and agent {agent!r} of behavior "
                        f"{role.behavior!r} has other spaces; choose random, a scripted "
                        "player or an ONNX model of that behavior"
                    ]
                )

    def actor(self, opponent: Opponent, seat: int | None, policy: PolicyPlayer) -> Act:
        """Who acts for every agent in an episode against ``opponent`` in ``seat``."""
        learners = self.game.learners(seat)
        latest = opponent.kind == "latest"

        def act(agent: str, obs: Any) -> Any:
            if agent in learners or latest:
                return policy(obs)
            behavior = self.game.roles[agent].behavior
            player = self.players.get((opponent.label, behavior))
            if player is not None:
                return player(obs)
            chooser = RandomCoPlayer(self.game.action_spaces[behavior], self.rng)
            return chooser(stack([obs], self.game.observation_spaces[behavior]))[0]

        return act

    def play(self, module: torch.nn.Module, *, episodes: int, seed: int) -> Results:
        """Every opponent's episodes in every seat with the evaluated policy ``module``."""
        game = self.game
        policy = PolicyPlayer(
            module, game.observation_spaces[game.behavior], game.action_spaces[game.behavior]
        )
        returns: list[float] = []
        lengths: list[int] = []
        stats: dict[str, float] = {}
        for opponent in self.opponents:
            outcomes: list[int] = []
            mine: list[float] = []
            label = opponent.label
            for seat in game.seats:
                act = self.actor(opponent, seat, policy)
                seated: list[int] = []
                for i in range(episodes):
                    self._seed(seed + i)
                    totals, length = _episode(game, act, seed + i, game.learners(seat))
                    learner, others = _team_returns(game, totals, seat)
                    mine.append(learner)
                    lengths.append(length)
                    if others:
                        best = max(others)
                        seated.append((learner > best) - (learner < best))
                outcomes.extend(seated)
                if seated and seat is not None and len(game.seats) > 1:
                    stats[f"{label}/{WIN_RATE} as Team {seat}"] = seated.count(1) / len(seated)
            returns.extend(mine)
            if outcomes:
                stats[f"{label}/{WIN_RATE}"] = outcomes.count(1) / len(outcomes)
                stats[f"{label}/{DRAW_RATE}"] = outcomes.count(0) / len(outcomes)
                stats[f"{label}/{LOSS_RATE}"] = outcomes.count(-1) / len(outcomes)
            stats[f"{label}/{MEAN_RETURN}"] = math.fsum(mine) / len(mine)
        return Results(returns=returns, lengths=lengths, stats=stats)

    def _seed(self, seed: int) -> None:
        random.seed(seed)
        np.random.seed(seed)
        self.rng = np.random.default_rng([seed, _RANDOM_STREAM])


def _team_returns(
    game: Game, totals: Mapping[str, float], seat: int | None
) -> tuple[float, list[float]]:
    """The learner's team's return and every other team's."""
    teams: dict[tuple[str, int], float] = {}
    for agent, total in totals.items():
        key = game.team_of(agent, seat)
        teams[key] = teams.get(key, 0.0) + total
    learner = teams.pop((game.behavior, -1), 0.0)
    return learner, list(teams.values())


def _episode(game: Game, act: Act, seed: int, learners: set[str]) -> tuple[dict[str, float], int]:
    """One episode from ``reset(seed=seed)``: every agent's return, and the episode's length."""
    env = game.env
    totals = dict.fromkeys(game.roles, 0.0)
    length = 0
    if game.api == "aec":
        env.reset(seed=seed)
        for agent in env.agent_iter():
            obs, reward, terminated, truncated, _ = env.last()
            totals[agent] += float(reward)
            if terminated or truncated:
                env.step(None)
                continue
            env.step(act(agent, obs))
            length += agent in learners
        return totals, length
    observations, _ = env.reset(seed=seed)
    while env.agents:
        actions = {agent: act(agent, observations[agent]) for agent in env.agents}
        observations, rewards, _, _, _ = env.step(actions)
        for agent, reward in rewards.items():
            totals[agent] += float(reward)
        length += 1
    return totals, length
