"""PPO as an on-policy algorithm (:class:`~evtrain.trainers.algorithm.OnPolicyAlgorithm`): its
networks, its optimizer, its reward providers and behavioral cloning, built from an
:class:`~evtrain.trainers.algorithm.AlgorithmSpec`; one :meth:`PPO.update` per rollout batch.

The update, top to bottom (Schulman et al. 2017): for ``num_epoch`` epochs, for each shuffled
minibatch of the rollout, one gradient step on the clipped surrogate objective, the value
loss and the entropy bonus (:mod:`~evtrain.trainers.ppo.update`); the reward providers' models
learn from the same minibatch, and behavioral cloning once after the epochs (ML-Agents).

With intrinsic reward providers (``reward_signals.gail``, ``curiosity``, ``rnd``; see
:mod:`evtrain.trainers.rewards.build`) the critic has one value head per provider, as in
ML-Agents.  With ``network_settings.memory`` the agent is recurrent
(:class:`~evtrain.trainers.networks.recurrent.RecurrentActorCritic`) and the update trains on
the batch's sequences (:mod:`evtrain.trainers.loops.recurrent_rollout`).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import torch
from torch import nn

from evtrain.trainers.algorithm import AlgorithmSpec, OnPolicyBatch, Sequences
from evtrain.trainers.finite import finite_mean
from evtrain.trainers.loops.recurrent_rollout import sequence_minibatches
from evtrain.trainers.loops.schedules import scheduled
from evtrain.trainers.networks.mlp import clip_grad_norm_, flatten_parameters, zero_grad_
from evtrain.trainers.networks.policies import ActorCritic, DeterministicPolicy, flat_obs_dim
from evtrain.trainers.networks.recurrent import RecurrentActorCritic, RecurrentPolicy
from evtrain.trainers.networks.sampled import SampledPolicy
from evtrain.trainers.optim import make_adam
from evtrain.trainers.ppo.gradients import ppo_gradients, supports
from evtrain.trainers.ppo.update import Minibatch, autograd_backward, normalized
from evtrain.trainers.rewards.behavioral_cloning import BehavioralCloning, actor_critic_output
from evtrain.trainers.rewards.build import (
    Expert,
    load_experts,
    make_behavioral_cloning,
    make_reward_providers,
)
from evtrain.trainers.rewards.reward_provider import RewardProvider
from evtrain.trainers.settings import PPOSettings


class PPO:
    """PPO for ``Discrete`` and ``Box`` action spaces (see the module's docstring).

    :param spec: ``spec.settings.hyperparameters`` is a :class:`PPOSettings` whose
        ``buffer_size`` is what a rollout holds (the loop rounds it).
    """

    def __init__(self, spec: AlgorithmSpec) -> None:
        self.spec = spec
        self.hp: PPOSettings = spec.settings.hyperparameters  # type: ignore[assignment]
        """The hyperparameters in use."""
        self.agent = self._build_agent()
        """The actor-critic (one value head per reward provider)."""
        experts = load_experts(
            spec.settings,
            spec.behavior_name,
            spec.observation_space,
            spec.action_space,
            spec.device,
        )
        # Built after the agent: its initial weights are those of an extrinsic-only run.
        self.reward_providers = self._build_reward_providers(experts)
        """The intrinsic reward providers by YAML key (empty: extrinsic only)."""
        self._provider_modules = nn.ModuleDict(self.reward_providers)
        self.flat_params = flatten_parameters(self.agent)
        """All of the agent's parameters (and gradients) as one tensor, for the optimizer."""
        self.optimizer = make_adam(self.flat_params, self.hp.learning_rate, eps=1e-5)
        self.analytic_gradients = supports(self.agent)
        """Whether the gradient step computes its gradients without autograd
        (:mod:`~evtrain.trainers.ppo.gradients`)."""
        self.cloning = self._build_cloning(experts)
        """``behavioral_cloning``, when configured."""

    def _build_agent(self) -> ActorCritic | RecurrentActorCritic:
        spec = self.spec
        args = (
            spec.observation_space,
            spec.action_space,
            spec.settings.network_settings,
            spec.init_generator,
        )
        num_values = 1 + len(spec.settings.reward_signals.intrinsic)
        agent: ActorCritic | RecurrentActorCritic
        if spec.settings.network_settings.memory is None:
            shared = self.hp.shared_critic
            agent = ActorCritic(*args, num_values=num_values, shared_critic=shared)
        else:  # (the settings refuse shared_critic with memory)
            agent = RecurrentActorCritic(*args, num_values=num_values)
        return agent.to(spec.device)

    def _build_reward_providers(self, experts: dict[str, Expert]) -> dict[str, RewardProvider]:
        spec = self.spec
        return make_reward_providers(
            spec.settings.reward_signals,
            flat_obs_dim(spec.observation_space),
            spec.action_space,
            spec.init_generator,
            spec.device,
            experts=experts,
            normalize=self.agent.normalizer,
            sampler=spec.generator,
        )

    def _build_cloning(self, experts: dict[str, Expert]) -> BehavioralCloning | None:
        agent, hp, spec = self.agent, self.hp, self.spec
        if not isinstance(agent, ActorCritic):  # the settings refuse cloning with memory
            return None
        return make_behavioral_cloning(
            spec.settings,
            experts,
            params=self.flat_params,
            policy=actor_critic_output(agent, spec.generator),
            normalize=agent.normalizer,
            learning_rate=hp.learning_rate,
            batch_size=hp.batch_size,
            discrete=agent.discrete,
            generator=spec.generator,
            world=spec.world,
        )

    # -- the update ----------------------------------------------------------------------------

    def update(self, batch: OnPolicyBatch) -> dict[str, float]:
        """``num_epoch`` passes of minibatch gradient steps on the clipped objective over
        ``batch``; returns the losses, the entropy and the scheduled values."""
        hp, spec = self.hp, self.spec
        values = scheduled(hp, batch.step, spec.settings.max_steps)
        self.optimizer.lr = values.learning_rate
        clip_coef, ent_coef = values.epsilon, values.beta
        b: Minibatch = (batch.obs, batch.actions, batch.logprobs, batch.advantages, batch.returns)
        if batch.next_obs is not None:
            b = (*b, batch.next_obs)
        batch_size = b[0].shape[0]
        # From the settings, not the batch: every rank must take as many gradient steps (each
        # is an all-reduce), even when dropped autoreset steps leave them different batches.
        num_minibatches = max(1, min(hp.buffer_size // hp.batch_size, batch_size))
        if num_minibatches == 1 and hp.normalize_advantage and batch.sequences is None:
            # One minibatch is the whole batch, the same every epoch: normalise it once.
            b = (*b[:3], normalized(b[3]), *b[4:])

        pg_losses, v_losses, entropies = [], [], []
        provider_losses: dict[str, list[torch.Tensor]] = {}
        for epoch in range(hp.num_epoch):
            for mb, sequences in self._minibatches(b, batch, num_minibatches):
                # Entropy enters the loss only with a nonzero beta; otherwise it is measured
                # once per minibatch in the first epoch (the rollout policy's), for the stats.
                pg_loss, v_loss, entropy = self._gradient_step(
                    mb,
                    sequences,
                    batch.step,
                    clip_coef,
                    ent_coef,
                    with_entropy=ent_coef > 0.0 or epoch == 0,
                )
                pg_losses.append(pg_loss)
                v_losses.append(v_loss)
                if entropy is not None:
                    entropies.append(entropy)
                # -- the reward providers' models learn from the same minibatch (ML-Agents)
                for provider in self.reward_providers.values():
                    for key, loss in provider.update(mb[0], mb[1], mb[5], spec.world).items():
                        provider_losses.setdefault(key, []).append(loss)
        spec.finite.check_updates(batch.step)  # on_nonfinite: stop (one sync per update)

        stats: dict[str, float] = {}
        # Without the gradient steps skipped as non-finite (on_nonfinite: skip), if any.
        for key, losses in (("Losses/Policy Loss", pg_losses), ("Losses/Value Loss", v_losses)):
            mean = finite_mean(losses)
            if mean is not None:
                stats[key] = mean
        stats["Policy/Entropy"] = float(torch.stack(entropies).mean())
        for key, losses in provider_losses.items():
            stats[key] = float(torch.stack(losses).mean())
        # -- behavioral cloning: once per update, after it (ML-Agents)
        if self.cloning is not None:
            stats.update(self.cloning.update(batch.step))
        stats["Policy/Learning Rate"] = values.learning_rate
        stats["Policy/Epsilon"] = values.epsilon
        stats["Policy/Beta"] = values.beta
        return stats

    def _gradient_step(
        self,
        mb: Minibatch,
        sequences: Sequences | None,
        step: int,
        clip_coef: float,
        ent_coef: float,
        *,
        with_entropy: bool,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
        """One optimizer step on minibatch ``mb`` (with memory, of ``sequences``); returns
        ``pg_loss``, ``v_loss`` and the mean entropy (``None`` unless ``with_entropy``),
        detached.  ``step`` is what the non-finite guard reports.

        The gradients come from :mod:`~evtrain.trainers.ppo.gradients` where it supports the
        agent (the same numbers, without autograd's per-operation cost), else from autograd.
        """
        flat_params, hp, spec = self.flat_params, self.hp, self.spec
        if self.analytic_gradients and isinstance(self.agent, ActorCritic):
            # (writes every parameter's gradient: nothing to zero first)
            pg_loss, v_loss, entropy_loss = ppo_gradients(
                self.agent,
                mb,
                clip_coef=clip_coef,
                vf_coef=hp.vf_coef,
                ent_coef=ent_coef,
                with_entropy=with_entropy,
            )
        else:
            zero_grad_(flat_params)
            pg_loss, v_loss, entropy_loss = autograd_backward(
                self.agent,
                mb,
                sequences,
                clip_coef=clip_coef,
                vf_coef=hp.vf_coef,
                ent_coef=ent_coef,
                with_entropy=with_entropy,
            )
        spec.world.average_(flat_params.grad)  # data parallel: the mean over ranks
        grad_norm = clip_grad_norm_(flat_params, hp.max_grad_norm)
        if spec.finite.update(step, pg_loss + v_loss, grad_norm):
            self.optimizer.step()
        return pg_loss, v_loss, entropy_loss

    def _minibatches(
        self, b: Minibatch, batch: OnPolicyBatch, num_minibatches: int
    ) -> Iterator[tuple[Minibatch, Sequences | None]]:
        """One epoch's minibatches of ``b``, shuffled, advantages normalised per minibatch,
        each with its sequences (with memory; else ``None``).

        With memory, whole sequences: as many minibatches as they fill (see
        :mod:`evtrain.trainers.loops.recurrent_rollout`), whatever ``num_minibatches`` says.
        """
        spec, normalize = self.spec, self.hp.normalize_advantage
        if batch.sequences is not None:
            memory = spec.settings.network_settings.memory
            assert memory is not None  # sequences come from a recurrent rollout
            per = max(1, self.hp.batch_size // memory.sequence_length)
            for mb, sequences in sequence_minibatches(
                b, batch.sequences, per, spec.generator, spec.world
            ):
                yield ((*mb[:3], normalized(mb[3]), *mb[4:]) if normalize else mb), sequences
            return
        if num_minibatches == 1:
            # Nothing to shuffle: the order of a single minibatch does not matter.
            yield b, None
            return
        perm = torch.randperm(b[0].shape[0], generator=spec.generator, device=spec.device)
        for mb_inds in torch.tensor_split(perm, num_minibatches):
            mb = tuple(t[mb_inds] for t in b)
            if normalize:
                mb = (*mb[:3], normalized(mb[3]), *mb[4:])
            yield mb, None

    # -- export and checkpoints ----------------------------------------------------------------

    def policy_module(self) -> nn.Module:
        """Raw observations to deterministic actions (argmax, or the clipped mean); with
        memory, ``(observations, memory)`` to ``(actions, next memory)``."""
        if isinstance(self.agent, RecurrentActorCritic):
            return RecurrentPolicy(self.agent, self.spec.action_space).eval()
        return DeterministicPolicy(self.agent, self.spec.action_space).eval()

    def sampling_policy_module(self, generator: torch.Generator) -> nn.Module:
        """Raw observations to actions drawn from the policy (not recurrent: ``self_play``
        refuses memory)."""
        if not isinstance(self.agent, ActorCritic):
            return self.policy_module()
        return SampledPolicy(self.agent, self.spec.action_space, generator).eval()

    def state_dict(self) -> dict[str, Any]:
        state = {"agent": self.agent.state_dict(), "optimizer": self.optimizer.state_dict()}
        if self.reward_providers:
            state["reward_signals"] = {
                name: provider.provider_state_dict()
                for name, provider in self.reward_providers.items()
            }
        if self.cloning is not None:
            state["behavioral_cloning"] = self.cloning.state_dict()
        return state

    def load_weights(self, state: dict[str, Any]) -> None:
        self.agent.load_state_dict(state["agent"])
        for name, saved in self._saved_providers(state).items():
            self.reward_providers[name].model.load_state_dict(saved["model"])

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.load_weights(state)
        # FlatAdam copies the state in: two trainers loaded from one state share nothing.
        self.optimizer.load_state_dict(state["optimizer"])
        for name, saved in self._saved_providers(state).items():
            self.reward_providers[name].optimizer.load_state_dict(saved["optimizer"])
        if self.cloning is not None and "behavioral_cloning" in state:
            self.cloning.load_state_dict(state["behavioral_cloning"])

    def _saved_providers(self, state: dict[str, Any]) -> dict[str, Any]:
        saved: dict[str, Any] = state.get("reward_signals", {})
        if set(saved) != set(self.reward_providers):
            raise ValueError(
                f"the state has the intrinsic reward providers {sorted(saved)}, behavior "
                f"{self.spec.behavior_name!r} is configured with "
                f"{sorted(self.reward_providers)}; configure the reward providers of the run "
                "that saved it"
            )
        return saved
