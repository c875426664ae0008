"""The public contract between a training loop and an algorithm.

A *loop* (:mod:`evtrain.trainers.loops`) owns everything a run needs around learning: the
environments, the rollout or the replay buffer, GAE, the step and episode bookkeeping, the
summaries, the update thread, the non-finite guard, the stats reporter and the checkpoints.
An *algorithm* owns its networks and optimizers and nothing else: the loop builds it from an
:class:`AlgorithmSpec`, asks it to act, hands it frozen batches of plain tensors and reports
the statistics its update returns.  An algorithm never sees the loop.

A new algorithm implements one of the protocols below and registers a trainer type that names
its loop and its algorithm (docs/architecture.md, "How to add a trainer").
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

import attrs
import numpy as np
import torch
from gymnasium import spaces
from torch import nn

from evtrain.trainers.finite import FiniteGuard
from evtrain.trainers.networks.policies import ActorCritic
from evtrain.trainers.networks.recurrent import RecurrentActorCritic
from evtrain.trainers.settings import TrainerSettings
from evtrain.trainers.signals.reward_signal import RewardSignal
from evtrain.world import World


@attrs.frozen(kw_only=True)
class AlgorithmSpec:
    """What an algorithm is built from: its behavior's settings and spaces, and the tools the
    loop shares with it.  The random generators are the loop's own objects (one stream per
    behavior, so that a run draws in the same order whatever code draws): an algorithm draws
    from them and never replaces them."""

    behavior_name: str
    """The behavior it trains (error messages, stats categories)."""
    settings: TrainerSettings
    """The behavior's settings; ``settings.hyperparameters`` is the algorithm's own class."""
    observation_space: spaces.Space[Any]
    """One agent's observation space."""
    action_space: spaces.Space[Any]
    """One agent's action space."""
    num_envs: int
    """Agents acting in each step (sub-environments or agent slots) on this rank."""
    device: torch.device
    """Where the networks live."""
    world: World
    """This job's ranks: average gradients with ``world.average_(grad)``."""
    init_generator: torch.Generator
    """Draws the initial weights (networks are built on the CPU, then moved)."""
    generator: torch.Generator
    """Every random draw on ``device``: action sampling, minibatch shuffling."""
    rng: np.random.Generator
    """Every random draw made in numpy."""
    finite: FiniteGuard
    """The loop's non-finite guard: an algorithm shows it each gradient step's loss and
    gradient norm (``finite.update(step, loss, grad_norm)``) and steps its optimizer only when
    it says so."""


# -- on-policy algorithms --------------------------------------------------------------------


@attrs.frozen(kw_only=True)
class Sequences:
    """A recurrent rollout laid out in training sequences (``network_settings.memory``; see
    :mod:`evtrain.trainers.loops.recurrent_rollout`): ``S`` sequences of ``L`` steps."""

    obs: torch.Tensor
    """``(S, L, D)`` normalised observations, zero at padded positions."""
    actor_memory: torch.Tensor
    """``(S, M)`` the policy's memory at each sequence's first step."""
    critic_memory: torch.Tensor
    """``(S, M)`` the critic's memory there."""
    mask: torch.Tensor
    """``(S, L)`` which positions hold steps."""
    rows: torch.Tensor
    """``(S, L)`` each position's row in the batch's flat tensors (meaningless where padded)."""

    def select(self, which: torch.Tensor) -> Sequences:
        """The sequences ``which``, in that order."""
        return Sequences(
            obs=self.obs[which],
            actor_memory=self.actor_memory[which],
            critic_memory=self.critic_memory[which],
            mask=self.mask[which],
            rows=self.rows[which],
        )


