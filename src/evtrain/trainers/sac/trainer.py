"""Soft Actor-Critic (Haarnoja et al. 2018, "SAC: Algorithms and Applications") for ``Box``
actions on a Gymnasium vector environment; ``Discrete`` and ``MultiDiscrete`` actions with the
categorical policy and per-action critics of :mod:`evtrain.trainers.sac.discrete`.

Twin Q networks with Polyak-averaged targets (clipped double-Q), a tanh-squashed Gaussian
policy rescaled to the action bounds, and automatic tuning of the entropy coefficient
``alpha`` (starting at ``init_entcoef``) towards ``target_entropy``.  One
:meth:`SACTrainer.advance` steps every environment once, stores the transitions, and makes
one gradient step per ``steps_per_update`` environment steps once ``buffer_init_steps``
random-action steps have been collected.  Intrinsic reward providers (gail, curiosity, rnd) and
behavioral cloning: :mod:`evtrain.trainers.sac.rewards`.

With ``threaded: true`` (:mod:`evtrain.trainers.threaded`) the gradient steps due after one
environment step run on the update thread while the environments take the next step, acting
with a copy of the normaliser and actor from before those gradient steps; the transitions of
that step are stored once they are done.  As many gradient steps are taken as unthreaded, at
the same environment steps: only the acting actor lags, by one batch of gradient steps.

With ``network_settings.memory`` the policy and the critics are recurrent and learn from
sequences of a replay buffer of sequences (:mod:`evtrain.trainers.sac.memory`).

An ``action_mask`` observation (:mod:`evtrain.trainers.networks.masks`) masks a ``Discrete``
policy, warm-up's random actions included; a recurrent SAC refuses it (not supported yet).
"""

from __future__ import annotations

import copy
import math
from typing import Any

import numpy as np
import numpy.typing as npt
import torch
from gymnasium import spaces
from torch import nn

from evtrain.errors import SpaceMismatchError
from evtrain.timers import hierarchical_timer
from evtrain.trainers.loops.replay import ReplayBuffer
from evtrain.trainers.networks.memory import RecurrentMLP
from evtrain.trainers.networks.mlp import flatten_parameters
from evtrain.trainers.observations import ObservationLayout, behavior_layout
from evtrain.trainers.optim import FlatAdam, make_adam
from evtrain.trainers.sac.actor import SACPolicy, SquashedGaussianActor, squashed_sample
from evtrain.trainers.sac.discrete import DISCRETE_UPDATE_STATS, Branches, CategoricalActor
from evtrain.trainers.sac.discrete_policy import DiscreteSACPolicy, RecurrentDiscreteSACPolicy
from evtrain.trainers.sac.memory import (
    CarriedMemories,
    RecurrentSACPolicy,
    RecurrentTwinQ,
    SequenceReplayBuffer,
)
from evtrain.trainers.sac.recurrent_update import SACRecurrentUpdate
from evtrain.trainers.sac.rewards import SACRewardProviders
from evtrain.trainers.sac.twin_q import TwinQ, from_two_networks, relayout_flat
from evtrain.trainers.settings import NetworkSettings, SACSettings
from evtrain.trainers.threaded import ActingCopy

UPDATE_STATS = (
    "Losses/Q1 Loss",
    "Losses/Q2 Loss",
    "Losses/Policy Loss",
    "Policy/Entropy",
    "Policy/Entropy Coeff",
    "Policy/Extrinsic Value Estimate",
)
"""What every update reports (the mean over a summary period), in ``_stats_sum``'s order."""


