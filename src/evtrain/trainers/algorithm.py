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

from typing import Any

import attrs
import numpy as np
import torch
from gymnasium import spaces

from evtrain.trainers.finite import FiniteGuard
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


# -- on-policy algorithms --------------------------------------------------------------------


# -- off-policy algorithms -------------------------------------------------------------------
