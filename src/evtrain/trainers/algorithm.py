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

from collections.abc import Callable, Mapping
from typing import Any, Protocol

import attrs
import numpy as np
import numpy.typing as npt
import torch
from gymnasium import spaces
from torch import nn

from evtrain.trainers.finite import FiniteGuard
from evtrain.trainers.networks.policies import ActorCritic
from evtrain.trainers.networks.recurrent import RecurrentActorCritic
from evtrain.trainers.rewards.reward_provider import RewardProvider
from evtrain.trainers.settings import TrainerSettings
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
    group_size: int = 1
    """Agents per group (the agent slots of one environment copy; group trainers' critics see
    a group whole); 1 for everything else."""


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
    def reward_providers(self) -> Mapping[str, RewardProvider]:
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


class OffPolicyHyperparameters(Protocol):
    """What the off-policy loop reads of an off-policy algorithm's hyperparameters
    (``settings.hyperparameters``; :class:`~evtrain.trainers.settings.SACSettings` has them):
    a plugin's settings class declares these fields, with ML-Agents' meanings."""

    @property
    def batch_size(self) -> int:
        """Transitions per gradient step (sequences: steps, ``batch_size / sequence_length``
        sequences); no gradient step before the replay buffer holds this many."""
        ...

    @property
    def buffer_size(self) -> int:
        """The replay buffer's capacity in transitions."""
        ...

    @property
    def buffer_init_steps(self) -> int:
        """Environment steps (global) of random actions before learning starts."""
        ...

    @property
    def steps_per_update(self) -> float:
        """Environment steps (global) per gradient step."""
        ...

    @property
    def learning_rate(self) -> float: ...

    @property
    def learning_rate_schedule(self) -> str:
        """``constant``, or ``linear`` (down to 1e-10 at ``max_steps``)."""
        ...

    @property
    def save_replay_buffer(self) -> bool:
        """Whether checkpoints hold the replay buffer."""
        ...


@attrs.frozen(kw_only=True)
class ReplayBatch:
    """One minibatch the off-policy loop sampled from its replay buffer, on the algorithm's
    device.  Observations are raw rows (the flattened observation, before any normaliser),
    actions as :meth:`OffPolicyAlgorithm.act` returned them for storing.

    Feed-forward: ``B`` transitions, ``obs``/``next_obs`` ``[B, obs]``, ``actions``
    ``[B, action]``, ``rewards``/``terminations`` ``[B]``.  With memory
    (:class:`RecurrentOffPolicyAlgorithm`): ``S`` sequences of ``L`` steps of one environment,
    ``[S, L, ...]``, with :attr:`mask` and the :attr:`memories` they started from.

    The tensors may be views of a buffer the loop reuses: an algorithm uses them within its
    :meth:`~OffPolicyAlgorithm.update` and keeps none.
    """

    obs: torch.Tensor
    """``s``."""
    actions: torch.Tensor
    """``a``, as stored."""
    rewards: torch.Tensor
    """``r``: the environment's reward times the ``extrinsic`` strength."""
    next_obs: torch.Tensor
    """``s'``: the final observation where an episode ended."""
    terminations: torch.Tensor
    """1.0 where ``s'`` is terminal (no bootstrap); a truncation is not a termination."""
    mask: torch.Tensor | None = None
    """Sequences: true where a position holds a transition, false where it is padding."""
    memories: Mapping[str, torch.Tensor] = attrs.field(factory=dict)
    """Sequences: each memory (:attr:`RecurrentOffPolicyAlgorithm.memory_sizes`) at the
    sequence's first step, ``[S, size]``."""
    step: int = 0
    """The environment step (global) the loop takes this gradient step at: the step to name
    to :attr:`AlgorithmSpec.finite` (``finite.update(batch.step, loss, grad_norm)``)."""


@attrs.frozen(kw_only=True)
class OffPolicyActions:
    """What :meth:`OffPolicyAlgorithm.act` decided for one step of every environment."""

    actions: npt.NDArray[Any]
    """``[N, action]`` float32 rows, as the replay buffer stores them and
    :attr:`ReplayBatch.actions` gives them back: a ``Box``'s flattened action (in whatever
    scale the algorithm learns it), a discrete space's index per branch."""
    env_actions: npt.NDArray[Any]
    """``[N, ...]`` what the environments take (the loop reshapes it to the action space's
    shape)."""
    memories: Mapping[str, torch.Tensor] = attrs.field(factory=dict)
    """With memory: each memory after this step, ``[N, size]`` (the loop carries them to the
    next step and zeroes those of the episodes that end)."""


