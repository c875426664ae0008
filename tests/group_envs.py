"""A small multi-agent vector environment of agent slots (docs/multi-agent.md), for the group
trainers' tests: what ``evtrain.multiagent.slots.AgentSlots`` gives a trainer, without
PettingZoo.

:class:`RelayEnv` runs ``copies`` copies of a cooperative game of ``group_size`` agents, each
episode ``length`` steps.  Each step every agent in the episode sees a target (shared by its
group), its own index and the time, and picks an action: 0.1 for itself if it picked the
target, and a group reward of 0.5 when every agent in the episode did, plus 1.0 at the last
step of every episode.  Agents may leave the episode early (``leave``: slot -> the step it acts
last in, then terminated) or join it late (``join``: slot -> its first step); a slot whose agent
is not in the episode is inactive, its observation its last one.  With ``image``, each
observation is a ``Dict`` of that vector (``state``) and a 20x20 ``uint8`` picture of the
target (``view``).  The environment keeps the truth the tests compare the trainers' statistics
with.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import numpy.typing as npt
from gymnasium import spaces
from gymnasium.vector import AutoresetMode, VectorEnv
from gymnasium.vector.utils import batch_space

from evtrain.trainers import NetworkSettings
from evtrain.trainers.loops.on_policy import OnPolicyTrainer
from evtrain.trainers.mappo import MAPPOTrainer
from evtrain.trainers.poca import POCATrainer
from evtrain.trainers.settings import MAPPOSettings, POCASettings, TrainerSettings

NEVER = 1 << 30


class RelayEnv(VectorEnv[Any, Any, Any]):
    """``copies * group_size`` agent slots in ``SAME_STEP`` autoreset mode (see the module)."""

    def __init__(
        self,
        copies: int = 2,
        group_size: int = 3,
        length: int = 6,
        *,
        leave: Mapping[int, int] | None = None,
        join: Mapping[int, int] | None = None,
        truncate: bool = True,
        actions: int = 3,
        image: bool = False,
    ) -> None:
        self.metadata = {"autoreset_mode": AutoresetMode.SAME_STEP}
        self.copies, self.group_size, self.length = copies, group_size, length
        self.num_envs = copies * group_size
        self.truncate = truncate
        self.actions = actions
        state = spaces.Box(0.0, 1.0, (actions + group_size + 1,), np.float32)
        self.image = image
        self.single_observation_space: spaces.Space[Any] = state
        if image:
            view = spaces.Box(0, 255, (20, 20, 3), np.uint8)
            self.single_observation_space = spaces.Dict({"state": state, "view": view})
        self.single_action_space = spaces.Discrete(actions)
        self.observation_space = batch_space(self.single_observation_space, self.num_envs)
        self.action_space = batch_space(self.single_action_space, self.num_envs)
        self.leave_steps = np.full(group_size, NEVER)
        self.leave_steps[list((leave or {}).keys())] = list((leave or {}).values())
        self.join_steps = np.zeros(group_size, dtype=np.int64)
        self.join_steps[list((join or {}).keys())] = list((join or {}).values())
        self.group_returns: list[float] = []
        """Each finished copy episode's summed group reward, in the order they ended."""
        self.agent_returns: list[float] = []
        """Each finished agent episode's summed own reward."""
        self.transitions = 0
        """Slot steps in which an agent acted."""
        self.rng = np.random.default_rng(0)

    # -- the game --------------------------------------------------------------------------------

    def _present(self) -> npt.NDArray[np.bool_]:
        t = self.t[:, None]
        return (t >= self.join_steps[None]) & (t <= self.leave_steps[None])

    @property
    def acting(self) -> npt.NDArray[np.bool_]:
        """The slots whose agent acts at the next step (AgentSlots' property of that name)."""
        return self._present().ravel()

    def _observe(self) -> npt.NDArray[np.float32]:
        C, G, n = self.copies, self.group_size, self.actions
        obs = np.zeros((C, G, n + G + 1), dtype=np.float32)
        obs[np.arange(C), :, self.targets] = 1.0
        obs[:, np.arange(G), n + np.arange(G)] = 1.0
        obs[:, :, -1] = (self.t / self.length)[:, None]
        return obs

    def _as_given(self, obs: npt.NDArray[np.float32]) -> Any:
        """``(C, G, D)`` vectors as the slots' observations: an array, or with ``image`` a
        dictionary of the vectors and their pictures (the target's channel lit, as bright as
        the episode is old)."""
        rows = obs.reshape(self.num_envs, -1)
        if not self.image:
            return rows
        view = np.zeros((self.num_envs, 20, 20, 3), dtype=np.uint8)
        target = rows[:, : self.actions].argmax(1) % 3
        view[np.arange(self.num_envs), :, :, target] = (255 * rows[:, -1])[:, None, None]
        return {"state": rows, "view": view}

    def reset(
        self, *, seed: int | list[int] | None = None, options: dict[str, Any] | None = None
    ) -> tuple[npt.NDArray[np.float32], dict[str, Any]]:
        self.rng = np.random.default_rng(seed if isinstance(seed, int) else None)
        self.t = np.zeros(self.copies, dtype=np.int64)
        self.targets = self.rng.integers(self.actions, size=self.copies)
        self._frozen = self._observe()
        self._group_sum = np.zeros(self.copies)
        self._agent_sum = np.zeros((self.copies, self.group_size))
        return self._as_given(self._observe()), {}

    def step(self, actions: Any) -> tuple[Any, Any, Any, Any, dict[str, Any]]:
        C, G = self.copies, self.group_size
        chosen = np.asarray(actions).reshape(C, G)
        active = self._present()
        hit = active & (chosen == self.targets[:, None])
        rewards = np.where(hit, 0.1, 0.0).astype(np.float32)
        last = self.t == self.length - 1
        everyone = active.any(1) & (hit | ~active).all(1)
        group_reward = (0.5 * everyone + 1.0 * last).astype(np.float32)
        leaving = active & (self.t[:, None] == self.leave_steps[None])
        ending = active & last[:, None]
        if self.truncate:
            terminated, truncated = leaving & ~ending, ending
        else:
            terminated, truncated = leaving | ending, np.zeros_like(ending)
        done = terminated | truncated
        self._keep_truth(active, rewards, group_reward, done, last)
        # -- the next observations: the finals, then the copies that ended start again
        self.t += 1
        self.targets = self.rng.integers(self.actions, size=C)
        after = self._observe()
        self._frozen = np.where(leaving[..., None], after, self._frozen)
        self.t[last] = 0
        gone = self.t[:, None] > self.leave_steps[None]
        obs = np.where(gone[..., None], self._frozen, self._observe())
        final_obs = np.empty(self.num_envs, dtype=object)
        finals = self._as_given(after)
        for i in np.flatnonzero(done.ravel()):
            final_obs[i] = {k: v[i] for k, v in finals.items()} if self.image else finals[i]
        infos = {
            "active": active.ravel(),
            "group_reward": np.repeat(group_reward, G),
            "episode_over": np.repeat(last, G),
            "final_obs": final_obs,
            "_final_obs": done.ravel(),
        }
        return (
            self._as_given(obs),
            rewards.ravel(),
            terminated.ravel(),
            truncated.ravel(),
            infos,
        )

    def _keep_truth(
        self,
        active: npt.NDArray[np.bool_],
        rewards: npt.NDArray[np.float32],
        group_reward: npt.NDArray[np.float32],
        done: npt.NDArray[np.bool_],
        last: npt.NDArray[np.bool_],
    ) -> None:
        self.transitions += int(active.sum())
        self._group_sum += group_reward
        self._agent_sum += rewards
        for c, g in zip(*np.nonzero(done), strict=True):
            self.agent_returns.append(float(self._agent_sum[c, g]))
            self._agent_sum[c, g] = 0.0
        for c in np.flatnonzero(last):
            self.group_returns.append(float(self._group_sum[c]))
            self._group_sum[c] = 0.0


TRAINERS: dict[str, type[OnPolicyTrainer]] = {"poca": POCATrainer, "mappo": MAPPOTrainer}


def settings(kind: str, **overrides: Any) -> TrainerSettings:
    """A tiny group trainer: 2 copies x 3 agents x 12 steps per rollout, 2 minibatches."""
    hyperparameters: dict[str, Any] = {"batch_size": 36, "buffer_size": 72, "num_epoch": 2}
    hyperparameters.update(overrides.pop("hyperparameters", {}))
    options: dict[str, Any] = dict(
        trainer_type=kind,
        hyperparameters=HYPERPARAMETERS[kind](**hyperparameters),
        network_settings=NetworkSettings(hidden_units=16, num_layers=1),
        max_steps=10_000,
        time_horizon=64,
        summary_freq=10**6,
    )
    options.update(overrides)
    return TrainerSettings(**options)


HYPERPARAMETERS = {"poca": POCASettings, "mappo": MAPPOSettings}
