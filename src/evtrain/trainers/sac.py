"""Soft Actor-Critic (Haarnoja et al. 2018, "SAC: Algorithms and Applications") for ``Box``
actions on a Gymnasium vector environment.

Twin Q networks with Polyak-averaged targets (clipped double-Q), a tanh-squashed Gaussian
policy rescaled to the action bounds, and automatic tuning of the entropy coefficient
``alpha`` (starting at ``init_entcoef``) towards ``target_entropy``.  One
:meth:`SACTrainer.advance` steps every environment once, stores the transitions, and makes
one gradient step per ``steps_per_update`` environment steps once ``buffer_init_steps``
random-action steps have been collected.

With ``threaded: true`` (:mod:`evtrain.trainers.threaded`) the gradient steps due after one
environment step run on the update thread while the environments take the next step, acting
with a copy of the normaliser and actor from before those gradient steps; the transitions of
that step are stored once they are done.  As many gradient steps are taken as unthreaded, at
the same environment steps: only the acting actor lags, by one batch of gradient steps.
"""

from __future__ import annotations

import copy
import math
from typing import Any

import numpy as np
import numpy.typing as npt
import torch
import torch.nn.functional as F
from gymnasium import spaces
from torch import nn

from evtrain.errors import SpaceMismatchError
from evtrain.timers import hierarchical_timer
from evtrain.trainers.base import Trainer, linear_decay
from evtrain.trainers.envs import final_observations
from evtrain.trainers.networks import (
    MLP,
    ObservationNormalizer,
    clip_grad_norm_,
    flatten_parameters,
    zero_grad_,
)
from evtrain.trainers.optim import LEARNING_RATE_FLOOR, make_adam
from evtrain.trainers.policies import flat_obs_dim
from evtrain.trainers.replay import ReplayBuffer
from evtrain.trainers.settings import NetworkSettings, SACSettings
from evtrain.trainers.threaded import ActingCopy
from evtrain.trainers.twin_q import TwinQ, from_two_networks, relayout_flat

LOG_STD_MIN, LOG_STD_MAX = -5.0, 2.0
"""Range of the policy's log standard deviation (cleanrl's bounds)."""

UPDATE_STATS = (
    "Losses/Q1 Loss",
    "Losses/Q2 Loss",
    "Losses/Policy Loss",
    "Policy/Entropy",
    "Policy/Entropy Coeff",
    "Policy/Extrinsic Value Estimate",
)
"""What every update reports (the mean over a summary period), in ``_stats_sum``'s order."""