@attrs.frozen(kw_only=True)
class OnPolicyBatch:
    """One rollout, valued and flattened by the on-policy loop, as CleanRL's update reads it
    (``b_obs``, ``b_actions``, ``b_logprobs``, ``b_advantages``, ``b_returns``): ``B`` rows, one
    per transition (the autoreset steps of NEXT_STEP mode left out).  The update reads it and
    nothing else; the loop never writes it again (``threaded``: the next rollout is collected
    while the update reads this one).

    Group trainers (``poca``, ``mappo``) hand their algorithm rows of whole groups: ``(B, G,
    ...)`` tensors, one row per environment copy and step.
    """

    obs: torch.Tensor
    """``(B, D)`` normalised observations (what the agent acted on)."""
    actions: torch.Tensor
    """``(B,)`` discrete or ``(B, A)`` continuous actions, as sampled."""
    logprobs: torch.Tensor
    """``(B,)`` their log-probabilities under the rollout's policy."""
    advantages: torch.Tensor
    """``(B,)`` GAE advantages (summed over the reward providers), not normalised."""
    returns: torch.Tensor
    """``(B,)`` or ``(B, 1 + K)`` the critic's targets: one column per value head (extrinsic,
    then each of ``K`` reward providers)."""
    step: int
    """The global step the rollout ended at: what the schedules and the non-finite guard
    read."""
    next_obs: torch.Tensor | None = None
    """``(B, D)`` each transition's next observation (the final one where an episode ended);
    only with reward providers, which learn from ``(s, a, s')``."""
    values: torch.Tensor | None = None
    """The critic's estimates during the rollout (group trainers: the trust region's
    centre)."""
    active: torch.Tensor | None = None
    """Group trainers: ``(B, G)`` booleans, the agent acted (only those steps train the
    policy)."""
    extras: Mapping[str, torch.Tensor] = attrs.field(factory=dict)
    """Per-row tensors an algorithm's own valuing added (POCA: ``"baselines"``)."""
    sequences: Sequences | None = None
    """With memory: the rows in sequence order, and the sequences they make."""


class OnPolicyAlgorithm(Protocol):
    """What the on-policy loop (:mod:`evtrain.trainers.loops.on_policy`) needs of an algorithm.

    An implementation is a class whose constructor takes one :class:`AlgorithmSpec`: it
    builds its networks there, drawing their initial weights from ``spec.init_generator`` in a
    fixed order.  The loop acts and values with :attr:`agent`, evaluates
    :attr:`reward_providers` on each rollout, and calls :meth:`update` once per rollout (with
    ``threaded``, on the behavior's update thread).
    """

    def __init__(self, spec: AlgorithmSpec) -> None:
        """Build the networks, optimizers and reward providers for ``spec``."""

    @property
    def agent(self) -> ActorCritic | RecurrentActorCritic:
        """The actor-critic the loop acts with (``act``) and values the rollout with
        (``value``), observation normaliser included."""
        ...

    @property
    def reward_providers(self) -> Mapping[str, RewardSignal]:
        """The intrinsic reward providers by YAML key (empty: extrinsic only), in the order of
        the critic's value heads after the extrinsic one; :meth:`update` trains them."""
        ...

    def update(self, batch: OnPolicyBatch) -> dict[str, float]:
        """Learn from one rollout; returns the statistics to report (ML-Agents' names:
        ``Losses/Policy Loss``, ``Policy/Entropy``, ``Policy/Learning Rate``, ...)."""
        ...

    def policy_module(self) -> nn.Module:
        """Raw observations to deterministic actions, observation normalisation included,
        ready for ``torch.onnx.export``; shares parameters with :attr:`agent`."""
        ...

    def sampling_policy_module(self, generator: torch.Generator) -> nn.Module:
        """Raw observations to actions drawn as training draws them, with ``generator``
        (``self_play``'s opponents); shares parameters with :attr:`agent`."""
        ...

    def state_dict(self) -> dict[str, Any]:
        """Networks, optimizers and reward providers: tensors and plain values only."""
        ...

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict`'s output (``--resume``)."""
        ...

    def load_weights(self, state: dict[str, Any]) -> None:
        """Restore only the networks (normaliser and reward providers' models included) from
        :meth:`state_dict`'s output (``--initialize-from``)."""
        ...


# -- off-policy algorithms -------------------------------------------------------------------