class SACTrainer(SACRecurrentUpdate):
    """SAC for bounded ``Box``, ``Discrete`` and ``MultiDiscrete`` action spaces: the
    off-policy loop (:mod:`~evtrain.trainers.loops.off_policy`) wired to SAC's update
    (:mod:`~evtrain.trainers.sac.update`)."""

    settings_type = SACSettings

    def _setup(self) -> None:
        settings, envs = self.settings, self.envs
        self.hp = self._hyperparameters()
        network = settings.network_settings
        self.layout = behavior_layout(
            envs.single_observation_space, network, self.behavior_name, self.action_space
        )
        """Where each part of an observation sits in the rows the replay buffer stores."""
        _refuse_recurrent_mask(self.layout, network, self.behavior_name)
        obs_dim = self.layout.features(network)  # what the hidden layers get
        action_dim, policy_out, critic_in, num_actions = self._action_sizes()
        self.normalizer = self.layout.normalizer(network.normalize).to(self.device)
        self._build_networks(obs_dim, action_dim, policy_out, critic_in, num_actions)
        self._build_optimizers(action_dim)
        self._build_replay(action_dim)
        self.num_updates = 0
        self._stats_sum = torch.zeros(len(UPDATE_STATS), device=self.device)
        self._stats_updates = 0
        self._lr_sum = 0.0
        # Built last: the networks' initial weights are those of a run without them.
        self.extras = SACRewardProviders(
            settings,
            self.behavior_name,
            envs.single_observation_space,
            self.action_space,
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
        self._extras_modules = self.extras.modules()  # a module: synchronize shares it
        self._acting: ActingCopy[SACPolicy | DiscreteSACPolicy] | None = None
        """threaded: the normaliser and actor the environments act with."""
        self._held = []
        if settings.threaded and not isinstance(self.actor, RecurrentMLP):
            # (a recurrent SAC is refused threaded by the settings)
            self._acting = ActingCopy(self._export_view())

    def _hyperparameters(self) -> SACSettings:
        """The hyperparameters, once the action space is known to suit SAC."""
        hp: SACSettings = self.settings.hyperparameters  # type: ignore[assignment]  # base checks
        space = self.envs.single_action_space
        if not isinstance(space, spaces.Discrete | spaces.MultiDiscrete) and (
            not isinstance(space, spaces.Box)
            or not (np.isfinite(space.low).all() and np.isfinite(space.high).all())
        ):
            raise SpaceMismatchError(
                f"SAC needs a bounded Box, a Discrete or a MultiDiscrete action space, got "
                f"{space}; give the Box finite bounds, or use trainer_type: ppo"
            )
        self.action_space = space
        return hp

    def _action_sizes(self) -> tuple[int, int, int, int]:
        """``(action_dim, policy outputs, critic action inputs, critic outputs)``; sets
        :attr:`branches` and a ``Box``'s bounds."""
        space = self.action_space
        self.branches = None
        if isinstance(space, spaces.Box):
            action_dim = int(np.prod(space.shape))
            self._low = space.low.reshape(-1).astype(np.float32)
            self._high = space.high.reshape(-1).astype(np.float32)
            return action_dim, 2 * action_dim, action_dim, 0
        # stored: an index per branch; the critics output the value of every action
        self.branches = Branches(space)
        total = self.branches.total
        return len(self.branches), total, 0, total

    def _build_networks(
        self, obs_dim: int, action_dim: int, policy_out: int, critic_in: int, num_actions: int
    ) -> None:
        """The actor, the twin critics and their targets.  Image encoders: the actor's and
        each critic's own, as ML-Agents' networks have (none for vector observations)."""
        network = self.settings.network_settings
        generator = self.init_generator
        memory = network.memory
        if memory is None:
            encoder = self.layout.encoder(network, generator)
            if self.branches is None:
                self.actor = SquashedGaussianActor(obs_dim, action_dim, network, generator, encoder)
            else:
                mask = self.layout.mask
                self.actor = CategoricalActor(
                    obs_dim, self.branches, network, generator, encoder, mask
                )
            self.qf = TwinQ(
                obs_dim, critic_in, network, generator, self.layout, num_actions=num_actions
            )
        else:  # an LSTM in the policy and in each critic (see evtrain.trainers.sac.memory)
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
        self.actor_params = flatten_parameters(self.actor)
        self.qf_params = flatten_parameters(self.qf)
        self.qf_target_params = flatten_parameters(self.qf_target)

    def _build_optimizers(self, action_dim: int) -> None:
        """The entropy coefficient (one per branch for discrete actions, ML-Agents') and
        target, and the three optimizers."""
        hp = self.hp
        self.log_alpha = nn.Parameter(torch.tensor(math.log(hp.init_entcoef), device=self.device))
        self.target_entropy = -float(action_dim) if hp.target_entropy is None else hp.target_entropy
        self.update_stats = UPDATE_STATS
        if self.branches is not None:
            self.log_alpha = nn.Parameter(self.log_alpha.detach().expand(action_dim).clone())
            self.target_entropy = self.branches.target_entropy(hp.target_entropy).to(self.device)
            self.update_stats = DISCRETE_UPDATE_STATS
        self.actor_optimizer = make_adam(self.actor_params, hp.learning_rate)
        self.q_optimizer = make_adam(self.qf_params, hp.learning_rate)
        self.log_alpha.grad = torch.zeros_like(self.log_alpha)
        self.alpha_optimizer = make_adam(self.log_alpha, hp.learning_rate)

    def _build_replay(self, action_dim: int) -> None:
        """The replay buffer; with memory, one of sequences, and each environment's memories."""
        hp, memory = self.hp, self.settings.network_settings.memory
        self.memory = None
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

    # -- the algorithm's part of the off-policy loop -----------------------------------------------

    def _act(
        self,
        obs: npt.NDArray[np.float32],
        obs_t: torch.Tensor,
        acting: SACPolicy | DiscreteSACPolicy | None,
    ) -> tuple[npt.NDArray[Any], npt.NDArray[Any]]:
        """Uniform random actions while warming up, then ``a ~ pi(.|s)``; the memories step
        along either way."""
        normalizer = self.normalizer if acting is None else acting.normalizer
        actor = self.actor if acting is None else acting.actor
        normalizer.update(self._acting_rows(obs_t))
        if self.world.size > 1:  # every rank's observations into every rank's statistics
            normalizer.merge_ranks(self.world)
        if self.memory is not None:  # the memories step along, warming up or not
            out = self._step_memories(self.normalizer(obs_t))
        if self.step < self.hp.buffer_init_steps:
            action = self._random_actions(obs)
        elif self.memory is not None:
            action = self._sample(out, self.act_generator).cpu().numpy()
        else:
            with torch.no_grad():
                action = actor(normalizer(obs_t), self.act_generator)[0].cpu().numpy()
        if self.branches is None:
            env_action = self._low + (action + 1.0) * 0.5 * (self._high - self._low)
        else:  # [N, branches] indices, reshaped to the space's shape by the loop
            env_action = action.astype(np.int64)
        return action, env_action

    def _store(
        self,
        step: tuple[npt.NDArray[Any], ...],
        keep: npt.NDArray[np.bool_],
        obs_t: torch.Tensor,
    ) -> None:
        if isinstance(self.replay, SequenceReplayBuffer):  # (a recurrent SAC is not threaded)
            self._store_sequences(*step)
        else:
            super()._store(step, keep, obs_t)

    def _observed(self, *step: npt.NDArray[Any]) -> None:
        if self.extras:
            self.extras.observe(*step)

    def _updates_always(self) -> bool:
        return bool(self.extras)

    def _optimizers(self) -> tuple[FlatAdam, ...]:
        return self.actor_optimizer, self.q_optimizer, self.alpha_optimizer

    def _gradient_step(self) -> None:
        if self.memory is None:
            self._update()
        else:
            self._update_sequences()

    def _providers_update(self, step: int) -> None:
        if self.extras:
            with hierarchical_timer("reward_signals"):
                self.extras.update(step, self.replay, self.rng)

    def _random_actions(self, obs: npt.NDArray[np.float32]) -> npt.NDArray[Any]:
        """Uniformly random actions of every environment (``buffer_init_steps``): in
        ``[-1, 1]`` for ``Box``, an index per branch otherwise (of the allowed actions, where
        the observation rows ``obs`` hold an action mask)."""
        if self.branches is None:
            action = self.rng.uniform(-1.0, 1.0, size=(self.num_envs, self._low.size))
            return action.astype(np.float32)
        mask = self.layout.mask
        return self.branches.uniform(
            self.rng, self.num_envs, None if mask is None else obs[:, mask]
        )

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
