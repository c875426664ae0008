"""Soft Actor-Critic as an off-policy algorithm
(:class:`~evtrain.trainers.algorithm.OffPolicyAlgorithm`): SAC's networks and optimizers
(:mod:`~evtrain.trainers.sac.networks`), how it acts, its gradient step
(:mod:`~evtrain.trainers.sac.update`, on sequences :mod:`~evtrain.trainers.sac.recurrent_update`),
its reward providers and cloning (:mod:`~evtrain.trainers.sac.reward_providers`), its export
views and its checkpoint state.  The off-policy loop does the rest.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import numpy.typing as npt
import torch
from gymnasium import spaces
from torch import nn

from evtrain.errors import SpaceMismatchError
from evtrain.trainers.algorithm import AlgorithmSpec, OffPolicyActions, ReplayBatch
from evtrain.trainers.networks.memory import RecurrentMLP
from evtrain.trainers.observations import ObservationLayout, behavior_layout
from evtrain.trainers.sac.actor import SACPolicy, SquashedGaussianActor, squashed_sample
from evtrain.trainers.sac.discrete import CategoricalActor
from evtrain.trainers.sac.discrete_policy import DiscreteSACPolicy, RecurrentDiscreteSACPolicy
from evtrain.trainers.sac.memory import RecurrentSACPolicy, RecurrentTwinQ
from evtrain.trainers.sac.networks import SACNetworks
from evtrain.trainers.sac.recurrent_update import MEMORIES, SequenceUpdate
from evtrain.trainers.sac.reward_providers import SACRewardProviders
from evtrain.trainers.sac.twin_q import from_two_networks, relayout_flat
from evtrain.trainers.sac.update import SACUpdate
from evtrain.trainers.settings import NetworkSettings, SACSettings


class SAC:
    """SAC for bounded ``Box``, ``Discrete`` and ``MultiDiscrete`` action spaces, with or
    without memory (see :mod:`evtrain.trainers.sac.trainer`).

    :raises SpaceMismatchError: the action space does not suit SAC, or an action mask comes
        with memory.
    """

    def __init__(self, spec: AlgorithmSpec) -> None:
        self.spec = spec
        self.hp = _hyperparameters(spec)
        network = spec.settings.network_settings
        self.layout = behavior_layout(
            spec.observation_space, network, spec.behavior_name, spec.action_space
        )
        """Where each part of an observation sits in an observation row."""
        _refuse_recurrent_mask(self.layout, network, spec.behavior_name)
        self.networks = SACNetworks(
            self.hp, network, self.layout, spec.action_space, spec.init_generator, spec.device
        )
        # Built last: the networks' initial weights are those of a run without them.
        self.reward_providers = SACRewardProviders(
            spec.settings,
            spec.behavior_name,
            spec.observation_space,
            spec.action_space,
            self.layout.features(network),
            normalize=self.networks.normalizer,
            policy=self._cloned_output,
            actor_params=self.networks.actor_params,
            num_envs=spec.num_envs,
            init_generator=spec.init_generator,
            generator=spec.generator,
            device=spec.device,
            world=spec.world,
        )
        """The intrinsic reward providers and behavioral cloning (empty without them)."""
        self.parts = self.networks.modules()
        """Every module and ``log alpha`` (what a distributed run broadcasts from rank 0)."""
        self.parts["reward_providers"] = self.reward_providers.modules()
        providers = self.reward_providers
        self._update = SACUpdate(
            self.networks,
            self.hp,
            spec.settings.reward_signals.extrinsic.gamma,
            generator=spec.generator,
            world=spec.world,
            finite=spec.finite,
            rewards=providers.rewards if providers.providers else None,
        )
        self._sequences = SequenceUpdate(self._update) if network.memory is not None else None
        self._view = None if network.memory is not None else self._export_view()
        """The feed-forward export view (what a threaded SAC acts with a copy of)."""

    @property
    def memory_sizes(self) -> Mapping[str, int]:
        """With memory, the policy's and both critics' (side by side)."""
        memory = self.spec.settings.network_settings.memory
        if memory is None:
            return {}
        return dict(zip(MEMORIES, (memory.memory_size, 2 * memory.memory_size), strict=True))

    # -- acting ---------------------------------------------------------------------------------

    def observe(self, obs: torch.Tensor, acting: nn.Module | None) -> None:
        normalizer = self.networks.normalizer if acting is None else _view(acting).normalizer
        normalizer.update(obs)
        if self.spec.world.size > 1:  # every rank's observations into every rank's statistics
            normalizer.merge_ranks(self.spec.world)

    @torch.no_grad()
    def act(
        self,
        obs: torch.Tensor,
        *,
        step: int,
        warmup: bool,
        generator: torch.Generator,
        acting: nn.Module | None,
        memories: Mapping[str, torch.Tensor],
    ) -> OffPolicyActions:
        """Uniform random actions while warming up, then ``a ~ pi(.|s)``; the memories step
        along either way."""
        nets = self.networks
        next_memories: dict[str, torch.Tensor] = {}
        if memories:  # the policy and the critics step along, warming up or not
            actor, qf = nets.actor, nets.qf
            assert isinstance(actor, RecurrentMLP) and isinstance(qf, RecurrentTwinQ)
            x = nets.normalizer(obs)
            out, next_memories["actor_memory"] = actor.step(x, memories["actor_memory"])
            next_memories["critic_memory"] = qf.step(x, memories["critic_memory"])
        if warmup:
            action = self._random_actions(obs)
        elif memories:
            action = self._sample(out, generator).cpu().numpy()
        else:
            view = self._view if acting is None else _view(acting)
            assert view is not None
            action = view.actor(view.normalizer(obs), generator)[0].cpu().numpy()
        if nets.low is not None and nets.high is not None:
            env_action = nets.low + (action + 1.0) * 0.5 * (nets.high - nets.low)
        else:  # [N, branches] indices, reshaped to the space's shape by the loop
            env_action = action.astype(np.int64)
        return OffPolicyActions(actions=action, env_actions=env_action, memories=next_memories)

    def acting_module(self) -> nn.Module:
        if self._view is None:
            raise RuntimeError("a recurrent SAC acts with its memories, not with a copy")
        return self._view

    def _random_actions(self, obs: torch.Tensor) -> npt.NDArray[Any]:
        """Uniformly random actions of every environment (``buffer_init_steps``): in
        ``[-1, 1]`` for ``Box``, an index per branch otherwise (of the allowed actions, where
        the observation rows hold an action mask)."""
        nets, rng, num_envs = self.networks, self.spec.rng, self.spec.num_envs
        if nets.branches is None:
            assert nets.low is not None
            action = rng.uniform(-1.0, 1.0, size=(num_envs, nets.low.size))
            return action.astype(np.float32)
        mask = self.layout.mask
        rows = None if mask is None else obs.cpu().numpy()[:, mask]
        return nets.branches.uniform(rng, num_envs, rows)

    def _sample(self, out: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
        """Actions drawn from a recurrent policy's output layer ``out``."""
        branches = self.networks.branches
        if branches is None:
            return squashed_sample(out, generator)[0]
        return branches.sample(branches.log_softmax(out), generator)

    def _cloned_output(self, x: torch.Tensor) -> torch.Tensor:
        """What behavioral cloning trains: the logits, or a sampled action in ``[-1, 1]``."""
        actor = self.networks.actor
        if isinstance(actor, CategoricalActor):
            return actor.logits(x)
        action: torch.Tensor = actor(x, self.spec.generator)[0]
        return action

    # -- learning -------------------------------------------------------------------------------

    def set_learning_rate(self, learning_rate: float) -> None:
        for optimizer in self.networks.optimizers:
            optimizer.lr = learning_rate

    def update(self, batch: ReplayBatch) -> dict[str, torch.Tensor]:
        """One gradient step of the critics, the actor and alpha, then the target update."""
        if self._sequences is not None:
            return self._sequences(batch)
        return self._update(batch)

    # -- export and checkpoints ----------------------------------------------------------------

    def policy_module(self) -> nn.Module:
        """Raw observations to the deterministic action: ``tanh(mean)`` rescaled to the bounds,
        or each branch's most likely action; with memory, ``(observations, memory)`` to
        ``(action, next memory)``."""
        nets, space, flatten = self.networks, self.spec.action_space, self.layout.flattener()
        actor = nets.actor
        if isinstance(actor, RecurrentMLP) and nets.branches is not None:
            return RecurrentDiscreteSACPolicy(nets.normalizer, actor, nets.branches, flatten).eval()
        if isinstance(actor, RecurrentMLP) and isinstance(space, spaces.Box):
            return RecurrentSACPolicy(nets.normalizer, actor, space, flatten).eval()
        return self._export_view().eval()

    def _export_view(self) -> SACPolicy | DiscreteSACPolicy:
        """The feed-forward export view."""
        nets, space, flatten = self.networks, self.spec.action_space, self.layout.flattener()
        actor = nets.actor
        if isinstance(actor, CategoricalActor):
            return DiscreteSACPolicy(nets.normalizer, actor, flatten)
        if not isinstance(actor, SquashedGaussianActor) or not isinstance(space, spaces.Box):
            raise RuntimeError(f"no feed-forward SAC policy of {type(actor).__name__}, {space}")
        return SACPolicy(nets.normalizer, actor, space, flatten)

    def state_dict(self) -> dict[str, Any]:
        nets = self.networks
        state: dict[str, Any] = {
            "normalizer": nets.normalizer.state_dict(),
            "actor": nets.actor.state_dict(),
            "qf": nets.qf.state_dict(),
            "qf_target": nets.qf_target.state_dict(),
            "log_alpha": nets.log_alpha.detach().clone(),
            "actor_optimizer": nets.actor_optimizer.state_dict(),
            "q_optimizer": nets.q_optimizer.state_dict(),
            "alpha_optimizer": nets.alpha_optimizer.state_dict(),
        }
        if self.reward_providers:
            state.update(self.reward_providers.state_dict())
        return state

    def load_weights(self, state: dict[str, Any]) -> None:
        nets = self.networks
        nets.normalizer.load_state_dict(state["normalizer"])
        nets.actor.load_state_dict(state["actor"])
        # Checkpoints from before the critics were fused hold two networks, q1.* and q2.*.
        nets.qf.load_state_dict(from_two_networks(state["qf"]))
        nets.qf_target.load_state_dict(from_two_networks(state["qf_target"]))
        with torch.no_grad():
            nets.log_alpha.copy_(state["log_alpha"])
        if self.reward_providers:
            self.reward_providers.load_weights(state)

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.load_weights(state)
        nets = self.networks
        nets.actor_optimizer.load_state_dict(state["actor_optimizer"])
        nets.q_optimizer.load_state_dict(relayout_flat(state["q_optimizer"], state["qf"]))
        nets.alpha_optimizer.load_state_dict(state["alpha_optimizer"])
        if self.reward_providers:
            self.reward_providers.load_state_dict(state)


