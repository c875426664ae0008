"""Copies of a PettingZoo Parallel environment: every agent acts at every step.

One vector step is one parallel step of every copy: the learning agents' actions come from
the caller, the other agents' from their co-players (one call per co-player for all the
copies).  A slot is active when its agent is in ``env.agents`` before the step.  An agent that
leaves (PettingZoo drops it from ``env.agents`` after the step that terminated or truncated
it) ends its slot's episode there; one that drops out without either flag is taken as
terminated.  A copy's episode is over when ``env.agents`` is empty, or when every learning
agent has left (the rest would be co-players alone): the still-active slots are truncated,
and the copy is reset.

Every copy steps before any result is read, and the copies whose episode is over reset after
that, together: copies in processes of their own (:mod:`~evtrain.multiagent.remote`,
``vectorization: async``) run at once.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from evtrain.multiagent.copies import Copies, StepRecord, group_reward
from evtrain.multiagent.remote import RemoteCopy


class ParallelCopies(Copies):
    """Copies of a ``pettingzoo.ParallelEnv`` (see the module's docs)."""

    def reset(self, seed: int | None) -> StepRecord:
        record = StepRecord(self.num_slots)
        every = list(range(len(self.copies)))
        self._reset_copies(every, [None if seed is None else seed + k for k in every])
        for k in every:
            self.mark_present(record, k)
            self.observe(record, k)
        return record

    def step(self, actions: npt.NDArray[Any]) -> StepRecord:
        record = StepRecord(self.num_slots)
        joint: list[dict[str, Any]] = [{} for _ in self.copies]
        self.learners_act(record, actions, joint)
        requests: list[tuple[str, Any]] = []
        owners: list[int] = []
        for k, copy in enumerate(self.copies):
            for agent in copy.env.agents:
                if agent not in joint[k]:
                    requests.append((agent, copy.last_obs[agent]))
                    owners.append(k)
        for (agent, _), k, action in zip(requests, owners, self.co_actions(requests), strict=True):
            joint[k][agent] = action
        results = self._on_copies(range(len(self.copies)), "step", [((a,), {}) for a in joint])
        over = [k for k, result in enumerate(results) if self.record_step(record, k, result)]
        for k in over:
            self.end_episode(record, k)
        self._reset_copies(over, [None] * len(over))
        for k in range(len(self.copies)):
            self.observe(record, k)
        return record

    def learners_act(
        self, record: StepRecord, actions: npt.NDArray[Any], joint: list[dict[str, Any]]
    ) -> None:
        """Each copy ``k``'s learning agents there to act put their action (``actions``, one
        row per slot) in ``joint[k]``, their slots marked active in ``record``."""
        for k, copy in enumerate(self.copies):
            live = copy.env.agents
            for j, agent in enumerate(copy.learners):
                if agent in live:
                    i = k * self.group_size + j
                    joint[k][agent] = actions[i]
                    record.active[i] = True

    def acting(self) -> npt.NDArray[np.bool_]:
        return np.array(
            [agent in copy.env.agents for copy in self.copies for agent in copy.learners],
            dtype=np.bool_,
        )

    def _on_copies(
        self,
        ks: Sequence[int],
        method: str,
        calls: Sequence[tuple[tuple[Any, ...], dict[str, Any]]],
    ) -> list[Any]:
        """``method(*args, **kwargs)`` of each copy ``k`` of ``ks`` with its ``(args, kwargs)``
        of ``calls``: a copy in a process of its own is sent its call before any answer is
        received, so those copies run at once."""
        envs = [self.copies[k].env for k in ks]
        results: list[Any] = [None] * len(envs)
        for n, (env, (args, kwargs)) in enumerate(zip(envs, calls, strict=True)):
            if isinstance(env, RemoteCopy):
                env.send(method, *args, **kwargs)
            else:
                results[n] = getattr(env, method)(*args, **kwargs)
        for n, env in enumerate(envs):
            if isinstance(env, RemoteCopy):
                results[n] = env.receive()
        return results

    def _reset_copies(self, ks: Sequence[int], seeds: Sequence[int | None]) -> None:
        for k in ks:
            self.start_episode(self.copies[k])
        calls = [((), {"seed": seed}) for seed in seeds]
        for k, (obs, _) in zip(ks, self._on_copies(ks, "reset", calls), strict=True):
            self.copies[k].last_obs.update(obs)

    def mark_present(self, record: StepRecord, k: int) -> None:
        """After a reset: the slots whose agent is there to act."""
        copy = self.copies[k]
        live = copy.env.agents
        for j, agent in enumerate(copy.learners):
            record.active[k * self.group_size + j] = agent in live

    def record_step(self, record: StepRecord, k: int, result: tuple[Any, ...]) -> bool:
        """Copy ``k``'s step ``result`` in ``record``; whether the copy's episode is over (its
        still-active slots then truncated)."""
        copy = self.copies[k]
        obs, rewards, terminations, truncations, infos = result
        copy.last_obs.update(obs)
        live = set(copy.env.agents)
        record.group_reward[self.slots(k)] = group_reward(infos, copy.learners)
        ended = []
        for j, agent in enumerate(copy.learners):
            i = k * self.group_size + j
            if not record.active[i]:
                continue
            record.rewards[i] = float(rewards.get(agent, 0.0))
            record.add_info(i, infos.get(agent))
            terminated = bool(terminations.get(agent, False))
            truncated = bool(truncations.get(agent, False))
            if terminated or truncated or agent not in live:
                ended.append((j, terminated or not truncated, truncated))
        for j, terminated, truncated in ended:
            self.end_slot(record, k, j, terminated=terminated, truncated=truncated)
        if live and not set(copy.learners) <= copy.left:
            return False
        for j, agent in enumerate(copy.learners):
            if record.active[k * self.group_size + j] and agent not in copy.left:
                self.end_slot(record, k, j, terminated=False, truncated=True)
        return True
