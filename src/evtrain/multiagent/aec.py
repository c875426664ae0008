"""Copies of a PettingZoo AEC environment: a turn-based game with one learning agent per copy.

One vector step is the learner's move in every copy, then the other agents' moves (their
co-players', one call per co-player for all the copies waiting on it; an agent that is done
steps with ``None``, as PettingZoo asks) until it is the learner's turn again or its episode
is over.  The learner's reward is everything ``env.rewards`` gave it after each of those
moves.  When the learner is done (terminated, truncated, or gone from ``env.agents``) the
copy's episode is over for this behavior: the rest would be co-players alone, so the copy is
reset at once, and the co-players move until the learner's first turn.  An episode that ends
before the learner moves at all is not one of its episodes: the copy is reset again.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np
import numpy.typing as npt

from evtrain.multiagent.copies import GROUP_REWARD, Copies, Copy, StepRecord

MAX_SKIPPED_EPISODES = 100
"""Episodes in a row a copy may end before its learner moves before that is an error."""


class AECCopies(Copies):
    """Copies of a ``pettingzoo.AECEnv`` (see the module's docs); one slot per copy."""

    def reset(self, seed: int | None) -> StepRecord:
        record = StepRecord(self.num_slots)
        for k in range(len(self.copies)):
            self._reset_copy(k, None if seed is None else seed + k)
        self._first_turns(range(len(self.copies)))
        for k in range(len(self.copies)):
            record.active[k] = True
            self._observe_learner(record, k)
        return record

    def step(self, actions: npt.NDArray[Any]) -> StepRecord:
        record = StepRecord(self.num_slots)
        for k, copy in enumerate(self.copies):
            copy.env.step(actions[k])
            self._collect(copy)
            record.active[k] = True
        self._advance(range(len(self.copies)))
        restarted = []
        for k, copy in enumerate(self.copies):
            env, learner = copy.env, copy.learners[0]
            record.rewards[k] = copy.since_move
            copy.since_move = 0.0
            info = env.infos.get(learner, {})
            record.group_reward[k] = float(info.get(GROUP_REWARD, 0.0))
            record.add_info(k, info)
            if not _done(copy):
                continue
            terminated = bool(env.terminations.get(learner, False))
            truncated = bool(env.truncations.get(learner, False))
            if learner in env.agents:
                copy.last_obs[learner] = env.observe(learner)
            self.end_slot(record, k, 0, terminated=terminated or not truncated, truncated=truncated)
            self.end_episode(record, k)
            self._reset_copy(k, None)
            restarted.append(k)
        self._first_turns(restarted)
        for k in range(len(self.copies)):
            self._observe_learner(record, k)
        return record

    def acting(self) -> npt.NDArray[np.bool_]:
        return np.ones(self.num_slots, dtype=np.bool_)  # a step waits for the learner's turn

    def _reset_copy(self, k: int, seed: int | None) -> None:
        copy = self.copies[k]
        self.start_episode(copy)
        copy.env.reset(seed=seed)
        copy.since_move = 0.0

    def _first_turns(self, ks: Iterable[int]) -> None:
        """Advance freshly reset copies to their learner's first turn."""
        waiting = list(ks)
        for _ in range(MAX_SKIPPED_EPISODES):
            self._advance(waiting)
            waiting = [k for k in waiting if _done(self.copies[k])]
            if not waiting:
                return
            for k in waiting:
                self._reset_copy(k, None)
        learner = self.copies[waiting[0]].learners[0]
        raise RuntimeError(
            f"{MAX_SKIPPED_EPISODES} episodes in a row ended before agent {learner!r} had a "
            "turn: it never plays in this environment"
        )

    def _advance(self, ks: Iterable[int]) -> None:
        """The other agents move in copies ``ks`` until it is each one's learner's turn or
        its learner is done; co-players' moves are asked for in one call per co-player."""
        pending = list(ks)
        while pending:
            requests: list[tuple[str, Any]] = []
            owners: list[int] = []
            again = []
            for k in pending:
                copy = self.copies[k]
                env = copy.env
                agent = env.agent_selection
                if _done(copy) or agent == copy.learners[0]:
                    continue
                if env.terminations.get(agent, False) or env.truncations.get(agent, False):
                    env.step(None)
                    self._collect(copy)
                    again.append(k)
                    continue
                requests.append((agent, env.observe(agent)))
                owners.append(k)
            actions = self.co_actions(requests)
            for k, action in zip(owners, actions, strict=True):
                self.copies[k].env.step(action)
                self._collect(self.copies[k])
                again.append(k)
            pending = again

    def _collect(self, copy: Copy) -> None:
        """Add what the last move gave the learner to its reward since its own move."""
        copy.since_move += float(copy.env.rewards.get(copy.learners[0], 0.0))

    def _observe_learner(self, record: StepRecord, k: int) -> None:
        copy = self.copies[k]
        learner = copy.learners[0]
        if learner in copy.env.agents:
            copy.last_obs[learner] = copy.env.observe(learner)
        self.observe(record, k)


def _done(copy: Copy) -> bool:
    """The learner's episode is over."""
    env, learner = copy.env, copy.learners[0]
    return bool(
        learner not in env.agents
        or env.terminations.get(learner, False)
        or env.truncations.get(learner, False)
    )
