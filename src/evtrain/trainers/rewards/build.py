"""What a trainer builds from its ``reward_signals`` and ``behavioral_cloning`` settings: the
intrinsic reward providers (:mod:`~evtrain.trainers.rewards.reward_provider`,
:mod:`~evtrain.trainers.rewards.gail`), the demonstrations they learn from
(:mod:`~evtrain.trainers.demonstrations`), and the cloning
(:mod:`~evtrain.trainers.rewards.behavioral_cloning`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import attrs
import numpy as np
import torch
from gymnasium import spaces

from evtrain.trainers.demonstrations import Demonstrations, load_demonstrations
from evtrain.trainers.rewards.behavioral_cloning import BehavioralCloning, PolicyOutput
from evtrain.trainers.rewards.curiosity import CuriosityRewardProvider
from evtrain.trainers.rewards.gail import GAILRewardProvider
from evtrain.trainers.rewards.reward_provider import RewardProvider
from evtrain.trainers.rewards.rnd import RNDRewardProvider
from evtrain.trainers.settings import (
    CuriositySettings,
    GAILSettings,
    RewardProviders,
    TrainerSettings,
)
from evtrain.world import World


@attrs.frozen(kw_only=True, eq=False)
class Expert:
    """Demonstrations as a trainer learns from them, on its device."""

    obs: torch.Tensor
    """``(N, obs_dim)`` float32 raw observations, flattened."""
    actions: torch.Tensor
    """``(N,)`` int64 action indices (``Discrete``), or ``(N, action_dim)`` float32 actions in
    the trainer's own units (``Box``)."""


def load_experts(
    settings: TrainerSettings,
    behavior_name: str,
    observation_space: spaces.Space[Any],
    action_space: spaces.Space[Any],
    device: torch.device,
    *,
    unit_actions: bool = False,
) -> dict[str, Expert]:
    """The demonstrations of ``gail`` and ``behavioral_cloning``, by that key, for those that
    are configured; a path both name is read once.

    :param unit_actions: rescale ``Box`` actions from the action bounds to ``[-1, 1]`` (SAC's
        units).
    :raises ConfigError: a ``demo_path`` holds no demonstrations of this environment.
    """
    where = f"behaviors.{behavior_name}"
    paths: dict[str, tuple[str, str]] = {}
    gail = settings.reward_signals.gail
    if gail is not None:
        paths["gail"] = (gail.demo_path, f"{where}.reward_signals.gail.demo_path")
    if settings.behavioral_cloning is not None:
        key = f"{where}.behavioral_cloning.demo_path"
        paths["behavioral_cloning"] = (settings.behavioral_cloning.demo_path, key)
    read: dict[str, Expert] = {}
    experts = {}
    for name, (path, key) in paths.items():
        if path not in read:
            demo = load_demonstrations(path, observation_space, action_space, key=key)
            read[path] = _expert(demo, action_space, device, unit_actions)
        experts[name] = read[path]
    return experts


def _expert(
    demo: Demonstrations, action_space: spaces.Space[Any], device: torch.device, unit: bool
) -> Expert:
    obs = torch.as_tensor(demo.observations.reshape(len(demo), -1), dtype=torch.float32)
    if isinstance(action_space, spaces.Box):
        values = demo.actions.reshape(len(demo), -1).astype(np.float32)
        if unit:
            low, high = action_space.low.reshape(-1), action_space.high.reshape(-1)
            values = np.clip(2.0 * (values - low) / (high - low) - 1.0, -1.0, 1.0)
        actions = torch.as_tensor(values, dtype=torch.float32)
    else:  # Discrete: the spaces were checked against the demonstrations'
        actions = torch.as_tensor(demo.actions.reshape(-1), dtype=torch.int64)
    return Expert(obs=obs.to(device), actions=actions.to(device))


def make_reward_providers(
    providers: RewardProviders,
    obs_dim: int,
    action_space: spaces.Space[Any],
    generator: torch.Generator,
    device: torch.device,
    *,
    experts: dict[str, Expert] | None = None,
    normalize: Callable[[torch.Tensor], torch.Tensor] | None = None,
    sampler: torch.Generator | None = None,
) -> dict[str, RewardProvider]:
    """The configured intrinsic reward providers by YAML key, in :attr:`RewardProviders.intrinsic`'s
    order.

    :param generator: draws the models' initial weights.
    :param experts: :func:`load_experts`' result (``gail`` needs its demonstrations).
    :param normalize: the policy's observation normaliser (``gail`` applies it to them).
    :param sampler: the trainer's generator on ``device`` (``gail`` samples with it).
    """
    built: dict[str, RewardProvider] = {}
    for name, settings in providers.intrinsic.items():
        if isinstance(settings, GAILSettings):
            if experts is None or "gail" not in experts or sampler is None:
                raise ValueError("gail needs the demonstrations, the normaliser and a sampler")
            expert = experts["gail"]
            built[name] = GAILRewardProvider(
                settings,
                obs_dim,
                action_space,
                generator,
                device,
                expert_obs=expert.obs,
                expert_actions=expert.actions,
                normalize=normalize if normalize is not None else _identity,
                sampler=sampler,
            )
        elif isinstance(settings, CuriositySettings):
            built[name] = CuriosityRewardProvider(
                settings, obs_dim, action_space, generator, device
            )
        else:
            built[name] = RNDRewardProvider(settings, obs_dim, generator, device)
    return built


def _identity(x: torch.Tensor) -> torch.Tensor:
    return x


def make_behavioral_cloning(
    settings: TrainerSettings,
    experts: dict[str, Expert],
    *,
    params: torch.nn.Parameter,
    policy: PolicyOutput,
    normalize: Callable[[torch.Tensor], torch.Tensor],
    learning_rate: float,
    batch_size: int,
    discrete: bool,
    generator: torch.Generator,
    world: World,
) -> BehavioralCloning | None:
    """The cloning ``behavioral_cloning`` configures, or ``None``."""
    if settings.behavioral_cloning is None:
        return None
    expert = experts["behavioral_cloning"]
    return BehavioralCloning(
        settings.behavioral_cloning,
        expert_obs=expert.obs,
        expert_actions=expert.actions,
        params=params,
        policy=policy,
        normalize=normalize,
        learning_rate=learning_rate,
        batch_size=batch_size,
        discrete=discrete,
        generator=generator,
        world=world,
    )
