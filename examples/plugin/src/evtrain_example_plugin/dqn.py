"""A trainer plugin written on evtrain's off-policy loop: deep Q-learning (DQN, Mnih et al.
2015, "Human-level control through deep reinforcement learning"), ``trainer_type: dqn``.

What it shows: a new off-policy algorithm is one class behind the public off-policy protocol
(:mod:`evtrain.trainers.algorithm`).  The loop steps the environments, fills the replay buffer,
acts at random while warming up, samples a minibatch every ``steps_per_update`` environment
steps and reports what the gradient step returns; the algorithm owns a Q-network, its target
network and one optimizer, and nothing else.  Read it beside CleanRL's ``dqn.py``:

* ε-greedy exploration: ε falls linearly from ``exploration_initial_eps`` to
  ``exploration_final_eps`` over the first ``exploration_fraction`` of ``max_steps``;
* the TD target ``r + gamma (1 - terminated) max_a' Q_target(s', a')``, regressed with the Huber
  loss (or the squared error, ``loss: mse``);
* the target network follows the Q-network every ``target_update_interval`` gradient steps,
  by Polyak averaging with ``tau`` (1: a copy, the paper's periodic update).

``Discrete`` actions and vector (``Box``) observations; one process only: it averages no
gradients over ranks.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any, Literal, cast

import attrs
import numpy as np
import torch
import torch.nn.functional as F
from gymnasium import spaces
from torch import nn

from evtrain.trainers.algorithm import AlgorithmSpec, OffPolicyActions, ReplayBatch
from evtrain.trainers.base import Trainer
from evtrain.trainers.loops.off_policy import OffPolicyLoop
from evtrain.trainers.networks.mlp import MLP
from evtrain.trainers.settings import NetworkSettings


def _positive(_: object, attribute: attrs.Attribute[Any], value: float) -> None:
    if not value > 0:
        raise ValueError(f"{attribute.name}: expected a number above 0, got {value}")


def _fraction(_: object, attribute: attrs.Attribute[Any], value: float) -> None:
    if not 0 <= value <= 1:
        raise ValueError(f"{attribute.name}: expected a number from 0 to 1, got {value}")


def _unit_open(_: object, attribute: attrs.Attribute[Any], value: float) -> None:
    if not 0 < value <= 1:
        raise ValueError(f"{attribute.name}: expected a number above 0, at most 1, got {value}")


def _non_negative(_: object, attribute: attrs.Attribute[Any], value: int) -> None:
    if not value >= 0:
        raise ValueError(f"{attribute.name}: expected a whole number from 0 up, got {value}")


def _one_of(*choices: str) -> Any:
    def check(_: object, attribute: attrs.Attribute[Any], value: str) -> None:
        if value not in choices:
            raise ValueError(f"{attribute.name}: expected one of {list(choices)}, got {value!r}")

    return check


@attrs.define(kw_only=True)
class DQNSettings:
    """DQN's hyperparameters (``trainer_type: dqn``); the defaults are RL Zoo's for CartPole,
    but ``target_update_interval``: the Zoo copies the target every 10 environment steps and
    takes its gradient steps in bursts of 128 every 256 steps, so that its target changes once
    per 128 gradient steps, as it does here."""

    learning_rate: float = attrs.field(default=2.3e-3, validator=_positive)
    """Adam's step size."""
    learning_rate_schedule: Literal["constant", "linear"] = attrs.field(
        default="constant", validator=_one_of("constant", "linear")
    )
    """``linear``: the loop decays the learning rate to 0 at ``max_steps``."""
    batch_size: int = attrs.field(default=64, validator=_positive)
    """Transitions the loop samples from the replay buffer per gradient step."""
    buffer_size: int = attrs.field(default=100_000, validator=_positive)
    """Replay buffer capacity in transitions."""
    buffer_init_steps: int = attrs.field(default=1000, validator=_non_negative)
    """Environment steps of uniformly random actions before learning starts (CleanRL's
    ``learning_starts``)."""
    steps_per_update: float = attrs.field(default=2.0, validator=_positive)
    """Environment steps (summed over environments) per gradient step."""
    target_update_interval: int = attrs.field(default=128, validator=_positive)
    """Gradient steps between two updates of the target network."""
    tau: float = attrs.field(default=1.0, validator=_unit_open)
    """Polyak factor of a target update: 1 copies the Q-network, less moves part of the way."""
    exploration_initial_eps: float = attrs.field(default=1.0, validator=_fraction)
    """ε at step 0: the probability of a uniformly random action."""
    exploration_final_eps: float = attrs.field(default=0.04, validator=_fraction)
    """ε from ``exploration_fraction * max_steps`` on."""
    exploration_fraction: float = attrs.field(default=0.16, validator=_fraction)
    """The part of ``max_steps`` over which ε falls linearly."""
    loss: Literal["huber", "mse"] = attrs.field(default="huber", validator=_one_of("huber", "mse"))
    """The TD loss: Huber (smooth L1, the paper's error clipping) or the squared error."""
    max_grad_norm: float = attrs.field(default=10.0, validator=_positive)
    """The gradient's norm is clipped to this before each step (SB3's DQN)."""
    save_replay_buffer: bool = attrs.field(
        default=False, validator=attrs.validators.instance_of(bool)
    )
    """Checkpoints hold the replay buffer, so that ``--resume`` keeps the experience."""