def _view(acting: nn.Module) -> SACPolicy | DiscreteSACPolicy:
    if isinstance(acting, SACPolicy | DiscreteSACPolicy):
        return acting
    raise TypeError(f"SAC acts with a copy of its acting_module(), got {type(acting).__name__}")


def _hyperparameters(spec: AlgorithmSpec) -> SACSettings:
    """The hyperparameters, once the action space is known to suit SAC."""
    hp: SACSettings = spec.settings.hyperparameters  # type: ignore[assignment]  # loop checks
    space = spec.action_space
    if isinstance(space, spaces.Dict):
        raise SpaceMismatchError(
            f"behaviors.{spec.behavior_name}: SAC does not learn hybrid actions yet, got {space} "
            "(ML-Agents' continuous and discrete actions at once); use trainer_type: ppo, "
            "poca or mappo, which learn them"
        )
    if not isinstance(space, spaces.Discrete | spaces.MultiDiscrete) and (
        not isinstance(space, spaces.Box)
        or not (np.isfinite(space.low).all() and np.isfinite(space.high).all())
    ):
        raise SpaceMismatchError(
            f"SAC needs a bounded Box, a Discrete or a MultiDiscrete action space, got "
            f"{space}; give the Box finite bounds, or use trainer_type: ppo"
        )
    return hp


def _refuse_recurrent_mask(
    layout: ObservationLayout, network: NetworkSettings, behavior_name: str
) -> None:
    """:raises SpaceMismatchError: an action mask with ``network_settings.memory``."""
    if layout.mask is not None and network.memory is not None:
        raise SpaceMismatchError(
            "observation 'action_mask' masks the actions, which a recurrent SAC "
            f"(behaviors.{behavior_name}.network_settings.memory) does not support yet; "
            "remove memory, or use trainer_type: ppo, which masks with memory"
        )
