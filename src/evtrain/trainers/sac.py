"""Soft Actor-Critic (Haarnoja et al. 2018, "SAC: Algorithms and Applications") for ``Box``
actions on a Gymnasium vector environment; ``Discrete`` and ``MultiDiscrete`` actions with the
categorical policy and per-action critics of :mod:`evtrain.trainers.sac_discrete`.

Twin Q networks with Polyak-averaged targets (clipped double-Q), a tanh-squashed Gaussian
policy rescaled to the action bounds, and automatic tuning of the entropy coefficient
``alpha`` (starting at ``init_entcoef``) towards ``target_entropy``.  One
:meth:`SACTrainer.advance` steps every environment once, stores the transitions, and makes
one gradient step per ``steps_per_update`` environment steps once ``buffer_init_steps``
random-action steps have been collected.  Intrinsic reward signals (gail, curiosity, rnd) and
behavioral cloning: :mod:`evtrain.trainers.sac_signals`.

With ``threaded: true`` (:mod:`evtrain.trainers.threaded`) the gradient steps due after one
environment step run on the update thread while the environments take the next step, acting
with a copy of the normaliser and actor from before those gradient steps; the transitions of
that step are stored once they are done.  As many gradient steps are taken as unthreaded, at
the same environment steps: only the acting actor lags, by one batch of gradient steps.

With ``network_settings.memory`` the policy and the critics are recurrent and learn from
sequences of a replay buffer of sequences (:mod:`evtrain.trainers.sac_memory`).
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
from evtrain.trainers.finite import zeroed
from evtrain.trainers.memory import RecurrentMLP
from evtrain.trainers.networks import (
    MLP,
    ObservationNormalizer,
    clip_grad_norm_,
    flatten_parameters,
    zero_grad_,
)
from evtrain.trainers.observations import ObservationFlattener, behavior_layout
from evtrain.trainers.optim import LEARNING_RATE_FLOOR, make_adam
from evtrain.trainers.replay import ReplayBuffer
from evtrain.trainers.sac_discrete import (
    DISCRETE_UPDATE_STATS,
    Branches,
    CategoricalActor,
    DiscreteSACPolicy,
    RecurrentDiscreteSACPolicy,
    actor_loss,
    critic_losses,
    sequence_actor_loss,
    sequence_critic_losses,
)
from evtrain.trainers.sac_memory import (
    CarriedMemories,
    RecurrentSACPolicy,
    RecurrentTwinQ,
    SequenceReplayBuffer,
)
from evtrain.trainers.sac_signals import SACSignals
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


def space_shape(space: spaces.Space[Any]) -> tuple[int, ...]:
    """An action's shape (a ``Space``'s ``shape`` is optional in its type)."""
    return tuple(space.shape or ())


def squashed_sample(
    out: torch.Tensor, generator: torch.Generator
) -> tuple[torch.Tensor, torch.Tensor]:
    """Sample ``(action in [-1, 1], log_prob)`` from the policy's output layer ``out`` (the
    mean and the unsquashed log standard deviation, side by side in the last dimension)."""
    mean, log_std = out.chunk(2, dim=-1)
    # Squash log_std smoothly into its range instead of clamping it (no dead gradients).
    log_std = LOG_STD_MIN + 0.5 * (LOG_STD_MAX - LOG_STD_MIN) * (torch.tanh(log_std) + 1)
    noise = torch.randn(mean.shape, generator=generator, device=mean.device, dtype=mean.dtype)
    u = mean + log_std.exp() * noise
    action = torch.tanh(u)
    log_prob = -0.5 * noise.square() - log_std - 0.5 * math.log(2 * math.pi)
    # Change of variables through tanh: log(1 - tanh(u)^2), in its overflow-free form.
    log_prob = log_prob - 2.0 * (math.log(2.0) - u - F.softplus(-2.0 * u))
    return action, log_prob.sum(-1)


class SquashedGaussianActor(nn.Module):
    """``a = tanh(u)``, ``u ~ N(mu(s), sigma(s))``, acting in ``[-1, 1]^d``.

    :param encoder: the image encoders in front of the hidden layers (``obs_dim`` is then
        their output's width); ``None`` for vector observations.
    """

    def __init__(
        self,
        obs_dim: int,
        action_dim: int,
        network: NetworkSettings,
        generator: torch.Generator,
        encoder: nn.Module | None = None,
    ) -> None:
        super().__init__()
        self.net = MLP(obs_dim, 2 * action_dim, network, out_gain=0.01, generator=generator)
        self.encoder = encoder

    def _out(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.net(x if self.encoder is None else self.encoder(x))
        return out

    def forward(
        self, x: torch.Tensor, generator: torch.Generator
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Sample ``(action in [-1, 1], log_prob)`` for normalised observations."""
        return squashed_sample(self._out(x), generator)

    def deterministic(self, x: torch.Tensor) -> torch.Tensor:
        """The squashed mean, in ``[-1, 1]^d``."""
        mean, _ = self._out(x).chunk(2, dim=-1)
        return torch.tanh(mean)


class SACPolicy(nn.Module):
    """Export view: raw observations in, the deterministic action in the env's bounds out."""

    scale: torch.Tensor
    bias: torch.Tensor

    def __init__(
        self,
        normalizer: ObservationNormalizer,
        actor: SquashedGaussianActor,
        space: spaces.Box,
        flatten: ObservationFlattener | None = None,
    ) -> None:
        super().__init__()
        self.flatten = flatten or ObservationFlattener(())
        """Its inputs (the ``Box``, or the ``Dict``'s keys in order) to an observation row."""
        self.normalizer = normalizer
        self.actor = actor
        low = torch.as_tensor(space.low.reshape(-1), dtype=torch.float32)
        high = torch.as_tensor(space.high.reshape(-1), dtype=torch.float32)
        self.register_buffer("scale", (high - low) / 2)
        self.register_buffer("bias", (high + low) / 2)

    def forward(self, *obs: torch.Tensor) -> torch.Tensor:
        x = self.normalizer(self.flatten(*obs))
        return self.actor.deterministic(x) * self.scale + self.bias


class SACTrainer(Trainer):
    """SAC for bounded ``Box``, ``Discrete`` and ``MultiDiscrete`` action spaces."""

    settings_type = SACSettings
    _applied = True
    """Whether the current gradient step's parts so far were finite and applied."""
    _unfinite: npt.NDArray[np.bool_] | None = None
    """Environments whose last step was non-finite and zeroed (``on_nonfinite: skip``): their
    next transition starts from the zeroed observation and is not stored either."""

    def _setup(self) -> None:
        settings, envs = self.settings, self.envs
        hp: SACSettings = settings.hyperparameters  # type: ignore[assignment]  # checked by base
        space = envs.single_action_space
        if not isinstance(space, spaces.Discrete | spaces.MultiDiscrete) and (
            not isinstance(space, spaces.Box)
            or not (np.isfinite(space.low).all() and np.isfinite(space.high).all())
        ):
            raise SpaceMismatchError(
                f"SAC needs a bounded Box, a Discrete or a MultiDiscrete action space, got "
                f"{space}; give the Box finite bounds, or use trainer_type: ppo"
            )
        self.hp = hp
        self.action_space = space
        network = settings.network_settings
        self.layout = behavior_layout(envs.single_observation_space, network, self.behavior_name)
        """Where each part of an observation sits in the rows the replay buffer stores."""
        obs_dim = self.layout.features(network)  # what the hidden layers get
        self.branches: Branches | None = None
        """The discrete action branches; ``None`` for ``Box`` actions."""
        if isinstance(space, spaces.Box):
            action_dim = int(np.prod(space.shape))
            self._low = space.low.reshape(-1).astype(np.float32)
            self._high = space.high.reshape(-1).astype(np.float32)
            policy_out, critic_in, num_actions = 2 * action_dim, action_dim, 0
        else:  # stored: an index per branch; the critics output the value of every action
            self.branches = Branches(space)
            action_dim = len(self.branches)
            policy_out, critic_in, num_actions = self.branches.total, 0, self.branches.total
        self.normalizer = self.layout.normalizer(network.normalize).to(self.device)
        # Image encoders: the actor's and each critic's own, as ML-Agents' networks have
        # (none for vector observations).
        generator = self.init_generator
        memory = network.memory
        self.actor: SquashedGaussianActor | CategoricalActor | RecurrentMLP
        self.qf: TwinQ | RecurrentTwinQ
        if memory is None:
            encoder = self.layout.encoder(network, generator)
            if self.branches is None:
                self.actor = SquashedGaussianActor(obs_dim, action_dim, network, generator, encoder)
            else:
                self.actor = CategoricalActor(obs_dim, self.branches, network, generator, encoder)
            self.qf = TwinQ(
                obs_dim, critic_in, network, generator, self.layout, num_actions=num_actions
            )
        else:  # an LSTM in the policy and in each critic (see evtrain.trainers.sac_memory)
            self.actor = RecurrentMLP(
                obs_dim, policy_out, network, memory, out_gain=0.01, generator=generator
            )
            self.actor.encoder = self.layout.encoder(network, generator)
            self.qf = RecurrentTwinQ(
                obs_dim, critic_in, network, memory, generator, self.layout, num_actions=num_actions
            )
        self.actor.to(self.device)
        self.qf.to(self.device)
        self.qf_target = copy.deepcopy(self.qf).requires_grad_(False)
        # One tensor per network (see flatten_parameters): one kernel per optimizer step, and
        # the target update is a single lerp.
        self.actor_params = flatten_parameters(self.actor)
        self.qf_params = flatten_parameters(self.qf)
        self.qf_target_params = flatten_parameters(self.qf_target)
        self.log_alpha = nn.Parameter(torch.tensor(math.log(hp.init_entcoef), device=self.device))
        self.target_entropy: float | torch.Tensor
        self.target_entropy = -float(action_dim) if hp.target_entropy is None else hp.target_entropy
        self.update_stats = UPDATE_STATS
        """The names of :attr:`_stats_sum`'s statistics."""
        if self.branches is not None:  # one coefficient and target per branch (ML-Agents')
            self.log_alpha = nn.Parameter(self.log_alpha.detach().expand(action_dim).clone())
            self.target_entropy = self.branches.target_entropy(hp.target_entropy).to(self.device)
            self.update_stats = DISCRETE_UPDATE_STATS
        self.actor_optimizer = make_adam(self.actor_params, hp.learning_rate)
        self.q_optimizer = make_adam(self.qf_params, hp.learning_rate)
        self.log_alpha.grad = torch.zeros_like(self.log_alpha)
        self.alpha_optimizer = make_adam(self.log_alpha, hp.learning_rate)
        self.replay: ReplayBuffer | SequenceReplayBuffer
        self.memory: CarriedMemories | None = None
        """Each environment's memories, with ``network_settings.memory``."""
        if memory is None:
            self.replay = ReplayBuffer(
                hp.buffer_size, self.layout.size, action_dim, byte_columns=self.layout.byte_size
            )
        else:  # (images as float32: the sequences keep no byte columns)
            sizes = (memory.memory_size, 2 * memory.memory_size)
            self.memory = CarriedMemories(self.num_envs, sizes, self.device)
            self.replay = SequenceReplayBuffer(
                hp.buffer_size,
                self.layout.size,
                action_dim,
                memory.sequence_length,
                sizes,
                self.num_envs,
            )
        self.num_updates = 0
        """Gradient steps taken so far."""
        self._stats_sum = torch.zeros(len(UPDATE_STATS), device=self.device)
        """The sum of every update's statistics since the last summary (see _write_summary)."""
        self._stats_updates = 0
        self._lr_sum = 0.0
        # Built last: the networks' initial weights are those of a run without them.
        self.extras = SACSignals(
            settings,
            self.behavior_name,
            envs.single_observation_space,
            space,
            obs_dim,
            normalize=self.normalizer,
            policy=self._cloned_output,
            actor_params=self.actor_params,
            num_envs=self.num_envs,
            reporter=self.reporter,
            init_generator=self.init_generator,
            generator=self.generator,
            device=self.device,
            world=self.world,
        )
        """The intrinsic reward signals and behavioral cloning (empty without them)."""
        self._extras_modules = self.extras.modules()  # a module: synchronize shares it
        self._acting: ActingCopy[SACPolicy | DiscreteSACPolicy] | None = None
        """threaded: the normaliser and actor the environments act with."""
        self._held: list[tuple[torch.Tensor, tuple[npt.NDArray[Any], ...]]] = []
        """threaded: each step's observations and transitions, stored once the gradient steps
        running meanwhile are done (they sample the replay buffer and normalise with it)."""
        if settings.threaded and not isinstance(self.actor, RecurrentMLP):
            # (a recurrent SAC is refused threaded by the settings)
            self._acting = ActingCopy(self._export_view())

    # -- the algorithm -------------------------------------------------------------------------

    def advance(self) -> None:
        """Step every environment once, store the transitions, take the due gradient steps."""
        hp = self.hp
        # -- act: uniform random actions while warming up, then a ~ pi(.|s)
        obs = self.layout.rows(self.next_obs)
        obs_t = torch.as_tensor(obs, device=self.device)
        acting = self._acting.module if self._acting is not None else None
        normalizer = self.normalizer if acting is None else acting.normalizer
        actor = self.actor if acting is None else acting.actor
        normalizer.update(obs_t)
        if self.world.size > 1:  # every rank's observations into every rank's statistics
            normalizer.merge_ranks(self.world)
        if self.memory is not None:  # the memories step along, warming up or not
            out = self._step_memories(self.normalizer(obs_t))
        if self.step < hp.buffer_init_steps:
            action = self._random_actions()
        elif self.memory is not None:
            action = self._sample(out, self.act_generator).cpu().numpy()
        else:
            with torch.no_grad():
                action = actor(normalizer(obs_t), self.act_generator)[0].cpu().numpy()
        if self.branches is None:
            env_action = self._low + (action + 1.0) * 0.5 * (self._high - self._low)
        else:  # [N, branches] indices, reshaped to the space's shape below
            env_action = action.astype(np.int64)

        # -- step and store (s, a, r, s', terminated); s' is the final obs where an episode ended
        next_obs, reward, terminated, truncated, infos = self.envs.step(
            env_action.reshape((self.num_envs, *space_shape(self.action_space)))
        )
        finite = self.finite.step(self.step, reward, next_obs)
        dones = terminated | truncated
        keep = valid = self.autoreset.observe(dones)  # keep: the transitions stored
        if not finite.all() or self._unfinite is not None:  # on_nonfinite: skip
            reward, next_obs = zeroed(reward, finite), zeroed(next_obs, finite)
            stored = finite if self._unfinite is None else finite & ~self._unfinite
            self._unfinite = None if finite.all() else ~finite
            keep = valid & stored
        real_next = self.layout.rows(next_obs, copy=True)
        if dones.any() and not self.autoreset.next_step:
            real_next[dones] = self.layout.rows(final_observations(infos, dones))
        strength = self.settings.reward_signals.extrinsic.strength
        if isinstance(self.replay, SequenceReplayBuffer):  # (a recurrent SAC is not threaded)
            self._store_sequences(obs, action, reward * strength, real_next, terminated, dones)
        else:
            transitions = (
                obs[keep],
                action[keep],
                (reward * strength)[keep],
                real_next[keep],
                terminated[keep],
            )
            if acting is None:
                self.replay.add(*transitions)
            else:  # see _caught_up
                self._held.append((obs_t.clone(), transitions))
        self._record_step(reward, dones, valid)
        if self.extras:
            self.extras.observe(obs, action, real_next, dones, valid)
        self.next_obs = next_obs

        # -- learn: one gradient step per steps_per_update environment steps after warm-up
        self._sync_step()  # distributed: count every rank's steps, so all ranks agree on `due`
        due = int((self.step - hp.buffer_init_steps) / hp.steps_per_update)
        self.wait_for_update()  # threaded: the last step's gradient steps; this step stored
        count, lr = 0, hp.learning_rate
        if len(self.replay) >= hp.batch_size:
            if hp.learning_rate_schedule == "linear":
                lr = linear_decay(lr, LEARNING_RATE_FLOOR, self.step, self.settings.max_steps)
            for optimizer in (self.actor_optimizer, self.q_optimizer, self.alpha_optimizer):
                optimizer.lr = lr
            count = max(0, due - self.num_updates)
        if count or self.extras:
            # threaded: the signals' and cloning's updates run after the gradient steps on the
            # update thread too: they train the actor and the signal models the gradient steps
            # use, and sample the replay buffer with the same generator
            with hierarchical_timer("update"):
                self._run_update(self._learn, count, lr, self.step)
        self.num_updates = max(self.num_updates, due)
        self._end_period()

    def _learn(self, count: int, lr: float, step: int) -> None:
        """``count`` gradient steps at learning rate ``lr``, then the signals' and cloning's
        updates due at environment step ``step``."""
        update = self._update if self.memory is None else self._update_sequences
        for _ in range(count):
            update()
            self._lr_sum += lr
        self.finite.check_updates(step)  # on_nonfinite: stop (one sync per environment step)
        if self.extras:
            with hierarchical_timer("reward_signals"):
                self.extras.update(step, self.replay, self.rng)

    def _caught_up(self) -> None:
        # The observations and transitions of the steps taken while gradient steps ran, in
        # order: the trained normaliser and the replay buffer end up as they would unthreaded.
        for obs_t, transitions in self._held:
            self.normalizer.update(obs_t)
            self.replay.add(*transitions)
        self._held.clear()
        if self._acting is not None:
            self._acting.refresh()

    def _random_actions(self) -> npt.NDArray[Any]:
        """Uniformly random actions of every environment (``buffer_init_steps``): in
        ``[-1, 1]`` for ``Box``, an index per branch otherwise."""
        if self.branches is None:
            action = self.rng.uniform(-1.0, 1.0, size=(self.num_envs, self._low.size))
            return action.astype(np.float32)
        return self.rng.integers(0, self.branches.sizes, size=(self.num_envs, len(self.branches)))

    def _sample(self, out: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
        """Actions drawn from a recurrent policy's output layer ``out``."""
        if self.branches is None:
            return squashed_sample(out, generator)[0]
        return self.branches.sample(self.branches.log_softmax(out), generator)

    def _cloned_output(self, x: torch.Tensor) -> torch.Tensor:
        """What behavioral cloning trains: the logits, or a sampled action in ``[-1, 1]``."""
        if isinstance(self.actor, CategoricalActor):
            return self.actor.logits(x)
        action: torch.Tensor = self.actor(x, self.generator)[0]
        return action

    def _update(self) -> None:
        """One gradient step of the critics, the actor and alpha, then the target update."""
        if isinstance(self.actor, CategoricalActor):
            return self._update_discrete(self.actor)
        hp = self.hp
        qf, _, replay = self._feed_forward()
        mb_obs, mb_actions, mb_rewards, mb_next_obs, mb_terminated = (
            t.to(self.device) for t in replay.sample(hp.batch_size, self.rng)
        )
        mb_obs = self.normalizer(mb_obs)
        mb_next_obs = self.normalizer(mb_next_obs)
        if self.extras.signals:  # the intrinsic rewards, as the signals see them now
            mb_rewards = self.extras.rewards(mb_obs, mb_actions, mb_next_obs, mb_rewards)
        alpha = self.log_alpha.detach().exp()
        q_loss = self._critic_step(
            mb_obs, mb_actions, mb_rewards, mb_next_obs, mb_terminated, alpha
        )

        # -- actor: minimise alpha log pi(a|s) - min Q(s, a), a ~ pi reparameterised
        actions, logprob = self.actor(mb_obs, self.generator)
        # Q is only a function of the actions here: no gradients for the critics' weights.
        qf.requires_grad_(False)
        min_q_pi = qf.values(mb_obs, actions).amin(0)
        qf.requires_grad_(True)
        policy_loss = (alpha * logprob - min_q_pi).mean()
        self._actor_step(policy_loss)
        with torch.no_grad():
            self._finish_update(q_loss, policy_loss, -logprob.mean(), alpha, min_q_pi.mean())

    def _actor_step(self, policy_loss: torch.Tensor) -> None:
        if not self._applied:  # the critics' step was not finite: neither is the rest
            return
        zero_grad_(self.actor_params)
        torch.autograd.backward(policy_loss)
        self.world.average_(self.actor_params.grad)
        self._applied = self._clip(self.actor_params, policy_loss)
        if self._applied:
            self.actor_optimizer.step()

    def _finish_update(
        self,
        q_loss: torch.Tensor,
        policy_loss: torch.Tensor,
        entropy: torch.Tensor,
        alpha: torch.Tensor,
        value: torch.Tensor,
    ) -> None:
        """After the critics' and the actor's steps: alpha's step, the target update, the
        update's statistics (``value``: the mean of ``min Q(s, a ~ pi)``)."""
        hp = self.hp
        if not self._applied:  # skipped as non-finite (on_nonfinite: skip)
            self._applied = True
            return
        with torch.no_grad():
            # -- entropy coefficient: move log alpha so that E[-log pi] approaches
            # target_entropy; the gradient of -(log alpha (log pi + target)).mean(), directly
            torch.sub(entropy, self.target_entropy, out=self.log_alpha.grad)
            self.world.average_(self.log_alpha.grad)
            self.alpha_optimizer.step()

            # -- target networks: Polyak averaging with tau
            self.qf_target_params.lerp_(self.qf_params, hp.tau)

            # Summed here, averaged and reported once per summary: no sync per update.
            self._stats_sum[:2] += q_loss
            # (discrete actions: the branches' entropies summed, their coefficients' mean)
            stats = [policy_loss, entropy.sum(), alpha.mean(), value]
            self._stats_sum[2:] += torch.stack(stats)
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
        qf, qf_target, _ = self._feed_forward()
        # -- critic: soft Bellman target y = r + gamma (1 - d) (min Q'(s', a') - alpha log pi)
        with torch.no_grad():
            next_actions, next_logprob = self.actor(mb_next_obs, self.generator)
            min_q_next = qf_target.values(mb_next_obs, next_actions).amin(0)
            min_q_next -= alpha * next_logprob
            y = mb_rewards + gamma * (1.0 - mb_terminated) * min_q_next
        q = qf.values(mb_obs, mb_actions)
        q_loss = (q - y).square().mean(1)  # each critic's mean squared error
        self._critic_backward(q_loss)
        return q_loss.detach()

    def _critic_backward(self, q_loss: torch.Tensor) -> None:
        """The critics' gradient step on their two losses."""
        zero_grad_(self.qf_params)
        torch.autograd.backward(q_loss.sum())
        self.world.average_(self.qf_params.grad)  # data parallel: the mean over ranks
        self._applied = self._clip(self.qf_params, q_loss)
        if self._applied:
            self.q_optimizer.step()

    def _update_discrete(self, actor: CategoricalActor) -> None:
        """:meth:`_update` for discrete actions: the same steps, with the expectations over
        every action of :mod:`evtrain.trainers.sac_discrete`."""
        qf, qf_target, replay = self._feed_forward()
        mb_obs, mb_actions, mb_rewards, mb_next_obs, mb_terminated = (
            t.to(self.device) for t in replay.sample(self.hp.batch_size, self.rng)
        )
        mb_obs = self.normalizer(mb_obs)
        mb_next_obs = self.normalizer(mb_next_obs)
        if self.extras.signals:
            mb_rewards = self.extras.rewards(mb_obs, mb_actions, mb_next_obs, mb_rewards)
        alpha = self.log_alpha.detach().exp()
        gamma = self.settings.reward_signals.extrinsic.gamma
        # -- critics: towards r + gamma (1 - d) sum_a pi(a|s') [min Q'(s', a) - alpha log pi]
        batch = (mb_obs, mb_actions, mb_rewards, mb_next_obs, mb_terminated)
        q_loss = critic_losses(qf, qf_target, actor, batch, alpha, gamma)
        self._critic_backward(q_loss)
        # -- actor: minimise sum_a pi(a|s) [alpha log pi(a|s) - min Q(s, a)]
        policy_loss, entropy, value = actor_loss(qf, actor, mb_obs, alpha)
        self._actor_step(policy_loss)
        self._finish_update(q_loss.detach(), policy_loss, entropy, alpha, value)

    def _clip(self, params: nn.Parameter, loss: torch.Tensor) -> bool:
        """Clip the gradient; whether it and ``loss`` are finite (else the step is not
        taken, or, ``on_nonfinite: stop``, :class:`~evtrain.errors.NonFiniteError`)."""
        if self.hp.max_grad_norm is not None:
            norm = clip_grad_norm_(params, self.hp.max_grad_norm)
        else:
            assert params.grad is not None  # flatten_parameters gives every buffer one
            norm = torch.linalg.vector_norm(params.grad)
        return self.finite.update(self.step, loss, norm)

    def _feed_forward(self) -> tuple[TwinQ, TwinQ, ReplayBuffer]:
        qf, qf_target, replay = self.qf, self.qf_target, self.replay
        if (
            isinstance(qf, TwinQ)
            and isinstance(qf_target, TwinQ)
            and isinstance(replay, ReplayBuffer)
        ):
            return qf, qf_target, replay
        raise RuntimeError("the feed-forward update needs the feed-forward networks")

    # -- with network_settings.memory (see evtrain.trainers.sac_memory) ------------------------

    def _recurrent(self) -> tuple[RecurrentMLP, RecurrentTwinQ, RecurrentTwinQ, CarriedMemories]:
        actor, qf, qf_target, memory = self.actor, self.qf, self.qf_target, self.memory
        if (
            isinstance(actor, RecurrentMLP)
            and isinstance(qf, RecurrentTwinQ)
            and isinstance(qf_target, RecurrentTwinQ)
            and memory is not None
        ):
            return actor, qf, qf_target, memory
        raise RuntimeError(f"behavior {self.behavior_name!r} has no network_settings.memory")

    @torch.no_grad()
    def _step_memories(self, x: torch.Tensor) -> torch.Tensor:
        """One step of the policy and the critics on normalised observations: their memories
        move on (the ones they started from stay as :attr:`memory`'s ``taken``); returns the
        policy's output layer."""
        actor, qf, _, memory = self._recurrent()
        memory.taken = (memory.actor, memory.critic)
        out, memory.actor = actor.step(x, memory.actor)
        memory.critic = qf.step(x, memory.critic)
        return out

    def _store_sequences(
        self,
        obs: npt.NDArray[np.float32],
        action: npt.NDArray[Any],
        reward: npt.NDArray[Any],
        real_next: npt.NDArray[np.float32],
        terminated: npt.NDArray[np.bool_],
        dones: npt.NDArray[np.bool_],
    ) -> None:
        """Store one step in the sequences, with the memories it was taken with; forget the
        memories of the episodes that ended (NEXT_STEP mode: after the reset step too)."""
        _, _, _, memory = self._recurrent()
        if not isinstance(self.replay, SequenceReplayBuffer):
            raise RuntimeError("a recurrent SAC stores sequences")
        valid = self.autoreset.valid
        actor_memory, critic_memory = (m.cpu().numpy() for m in memory.taken)
        self.replay.add(
            obs, action, reward, real_next, terminated, dones, valid, actor_memory, critic_memory
        )
        memory.forget(dones | ~valid)

    def _update_sequences(self) -> None:
        """:meth:`_update` on sequences: the networks run each from its stored memories, and
        every mean is over the sequences' real steps."""
        if self.branches is not None:
            return self._update_sequences_discrete(self.branches)
        actor, qf, qf_target, _ = self._recurrent()
        mb, obs, seq, rewards = self._sample_sequences()
        mask = mb["mask"].to(torch.float32)
        count = mask.sum()
        alpha = self.log_alpha.detach().exp()
        gamma = self.settings.reward_signals.extrinsic.gamma
        # -- the policy over the sequence: a ~ pi(.|s_t) (positions :L), a' ~ pi(.|s'_t) (1:)
        actions, logprob = squashed_sample(actor.sequences(seq, mb["actor_memory"]), self.generator)

        # -- critic: soft Bellman target, as in _critic_step
        with torch.no_grad():
            features = [f[:, 1:] for f in qf_target.features(seq, mb["critic_memory"])]
            min_q_next = qf_target.values(features, actions[:, 1:]).amin(0)
            min_q_next -= alpha * logprob[:, 1:]
            y = rewards + gamma * (1.0 - mb["terminated"]) * min_q_next
        q = qf.values(qf.features(obs, mb["critic_memory"]), mb["actions"])
        q_loss = ((q - y).square() * mask).sum((1, 2)) / count
        self._critic_backward(q_loss)

        # -- actor, as in _update, with the critics just updated
        qf.requires_grad_(False)
        min_q_pi = qf.values(qf.features(obs, mb["critic_memory"]), actions[:, :-1]).amin(0)
        qf.requires_grad_(True)
        logprob = logprob[:, :-1]
        policy_loss = ((alpha * logprob - min_q_pi) * mask).sum() / count
        self._actor_step(policy_loss)
        with torch.no_grad():
            entropy = -(logprob * mask).sum() / count
            value = (min_q_pi * mask).sum() / count
            self._finish_update(q_loss.detach(), policy_loss, entropy, alpha, value)

    def _sample_sequences(
        self,
    ) -> tuple[dict[str, torch.Tensor], torch.Tensor, torch.Tensor, torch.Tensor]:
        """A minibatch of sequences: the sampled arrays, the normalised observations, ``s_0``
        then each step's ``s'`` (``s'_t = s_t+1`` within a sequence: one pass of each network
        for both), and the rewards (the intrinsic ones added, as the signals see them now)."""
        hp = self.hp
        if not isinstance(self.replay, SequenceReplayBuffer):
            raise RuntimeError("a recurrent SAC samples sequences")
        L = self.replay.sequence_length
        sequences = self.replay.sample_sequences(max(1, hp.batch_size // L), self.rng)
        mb = {k: v.to(self.device) for k, v in sequences.items()}
        obs = self.normalizer(mb["obs"])
        next_obs = self.normalizer(mb["next_obs"])
        seq = torch.cat([obs[:, :1], next_obs], dim=1)
        rewards = mb["rewards"]
        if self.extras.signals:
            S = rewards.shape[0]
            flat = (obs.flatten(0, 1), mb["actions"].flatten(0, 1), next_obs.flatten(0, 1))
            rewards = self.extras.rewards(*flat, rewards.flatten()).view(S, L)
        return mb, obs, seq, rewards

    def _update_sequences_discrete(self, branches: Branches) -> None:
        """:meth:`_update_discrete` on sequences, as :meth:`_update_sequences` runs them."""
        actor, qf, qf_target, _ = self._recurrent()
        mb, obs, seq, rewards = self._sample_sequences()
        alpha = self.log_alpha.detach().exp()
        gamma = self.settings.reward_signals.extrinsic.gamma
        # -- the policy over the sequence: pi(.|s_t) at positions :L, pi(.|s'_t) at 1:
        log_probs = branches.log_softmax(actor.sequences(seq, mb["actor_memory"]))
        q_loss = sequence_critic_losses(
            qf, qf_target, log_probs, mb, obs, seq, rewards, alpha, gamma, branches
        )
        self._critic_backward(q_loss)
        # -- actor, with the critics just updated
        policy_loss, entropy, value = sequence_actor_loss(
            qf, log_probs[:, :-1], mb, obs, alpha, branches
        )
        self._actor_step(policy_loss)
        self._finish_update(q_loss.detach(), policy_loss, entropy, alpha, value)

    def _write_summary(self, label: int) -> None:
        if self._stats_updates:
            means = (self._stats_sum / self._stats_updates).tolist()
            for key, value in zip(self.update_stats, means, strict=True):
                self.reporter.add_stat(key, value)
            self.reporter.add_stat("Policy/Learning Rate", self._lr_sum / self._stats_updates)
            self._stats_sum.zero_()
            self._stats_updates = 0
            self._lr_sum = 0.0
        super()._write_summary(label)

    # -- what the runner needs ------------------------------------------------------------------

    def policy_module(self) -> nn.Module:
        """Raw observations to the deterministic action: ``tanh(mean)`` rescaled to the bounds,
        or each branch's most likely action; with memory, ``(observations, memory)`` to
        ``(action, next memory)``."""
        actor, space, flatten = self.actor, self.action_space, self.layout.flattener()
        if isinstance(actor, RecurrentMLP) and self.branches is not None:
            return RecurrentDiscreteSACPolicy(self.normalizer, actor, self.branches, flatten).eval()
        if isinstance(actor, RecurrentMLP) and isinstance(space, spaces.Box):
            return RecurrentSACPolicy(self.normalizer, actor, space, flatten).eval()
        return self._export_view().eval()

    def _export_view(self) -> SACPolicy | DiscreteSACPolicy:
        """The feed-forward export view (what a threaded SAC acts with, too)."""
        actor, space, flatten = self.actor, self.action_space, self.layout.flattener()
        if isinstance(actor, CategoricalActor):
            return DiscreteSACPolicy(self.normalizer, actor, flatten)
        if not isinstance(actor, SquashedGaussianActor) or not isinstance(space, spaces.Box):
            raise RuntimeError(f"no feed-forward SAC policy of {type(actor).__name__}, {space}")
        return SACPolicy(self.normalizer, actor, space, flatten)

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
        if self.extras:
            state.update(self.extras.state_dict())
        return state

    def _load_weights(self, state: dict[str, Any]) -> None:
        self.normalizer.load_state_dict(state["normalizer"])
        self.actor.load_state_dict(state["actor"])
        # Checkpoints from before the critics were fused hold two networks, q1.* and q2.*.
        self.qf.load_state_dict(from_two_networks(state["qf"]))
        self.qf_target.load_state_dict(from_two_networks(state["qf_target"]))
        with torch.no_grad():
            self.log_alpha.copy_(state["log_alpha"])
        if self.extras:
            self.extras.load_weights(state)

    def _load_state_dict(self, state: dict[str, Any]) -> None:
        self._load_weights(state)
        self.actor_optimizer.load_state_dict(state["actor_optimizer"])
        self.q_optimizer.load_state_dict(relayout_flat(state["q_optimizer"], state["qf"]))
        self.alpha_optimizer.load_state_dict(state["alpha_optimizer"])
        self.num_updates = int(state["num_updates"])
        if "replay_buffer" in state:
            self.replay.load_state_dict(state["replay_buffer"])
        if self.extras:
            self.extras.load_state_dict(state)