def epsilon(hp: DQNSettings, step: int, max_steps: int) -> float:
    """ε at environment step ``step``: linear from ``exploration_initial_eps`` to
    ``exploration_final_eps`` over ``exploration_fraction * max_steps`` steps, then flat."""
    duration = hp.exploration_fraction * max_steps
    progress = 1.0 if duration <= 0 else min(step / duration, 1.0)
    return progress * hp.exploration_final_eps + (1.0 - progress) * hp.exploration_initial_eps


def td_loss(
    q_values: torch.Tensor,
    next_q_target: torch.Tensor,
    rewards: torch.Tensor,
    terminated: torch.Tensor,
    gamma: float,
    kind: Literal["huber", "mse"],
) -> torch.Tensor:
    """The TD error's loss: ``Q(s, a)`` (``q_values``) against ``r + gamma (1 - terminated)
    max_a' Q_target(s', a')`` (``next_q_target`` holds ``Q_target(s', ·)``)."""
    with torch.no_grad():
        td_target = rewards + gamma * (1.0 - terminated) * next_q_target.max(dim=1).values
    if kind == "huber":
        return F.smooth_l1_loss(q_values, td_target)
    return F.mse_loss(q_values, td_target)


@torch.no_grad()
def soft_update(target: nn.Module, source: nn.Module, tau: float) -> None:
    """``target ← tau source + (1 - tau) target``, parameter by parameter (a copy for 1)."""
    for t, s in zip(target.parameters(), source.parameters(), strict=True):
        t.lerp_(s, tau)


class GreedyPolicy(nn.Module):
    """Export view: observations in, the action of the highest Q-value out (``[B]`` int64,
    as evtrain's discrete policies export)."""

    def __init__(self, q_network: nn.Module) -> None:
        super().__init__()
        self.q_network = q_network

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        q_values: torch.Tensor = self.q_network(obs.flatten(1))
        return q_values.argmax(dim=1)


def q_network(
    observation_space: spaces.Space[Any],
    action_space: spaces.Space[Any],
    network: NetworkSettings,
    generator: torch.Generator,
    behavior_name: str,
) -> MLP:
    """An MLP from a flattened observation to one Q-value per action."""
    if not isinstance(action_space, spaces.Discrete):
        raise ValueError(
            f"behavior {behavior_name!r}: DQN needs a Discrete action space, got "
            f"{action_space}; use trainer_type: ppo or sac"
        )
    if not isinstance(observation_space, spaces.Box):
        raise ValueError(
            f"behavior {behavior_name!r}: this DQN needs a Box observation space, got "
            f"{observation_space}; use trainer_type: ppo or sac"
        )
    obs_dim = int(np.prod(observation_space.shape))
    return MLP(obs_dim, int(action_space.n), network, out_gain=1.0, generator=generator)


