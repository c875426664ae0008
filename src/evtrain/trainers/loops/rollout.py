"""One rollout of the on-policy loop: ``T`` steps of ``N`` agents as the loop records them, the
values of its observations, GAE over it and the frozen batch it becomes.

The loop (:mod:`evtrain.trainers.loops.on_policy`) fills it step by step (:meth:`Rollout.add`
when it acts, :meth:`Rollout.row` when the step's results come), ends it (:meth:`Rollout.end`),
values it with its critic (:meth:`Rollout.value`), and makes it a batch
(:meth:`Rollout.advantages`, :meth:`Rollout.batch`).  Implementation choices follow "The 37
implementation details of PPO" (Huang et al. 2022): time-limit bootstrapping, ``time_horizon``
cuts.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

import attrs
import numpy as np
import numpy.typing as npt
import torch
from gymnasium import spaces

from evtrain.bus.reporter import StatsReporter
from evtrain.trainers.algorithm import OnPolicyBatch
from evtrain.trainers.loops.gae import compute_gae
from evtrain.trainers.loops.recurrent_rollout import RecurrentRollout
from evtrain.trainers.networks.action_heads import action_heads, to_env
from evtrain.trainers.networks.policies import ActorCritic, action_bounds
from evtrain.trainers.networks.recurrent import RecurrentActorCritic
from evtrain.trainers.on_policy_settings import OnPolicySettings
from evtrain.trainers.rewards.reward_provider import RewardProvider
from evtrain.trainers.settings import TrainerSettings

logger = logging.getLogger("evtrain")

Finals = tuple[int, npt.NDArray[np.bool_], torch.Tensor]
"""(step, which agents, normalised final observations) of the episodes that need valuing at
their end: time-limited ones (a group trainer's: the agents still in a truncated copy)."""
Minibatch = tuple[torch.Tensor, ...]
"""(obs, actions, logprobs, advantages, returns) of a batch (``b_``) or minibatch (``mb_``),
followed by the next observations when there are reward providers."""


class EnvActions:
    """The actions the environments get from the policy's: ``Box`` actions clipped to their
    bounds (the policy samples an unbounded Gaussian), hybrid ones made the ``Dict``'s arrays
    with their continuous part clipped (:func:`~evtrain.trainers.networks.action_heads.to_env`),
    others as they are."""

    def __init__(self, action_space: spaces.Space[Any], num_envs: int) -> None:
        self.box = isinstance(action_space, spaces.Box)
        self.space = action_space
        self.hybrid = action_heads(action_space).kind == "hybrid"
        _, low, high = action_bounds(action_space)
        self.low, self.high = low.numpy(), high.numpy()
        if isinstance(action_space, spaces.Box):
            self.shape = (num_envs, *action_space.shape)

    def __call__(self, action: torch.Tensor) -> Any:
        env_action = action.cpu().numpy()
        if self.box:
            env_action = np.clip(env_action, self.low, self.high).reshape(self.shape)
        elif self.hybrid:
            c = len(self.low)
            env_action[:, :c] = np.clip(env_action[:, :c], self.low, self.high)
            env_action = to_env(self.space, env_action)
        return env_action


def rollout_hyperparameters(
    settings: TrainerSettings, num_envs: int, behavior_name: str
) -> OnPolicySettings:
    """The settings' hyperparameters, ``buffer_size`` rounded up to what a rollout holds (a
    multiple of ``batch_size`` and of ``num_envs``; logged when it changes)."""
    hp: OnPolicySettings = settings.hyperparameters  # type: ignore[assignment]  # base checks
    buffer_size = hp.rollout_buffer_size(num_envs)
    if buffer_size != hp.buffer_size:
        logger.info(
            "behaviors.%s.hyperparameters.buffer_size: %d rounded up to %d, a multiple of "
            "batch_size (%d) and of the number of environments (%d)",
            behavior_name,
            hp.buffer_size,
            buffer_size,
            hp.batch_size,
            num_envs,
        )
        hp = attrs.evolve(hp, buffer_size=buffer_size)
    return hp


class Rollout:
    """The arrays of one rollout (see the module's docstring).

    :param num_providers: intrinsic reward providers (each a value head after the extrinsic).
    :param time_horizon: GAE cuts trajectories every ``time_horizon`` steps.
    :param next_step: the environments autoreset in NEXT_STEP mode.
    """

    def __init__(
        self,
        num_steps: int,
        num_envs: int,
        num_providers: int,
        *,
        time_horizon: int,
        lambd: float,
        next_step: bool,
        device: torch.device,
    ) -> None:
        T, N, K = num_steps, num_envs, num_providers
        self.num_steps, self.num_envs, self.num_providers = T, N, K
        self.time_horizon, self.lambd, self.next_step = time_horizon, lambd, next_step
        self.device = device
        # Filled row by row every iteration; the tensors are stacked once per rollout instead
        # (a per-step tensor slice assignment costs more than the policy's matrix products).
        self.rewards = np.zeros((T, N), dtype=np.float32)
        self.terminated = np.zeros((T, N), dtype=np.bool_)
        self.truncated = np.zeros((T, N), dtype=np.bool_)
        self.bootstrap = np.zeros((T, N) if K == 0 else (T, N, 1 + K), dtype=np.float32)
        """``V`` of the final observations where an episode needs it (per value head)."""
        self.valid = np.ones((T, N), dtype=np.bool_)
        """Which steps are transitions (not NEXT_STEP's autoreset steps, agents that acted)."""
        self._steps: list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]] = []
        self._finals: list[Finals] = []
        self.b_obs = self.b_actions = self.b_logprobs = self.b_values = torch.zeros(0)
        """``(T, N, ...)`` of the ended rollout."""
        self.b_next_obs = torch.zeros(0)
        """``(T, N, D)`` each transition's next observation (with reward providers)."""
        self.provider_returns = np.zeros((K, N), dtype=np.float64)
        """Each reward provider's reward so far in each environment's episode."""

    def add(self, x: torch.Tensor, action: torch.Tensor, logprob: torch.Tensor) -> None:
        """The observations acted on, the actions and their log-probabilities of one step."""
        self._steps.append((x, action, logprob))

    def row(
        self,
        t: int,
        reward: npt.NDArray[np.float32],
        terminated: npt.NDArray[np.bool_],
        truncated: npt.NDArray[np.bool_],
        valid: npt.NDArray[np.bool_],
    ) -> None:
        """Row ``t``: the step's results."""
        self.rewards[t] = reward
        self.terminated[t] = terminated
        self.truncated[t] = truncated
        self.valid[t] = valid

    def add_final(self, final: Finals) -> None:
        """Normalised final observations to value at the end (time limits, or every episode
        end with reward providers)."""
        self._finals.append(final)

    def end(self, strength: float) -> list[Finals]:
        """Stack ``b_obs``, ``b_actions``, ``b_logprobs``, scale the rewards by the extrinsic
        ``strength``; returns the finals to value and starts the next rollout's lists."""
        if strength != 1.0:
            self.rewards *= strength
        obs, actions, logprobs = zip(*self._steps, strict=True)
        self.b_obs = torch.stack(obs)
        self.b_actions = torch.stack(actions)
        self.b_logprobs = torch.stack(logprobs)
        finals, self._steps, self._finals = self._finals, [], []
        return finals

    @torch.no_grad()
    def value(
        self,
        agent: ActorCritic | RecurrentActorCritic,
        next_x: torch.Tensor,
        finals: list[Finals],
        memory: RecurrentRollout | None,
    ) -> torch.Tensor:
        """``b_values`` and ``bootstrap`` (``V`` of the finals) with ``agent``'s critic, and
        ``b_next_obs`` with reward providers; returns ``V`` of ``next_x``, the normalised
        observations after the rollout.

        One batched pass over every observation of the rollout: the values do not steer the
        rollout, and one pass over T*N rows costs about what one step's does.  A recurrent
        agent valued each step during the rollout, with the critic's memory there.
        """
        T, N = self.num_steps, self.num_envs
        if isinstance(agent, ActorCritic):
            values = agent.value(
                torch.cat([self.b_obs.flatten(0, 1), next_x, *(f[2] for f in finals)])
            )
        elif memory is not None:
            values = memory.values(next_x)
        else:
            raise RuntimeError("a recurrent agent is valued by its RecurrentRollout: none given")
        self.b_values = values[: T * N].view(T, N, *values.shape[1:])
        self.bootstrap.fill(0.0)
        offset = (T + 1) * N
        for t, which, final_x in finals:
            count = final_x.shape[0]
            self.bootstrap[t, which] = values[offset : offset + count].cpu().numpy()
            offset += count
        if self.num_providers:
            # s' of every transition: the next step's observation, the final one where an
            # episode ended (NEXT_STEP mode: the next step's, which is the final one).
            b_next_obs = torch.cat([self.b_obs[1:], next_x[None]])
            for t, which, final_x in finals:
                b_next_obs[t, torch.from_numpy(which).to(self.device)] = final_x
            self.b_next_obs = b_next_obs
        return values[T * N : (T + 1) * N]

    def advantages(
        self,
        next_value: torch.Tensor,
        provider_rewards: Sequence[npt.NDArray[np.float32]],
        gammas: Sequence[float],
        episodic: Sequence[bool],
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """GAE over the rollout, cutting trajectories every ``time_horizon`` steps; with
        reward providers, GAE per reward (``gammas`` and ``episodic`` of the extrinsic one,
        then each provider's) and the sum of their advantages, one return column per value
        head."""
        values = self.b_values.cpu().numpy()
        next_v = next_value.cpu().numpy()
        if not self.num_providers:
            advantages, returns = self._gae(
                self.rewards, values, self.bootstrap, next_v, gammas[0], episodic=True
            )
        else:
            per_reward = [
                self._gae(
                    rewards,
                    values[..., i],
                    self.bootstrap[..., i],
                    next_v[:, i],
                    gammas[i],
                    episodic=episodic[i],
                )
                for i, rewards in enumerate([self.rewards, *provider_rewards])
            ]
            advantages = np.sum([a for a, _ in per_reward], axis=0, dtype=np.float32)
            returns = np.stack([r for _, r in per_reward], axis=-1)
        return (
            torch.from_numpy(advantages).to(self.device),
            torch.from_numpy(returns).to(self.device),
        )

    def _gae(
        self,
        rewards: npt.NDArray[np.float32],
        values: npt.NDArray[np.float32],
        bootstrap: npt.NDArray[np.float32],
        next_v: npt.NDArray[np.float32],
        gamma: float,
        *,
        episodic: bool,
    ) -> tuple[npt.NDArray[np.float32], npt.NDArray[np.float32]]:
        """One reward's ``(T, N)`` advantages and returns.  An ``episodic`` reward (extrinsic,
        gail) is worth 0 after a termination; the others (ML-Agents' ``ignore_done``) the value
        of the final observation, as after a time limit."""
        following = np.concatenate([values[1:], next_v[None]])
        dones = self.terminated | self.truncated
        if self.next_step:
            # The step after an episode end looked at the final observation: its value is
            # the bootstrap value of the truncated step.
            ended = self.truncated & ~self.terminated if episodic else dones
            bootstrap = np.where(ended, following, 0.0)
        elif episodic and self.num_providers:
            # the finals of terminated episodes were valued for the reward providers
            bootstrap = np.where(self.terminated, 0.0, bootstrap)
        horizon = self.time_horizon
        if horizon < self.num_steps:
            # A time_horizon cut ends a trajectory like a truncation: bootstrap from V(s_t+1).
            cuts = np.zeros_like(dones)
            cuts[horizon - 1 : -1 : horizon] = True
            cuts &= ~dones
            bootstrap = np.where(cuts, following, bootstrap)
            dones = dones | cuts
        return compute_gae(rewards, values, dones, bootstrap, next_v, gamma, self.lambd)

    @torch.no_grad()
    def provider_rewards(
        self, providers: Mapping[str, RewardProvider], reporter: StatsReporter
    ) -> list[npt.NDArray[np.float32]]:
        """Each reward provider's ``(T, N)`` rewards of the rollout's transitions (0 on the
        autoreset steps of NEXT_STEP mode); reports each provider's reward per finished
        episode (``Policy/<Name> Reward``), summed across rollouts."""
        episode_returns = self.provider_returns
        T, N = self.num_steps, self.num_envs
        obs = self.b_obs.flatten(0, 1)
        actions = self.b_actions.flatten(0, 1)
        next_obs = self.b_next_obs.flatten(0, 1)
        rewards = [
            np.where(self.valid, p.evaluate(obs, actions, next_obs).reshape(T, N), 0.0)
            for p in providers.values()
        ]
        ended = (self.terminated | self.truncated) & self.valid
        for t in range(T):
            for i, provider in enumerate(providers.values()):
                episode_returns[i] += rewards[i][t]
                for n in np.flatnonzero(ended[t]):
                    reporter.add_stat(
                        f"Policy/{provider.stat_name} Reward", float(episode_returns[i, n])
                    )
            episode_returns[:, ended[t]] = 0.0
        return [r.astype(np.float32) for r in rewards]

    def estimates(self, providers: Mapping[str, RewardProvider]) -> dict[str, float]:
        """``Policy/Extrinsic Value Estimate`` of the valued rollout, and each reward
        provider's."""
        if not self.num_providers:
            return {"Policy/Extrinsic Value Estimate": float(self.b_values.mean())}
        b_values = self.b_values.flatten(0, 1)
        estimates = {"Policy/Extrinsic Value Estimate": float(b_values[:, 0].mean())}
        for i, provider in enumerate(providers.values(), start=1):
            estimates[f"Policy/{provider.stat_name} Value Estimate"] = float(b_values[:, i].mean())
        return estimates

    def batch(
        self,
        advantages: torch.Tensor,
        returns: torch.Tensor,
        memory: RecurrentRollout | None,
        step: int,
    ) -> OnPolicyBatch:
        """The rollout flattened into the algorithm's batch (``b_obs``, ``b_actions``,
        ``b_logprobs``, ``b_advantages``, ``b_returns``, and ``b_next_obs`` with reward
        providers), without the autoreset steps of NEXT_STEP mode; with memory, in sequence
        order, with its sequences.  ``step``: the global step it ended at."""
        b: Minibatch = (
            self.b_obs.flatten(0, 1),
            self.b_actions.flatten(0, 1),
            self.b_logprobs.flatten(0, 1),
            advantages.flatten(),
            returns.flatten(0, 1),
        )
        if self.num_providers:
            b = (*b, self.b_next_obs.flatten(0, 1))
        sequences = None
        if memory is not None:
            # in sequences of sequence_length, cut where GAE cuts trajectories
            breaks = self.terminated | self.truncated
            breaks[self.time_horizon - 1 :: self.time_horizon] = True
            b, sequences = memory.batch(b, self.b_obs, breaks, self.valid)
        elif not self.valid.all():
            keep = torch.from_numpy(np.flatnonzero(self.valid)).to(self.device)
            b = tuple(t[keep] for t in b)
        return OnPolicyBatch(
            obs=b[0],
            actions=b[1],
            logprobs=b[2],
            advantages=b[3],
            returns=b[4],
            next_obs=b[5] if self.num_providers else None,
            sequences=sequences,
            step=step,
        )