class OffPolicyAlgorithm(Protocol):
    """An off-policy algorithm (SAC; the example plugin's DQN), driven by the off-policy loop
    (:class:`~evtrain.trainers.loops.off_policy.OffPolicyLoop`), which owns the environments,
    the replay buffer, the warm-up, the sampling, the updates-to-data ratio (``steps_per_update``),
    the learning-rate schedule, the update thread, the non-finite guard, the stats reporter and
    the checkpoints.

    An implementation is a class whose constructor takes one :class:`AlgorithmSpec`
    (:data:`OffPolicyAlgorithmType`; the trainer type's ``build_algorithm`` calls it); it never
    sees the loop.  Each environment step the loop
    calls :meth:`observe` then :meth:`act`; once the replay buffer holds ``batch_size``
    transitions, :meth:`set_learning_rate`, then one :meth:`update` per gradient step due
    (``threaded``: on the behavior's update thread).
    """

    def observe(self, obs: torch.Tensor, acting: nn.Module | None) -> None:
        """Count the rows ``obs`` (those of the agents acting in this step, on the device) into
        the statistics that normalise observations, ``acting``'s (see :meth:`act`) or the
        trained ones; nothing without a normaliser.  Threaded, the loop counts the rows into
        the trained statistics once the update running meanwhile is done."""

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
        """Training actions for the raw observation rows ``obs`` ``[N, obs]`` (on the device)
        at environment step ``step`` (global): uniformly random while ``warmup``
        (``buffer_init_steps``), else exploring as the algorithm does (SAC samples its policy;
        a DQN is ε-greedy with ε a function of ``step``).

        :param generator: every torch draw of acting (the loop's: threaded, one of its own).
        :param acting: ``None``: act with the trained networks; threaded, the loop's frozen
            copy of :meth:`acting_module` (refreshed whenever an update is done).
        :param memories: with memory, each environment's memories (empty otherwise).
        """
        ...

    def acting_module(self) -> nn.Module:
        """The networks :meth:`act` reads, which the loop copies for acting while an update
        runs on the update thread (``threaded: true``)."""
        ...

    def set_learning_rate(self, learning_rate: float) -> None:
        """The step size of the optimizers' next steps (the loop's ``learning_rate_schedule``)."""

    def update(self, batch: ReplayBatch) -> Mapping[str, float | torch.Tensor]:
        """One gradient step on ``batch``; its statistics by stat name (``Losses/...``,
        ``Policy/...``), which the loop averages over a summary period and reports.  A value
        may be a 0-d tensor on the device: the loop sums it there and reads it once per
        summary (no synchronisation per step).  Empty when the step was skipped as non-finite
        (``on_nonfinite: skip``, :attr:`AlgorithmSpec.finite`)."""
        ...

    def policy_module(self) -> nn.Module:
        """Raw observations to deterministic actions, ready for export (see
        :meth:`evtrain.trainers.base.Trainer.policy_module`); shares the trained parameters."""
        ...

    def state_dict(self) -> dict[str, Any]:
        """Networks, optimizers, normaliser: tensors and plain values only (``torch.load`` with
        ``weights_only=True`` reads them).  The loop adds its own keys beside them (``step``,
        the generators, ``num_updates``, ``replay_buffer``): never use those."""
        ...

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict`'s output (``--resume``)."""

    def load_weights(self, state: dict[str, Any]) -> None:
        """Only the networks and normaliser of :meth:`state_dict`'s output
        (``--initialize-from``); optimizers start afresh."""


class RecurrentOffPolicyAlgorithm(OffPolicyAlgorithm, Protocol):
    """An off-policy algorithm with ``network_settings.memory``: the loop carries each
    environment's memories from one :meth:`~OffPolicyAlgorithm.act` to the next, stores
    sequences of ``sequence_length`` steps with the memories they started from, and hands
    :meth:`~OffPolicyAlgorithm.update` whole sequences (``batch_size / sequence_length`` of
    them, at least one)."""

    @property
    def memory_sizes(self) -> Mapping[str, int]:
        """Each memory's width, by name (the names of :attr:`ReplayBatch.memories` and of the
        replay buffer's checkpoint)."""
        ...


OffPolicyAlgorithmType = Callable[[AlgorithmSpec], OffPolicyAlgorithm]
"""What an off-policy trainer's ``build_algorithm`` calls: a class (or factory) built from an
:class:`AlgorithmSpec`."""