class DQN:
    """The algorithm (an :class:`~evtrain.trainers.algorithm.OffPolicyAlgorithm`): a
    Q-network, its target network and Adam."""

    def __init__(self, spec: AlgorithmSpec) -> None:
        settings = spec.settings
        self.hp = cast("DQNSettings", settings.hyperparameters)
        self.max_steps = settings.max_steps
        self.gamma = settings.reward_signals.extrinsic.gamma
        self.finite = spec.finite
        self.rng = spec.rng
        self.q_network = q_network(
            spec.observation_space,
            spec.action_space,
            settings.network_settings,
            spec.init_generator,
            spec.behavior_name,
        ).to(spec.device)
        self.num_actions = self.q_network.out.out_features
        self.target_network = copy.deepcopy(self.q_network).requires_grad_(False)
        self.optimizer = torch.optim.Adam(self.q_network.parameters(), lr=self.hp.learning_rate)
        self.num_updates = 0
        """Gradient steps taken (the target network follows every ``target_update_interval``)."""

    # -- acting: ε-greedy ------------------------------------------------------------------------

    def observe(self, obs: torch.Tensor, acting: nn.Module | None) -> None:
        """Nothing: no observation normaliser."""

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
        """Uniformly random actions while warming up; then, in each environment, a random
        action with probability ε, else the action of the highest Q-value."""
        q = self.q_network if acting is None else acting
        num_envs = obs.shape[0]
        eps = 1.0 if warmup else epsilon(self.hp, step, self.max_steps)
        explore = self.rng.random(num_envs) < eps
        action = self.rng.integers(self.num_actions, size=num_envs)
        if not explore.all():
            greedy = q(obs).argmax(dim=1).cpu().numpy()
            action = np.where(explore, action, greedy)
        return OffPolicyActions(actions=action.astype(np.float32)[:, None], env_actions=action)

    def acting_module(self) -> nn.Module:
        return self.q_network

    def set_learning_rate(self, learning_rate: float) -> None:
        for group in self.optimizer.param_groups:
            group["lr"] = learning_rate

    # -- learning: one gradient step on the TD loss ------------------------------------------

    def update(self, batch: ReplayBatch) -> Mapping[str, float | torch.Tensor]:
        b_actions = batch.actions.long()
        q_values = self.q_network(batch.obs).gather(1, b_actions).squeeze(1)
        with torch.no_grad():
            next_q_target = self.target_network(batch.next_obs)
        loss = td_loss(
            q_values, next_q_target, batch.rewards, batch.terminations, self.gamma, self.hp.loss
        )
        self.optimizer.zero_grad()
        loss.backward()  # type: ignore[no-untyped-call]
        grad_norm = nn.utils.clip_grad_norm_(self.q_network.parameters(), self.hp.max_grad_norm)
        if not self.finite.update(batch.step, loss, grad_norm):
            return {}  # on_nonfinite: skip
        self.optimizer.step()
        # -- the target network follows
        self.num_updates += 1
        if self.num_updates % self.hp.target_update_interval == 0:
            soft_update(self.target_network, self.q_network, self.hp.tau)
        return {
            "Losses/Value Loss": loss.detach(),
            "Policy/Q Value": q_values.detach().mean(),
            "Policy/Epsilon": epsilon(self.hp, batch.step, self.max_steps),
        }

    # -- export and checkpoints --------------------------------------------------------------

    def policy_module(self) -> nn.Module:
        return GreedyPolicy(self.q_network).eval()

    def state_dict(self) -> dict[str, Any]:
        return {
            "q_network": self.q_network.state_dict(),
            "target_network": self.target_network.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "dqn_updates": self.num_updates,
        }

    def load_weights(self, state: dict[str, Any]) -> None:
        self.q_network.load_state_dict(state["q_network"])
        self.target_network.load_state_dict(state["target_network"])

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.load_weights(state)
        self.optimizer.load_state_dict(state["optimizer"])
        self.num_updates = int(state["dqn_updates"])


class DQNTrainer(OffPolicyLoop):
    """``trainer_type: dqn``: evtrain's off-policy loop driving :class:`DQN`."""

    settings_type = DQNSettings
    algorithm: DQN

    def build_algorithm(self, spec: AlgorithmSpec) -> DQN:
        return DQN(spec)


def trainer_types() -> dict[str, type[Trainer]]:
    """Registration function of the ``evtrain.trainer`` entry point ``dqn``."""
    return {"dqn": DQNTrainer}