class SquashedGaussianActor(nn.Module):
    """``a = tanh(u)``, ``u ~ N(mu(s), sigma(s))``, acting in ``[-1, 1]^d``."""

    def __init__(
        self, obs_dim: int, action_dim: int, network: NetworkSettings, generator: torch.Generator
    ) -> None:
        super().__init__()
        self.net = MLP(obs_dim, 2 * action_dim, network, out_gain=0.01, generator=generator)

    def forward(
        self, x: torch.Tensor, generator: torch.Generator
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Sample ``(action in [-1, 1], log_prob)`` for normalised observations."""
        mean, log_std = self.net(x).chunk(2, dim=-1)
        # Squash log_std smoothly into its range instead of clamping it (no dead gradients).
        log_std = LOG_STD_MIN + 0.5 * (LOG_STD_MAX - LOG_STD_MIN) * (torch.tanh(log_std) + 1)
        noise = torch.randn(mean.shape, generator=generator, device=mean.device, dtype=mean.dtype)
        u = mean + log_std.exp() * noise
        action = torch.tanh(u)
        log_prob = -0.5 * noise.square() - log_std - 0.5 * math.log(2 * math.pi)
        # Change of variables through tanh: log(1 - tanh(u)^2), in its overflow-free form.
        log_prob = log_prob - 2.0 * (math.log(2.0) - u - F.softplus(-2.0 * u))
        return action, log_prob.sum(-1)

    def deterministic(self, x: torch.Tensor) -> torch.Tensor:
        """The squashed mean, in ``[-1, 1]^d``."""
        mean, _ = self.net(x).chunk(2, dim=-1)
        return torch.tanh(mean)


class SACPolicy(nn.Module):
    """Export view: raw observations in, the deterministic action in the env's bounds out."""

    scale: torch.Tensor
    bias: torch.Tensor

    def __init__(
        self, normalizer: ObservationNormalizer, actor: SquashedGaussianActor, space: spaces.Box
    ) -> None:
        super().__init__()
        self.normalizer = normalizer
        self.actor = actor
        low = torch.as_tensor(space.low.reshape(-1), dtype=torch.float32)
        high = torch.as_tensor(space.high.reshape(-1), dtype=torch.float32)
        self.register_buffer("scale", (high - low) / 2)
        self.register_buffer("bias", (high + low) / 2)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return self.actor.deterministic(self.normalizer(obs.flatten(1))) * self.scale + self.bias


class SACTrainer(Trainer):
    """SAC for bounded ``Box`` action spaces."""

    settings_type = SACSettings

    def _setup(self) -> None:
        settings, envs = self.settings, self.envs
        hp: SACSettings = settings.hyperparameters  # type: ignore[assignment]  # checked by base
        space = envs.single_action_space
        if not isinstance(space, spaces.Box) or not (
            np.isfinite(space.low).all() and np.isfinite(space.high).all()
        ):
            raise SpaceMismatchError(
                f"SAC needs a bounded Box action space, got {space}; use trainer_type: ppo for "
                "discrete actions"
            )
        self.hp = hp
        self.action_space = space
        obs_dim = flat_obs_dim(envs.single_observation_space)
        action_dim = int(np.prod(space.shape))
        self._low = space.low.reshape(-1).astype(np.float32)
        self._high = space.high.reshape(-1).astype(np.float32)
        network = settings.network_settings
        self.normalizer = ObservationNormalizer((obs_dim,), enabled=network.normalize).to(
            self.device
        )
        self.actor = SquashedGaussianActor(obs_dim, action_dim, network, self.init_generator)
        self.qf = TwinQ(obs_dim, action_dim, network, self.init_generator)
        self.actor.to(self.device)
        self.qf.to(self.device)
        self.qf_target = copy.deepcopy(self.qf).requires_grad_(False)
        # One tensor per network (see flatten_parameters): one kernel per optimizer step, and
        # the target update is a single lerp.
        self.actor_params = flatten_parameters(self.actor)
        self.qf_params = flatten_parameters(self.qf)
        self.qf_target_params = flatten_parameters(self.qf_target)
        self.log_alpha = nn.Parameter(torch.tensor(math.log(hp.init_entcoef), device=self.device))
        self.target_entropy = -float(action_dim) if hp.target_entropy is None else hp.target_entropy
        self.actor_optimizer = make_adam(self.actor_params, hp.learning_rate)
        self.q_optimizer = make_adam(self.qf_params, hp.learning_rate)
        self.log_alpha.grad = torch.zeros_like(self.log_alpha)
        self.alpha_optimizer = make_adam(self.log_alpha, hp.learning_rate)
        self.replay = ReplayBuffer(hp.buffer_size, obs_dim, action_dim)
        self.num_updates = 0
        """Gradient steps taken so far."""
        self._stats_sum = torch.zeros(len(UPDATE_STATS), device=self.device)
        """The sum of every update's statistics since the last summary (see _write_summary)."""
        self._stats_updates = 0
        self._lr_sum = 0.0
        self._acting: ActingCopy[SACPolicy] | None = None
        """threaded: the normaliser and actor the environments act with."""
        self._held: list[tuple[torch.Tensor, tuple[npt.NDArray[Any], ...]]] = []
        """threaded: each step's observations and transitions, stored once the gradient steps
        running meanwhile are done (they sample the replay buffer and normalise with it)."""
        if settings.threaded:
            self._acting = ActingCopy(SACPolicy(self.normalizer, self.actor, space))

    # -- the algorithm -------------------------------------------------------------------------

    def advance(self) -> None:
        """Step every environment once, store the transitions, take the due gradient steps."""
        hp = self.hp
        # -- act: uniform random actions while warming up, then a ~ pi(.|s)
        obs = np.asarray(self.next_obs, dtype=np.float32).reshape(self.num_envs, -1)
        obs_t = torch.as_tensor(obs, device=self.device)
        acting = self._acting.module if self._acting is not None else None
        normalizer = self.normalizer if acting is None else acting.normalizer
        actor = self.actor if acting is None else acting.actor
        normalizer.update(obs_t)
        if self.world.size > 1:  # every rank's observations into every rank's statistics
            normalizer.merge_ranks(self.world)
        if self.step < hp.buffer_init_steps:
            action = self.rng.uniform(-1.0, 1.0, size=(self.num_envs, self._low.size))
            action = action.astype(np.float32)
        else:
            with torch.no_grad():
                action = actor(normalizer(obs_t), self.act_generator)[0].cpu().numpy()
        env_action = self._low + (action + 1.0) * 0.5 * (self._high - self._low)

        # -- step and store (s, a, r, s', terminated); s' is the final obs where an episode ended
        next_obs, reward, terminated, truncated, infos = self.envs.step(
            env_action.reshape((self.num_envs, *self.action_space.shape))
        )
        dones = terminated | truncated
        valid = self.autoreset.observe(dones)
        real_next = np.array(next_obs, dtype=np.float32).reshape(self.num_envs, -1)
        if dones.any() and not self.autoreset.next_step:
            real_next[dones] = final_observations(infos, dones).reshape(int(dones.sum()), -1)
        strength = self.settings.reward_signals.extrinsic.strength
        transitions = (
            obs[valid],
            action[valid],
            (reward * strength)[valid],
            real_next[valid],
            terminated[valid],
        )
        if acting is None:
            self.replay.add(*transitions)
        else:  # see _caught_up
            self._held.append((obs_t.clone(), transitions))
        self._record_step(reward, dones, valid)
        self.next_obs = next_obs

        # -- learn: one gradient step per steps_per_update environment steps after warm-up
        self._sync_step()  # distributed: count every rank's steps, so all ranks agree on `due`
        due = int((self.step - hp.buffer_init_steps) / hp.steps_per_update)
        self.wait_for_update()  # threaded: the last step's gradient steps; this step stored
        if len(self.replay) >= hp.batch_size:
            lr = hp.learning_rate
            if hp.learning_rate_schedule == "linear":
                lr = linear_decay(lr, LEARNING_RATE_FLOOR, self.step, self.settings.max_steps)
            for optimizer in (self.actor_optimizer, self.q_optimizer, self.alpha_optimizer):
                optimizer.lr = lr
            with hierarchical_timer("update"):
                if due > self.num_updates:
                    self._run_update(self._gradient_steps, due - self.num_updates, lr)
        self.num_updates = max(self.num_updates, due)
        self._end_period()

    def _gradient_steps(self, count: int, lr: float) -> None:
        for _ in range(count):
            self._update()
            self._lr_sum += lr

    def _caught_up(self) -> None:
        # The observations and transitions of the steps taken while gradient steps ran, in
        # order: the trained normaliser and the replay buffer end up as they would unthreaded.
        for obs_t, transitions in self._held:
            self.normalizer.update(obs_t)
            self.replay.add(*transitions)
        self._held.clear()
        if self._acting is not None:
            self._acting.refresh()

    def _update(self) -> None:
        """One gradient step of the critics, the actor and alpha, then the target update."""
        hp = self.hp
        mb_obs, mb_actions, mb_rewards, mb_next_obs, mb_terminated = (
            t.to(self.device) for t in self.replay.sample(hp.batch_size, self.rng)
        )
        mb_obs = self.normalizer(mb_obs)
        mb_next_obs = self.normalizer(mb_next_obs)
        alpha = self.log_alpha.detach().exp()
        q_loss = self._critic_step(
            mb_obs, mb_actions, mb_rewards, mb_next_obs, mb_terminated, alpha
        )

        # -- actor: minimise alpha log pi(a|s) - min Q(s, a), a ~ pi reparameterised
        actions, logprob = self.actor(mb_obs, self.generator)
        # Q is only a function of the actions here: no gradients for the critics' weights.
        self.qf.requires_grad_(False)
        min_q_pi = self.qf.values(mb_obs, actions).amin(0)
        self.qf.requires_grad_(True)
        policy_loss = (alpha * logprob - min_q_pi).mean()
        zero_grad_(self.actor_params)
        torch.autograd.backward(policy_loss)
        self.world.average_(self.actor_params.grad)
        self._clip(self.actor_params)
        self.actor_optimizer.step()

        with torch.no_grad():
            # -- entropy coefficient: move log alpha so that E[-log pi] approaches
            # target_entropy; the gradient of -(log alpha (log pi + target)).mean(), directly
            entropy = -logprob.mean()
            torch.sub(entropy, self.target_entropy, out=self.log_alpha.grad)
            self.world.average_(self.log_alpha.grad)
            self.alpha_optimizer.step()

            # -- target networks: Polyak averaging with tau
            self.qf_target_params.lerp_(self.qf_params, hp.tau)

            # Summed here, averaged and reported once per summary: no sync per update.
            self._stats_sum[:2] += q_loss
            self._stats_sum[2:] += torch.stack([policy_loss, entropy, alpha, min_q_pi.mean()])
            self._stats_updates += 1

    def _critic_step(
        self,
        mb_obs: torch.Tensor,
        mb_actions: torch.Tensor,
        mb_rewards: torch.Tensor,
        mb_next_obs: torch.Tensor,
        mb_terminated: torch.Tensor,
        alpha: torch.Tensor,
    ) -> torch.Tensor:
        """One gradient step of both critics; returns their two losses."""
        gamma = self.settings.reward_signals.extrinsic.gamma
        # -- critic: soft Bellman target y = r + gamma (1 - d) (min Q'(s', a') - alpha log pi)
        with torch.no_grad():
            next_actions, next_logprob = self.actor(mb_next_obs, self.generator)
            min_q_next = self.qf_target.values(mb_next_obs, next_actions).amin(0)
            min_q_next -= alpha * next_logprob
            y = mb_rewards + gamma * (1.0 - mb_terminated) * min_q_next
        q = self.qf.values(mb_obs, mb_actions)
        q_loss = (q - y).square().mean(1)  # each critic's mean squared error
        zero_grad_(self.qf_params)
        torch.autograd.backward(q_loss.sum())
        self.world.average_(self.qf_params.grad)  # data parallel: the mean over ranks
        self._clip(self.qf_params)
        self.q_optimizer.step()
        return q_loss.detach()

    def _clip(self, params: nn.Parameter) -> None:
        if self.hp.max_grad_norm is not None:
            clip_grad_norm_(params, self.hp.max_grad_norm)

    def _write_summary(self, label: int) -> None:
        if self._stats_updates:
            means = (self._stats_sum / self._stats_updates).tolist()
            for key, value in zip(UPDATE_STATS, means, strict=True):
                self.reporter.add_stat(key, value)
            self.reporter.add_stat("Policy/Learning Rate", self._lr_sum / self._stats_updates)
            self._stats_sum.zero_()
            self._stats_updates = 0
            self._lr_sum = 0.0
        super()._write_summary(label)

    # -- what the runner needs ------------------------------------------------------------------

    def policy_module(self) -> nn.Module:
        """Raw observations to the deterministic action ``tanh(mean)`` rescaled to the bounds."""
        return SACPolicy(self.normalizer, self.actor, self.action_space).eval()

    def _state_dict(self) -> dict[str, Any]:
        state: dict[str, Any] = {
            "normalizer": self.normalizer.state_dict(),
            "actor": self.actor.state_dict(),
            "qf": self.qf.state_dict(),
            "qf_target": self.qf_target.state_dict(),
            "log_alpha": self.log_alpha.detach().clone(),
            "actor_optimizer": self.actor_optimizer.state_dict(),
            "q_optimizer": self.q_optimizer.state_dict(),
            "alpha_optimizer": self.alpha_optimizer.state_dict(),
            "num_updates": self.num_updates,
        }
        if self.hp.save_replay_buffer:
            state["replay_buffer"] = self.replay.state_dict()
        return state

    def _load_weights(self, state: dict[str, Any]) -> None:
        self.normalizer.load_state_dict(state["normalizer"])
        self.actor.load_state_dict(state["actor"])
        # Checkpoints from before the critics were fused hold two networks, q1.* and q2.*.
        self.qf.load_state_dict(from_two_networks(state["qf"]))
        self.qf_target.load_state_dict(from_two_networks(state["qf_target"]))
        with torch.no_grad():
            self.log_alpha.copy_(state["log_alpha"])

    def _load_state_dict(self, state: dict[str, Any]) -> None:
        self._load_weights(state)
        self.actor_optimizer.load_state_dict(state["actor_optimizer"])
        self.q_optimizer.load_state_dict(relayout_flat(state["q_optimizer"], state["qf"]))
        self.alpha_optimizer.load_state_dict(state["alpha_optimizer"])
        self.num_updates = int(state["num_updates"])
        if "replay_buffer" in state:
            self.replay.load_state_dict(state["replay_buffer"])
