"""NaN and infinity in training: found where they enter, before they reach the weights.

A trainer checks each vector step's rewards and observations (:meth:`FiniteGuard.step`), and
each gradient step's loss and total gradient norm (:meth:`FiniteGuard.update`) — one
``isfinite`` over a few numbers each, the gradient's norm being what clipping computes anyway.
With ``on_nonfinite: stop`` (the default) the first non-finite number raises
:class:`~evtrain.errors.NonFiniteError` naming the quantity, the behavior and the step (a loss
or gradient at the end of the update, :meth:`FiniteGuard.check_updates`, so that training
pays no device sync per gradient step); with
``skip`` the update it would have entered is skipped and counted in the stat
:data:`SKIPPED_STAT`.  The runner refuses to write a checkpoint or an export whose weights are
not finite either way (:func:`nonfinite_tensors`).
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Mapping
from typing import Any

import numpy as np
import torch

from evtrain.bus.reporter import StatsReporter
from evtrain.errors import NonFiniteError
from evtrain.events.stats import StatsAggregationMethod

__all__ = [
    "SKIPPED_STAT",
    "FiniteGuard",
    "finite_mean",
    "finite_rows",
    "nonfinite_tensors",
    "refuse_nonfinite_weights",
    "zeroed",
]

logger = logging.getLogger("evtrain")

SKIPPED_STAT = "Policy/Non-finite Updates Skipped"
"""With ``on_nonfinite: skip``: updates (PPO rollouts, SAC gradient steps) and environment
steps skipped in the summary period because a number in them was not finite (summed)."""


def finite_rows(value: Any, rows: int) -> np.ndarray[Any, np.dtype[np.bool_]]:
    """Per environment (``rows`` of them), whether every number of ``value`` is finite;
    ``value`` is an array or tensor with the environments first, or a mapping of those."""
    if isinstance(value, Mapping):
        ok = np.ones(rows, dtype=np.bool_)
        for part in value.values():
            ok &= finite_rows(part, rows)
        return ok
    if isinstance(value, torch.Tensor):
        if not value.is_floating_point():
            return np.ones(rows, dtype=np.bool_)
        flat = torch.isfinite(value.reshape(rows, -1)).all(dim=1)
        return np.asarray(flat.cpu().numpy(), dtype=np.bool_)
    array = np.asarray(value)
    if array.dtype.kind != "f":  # not a float (numpy's floats are its kind "f")
        return np.ones(rows, dtype=np.bool_)
    return np.asarray(np.isfinite(array.reshape(rows, -1)).all(axis=1), dtype=np.bool_)


def _surely_finite(value: Any) -> bool:
    """Whether ``value`` is a numpy array whose numbers are all finite, in one pass in C
    (what nearly every step is); ``False`` leaves the answer to :func:`finite_rows`, row by
    row."""
    if type(value) is not np.ndarray:
        return False
    return value.dtype.kind != "f" or bool(np.isfinite(value).all())


@functools.lru_cache(maxsize=16)
def _all_rows(rows: int) -> np.ndarray[Any, np.dtype[np.bool_]]:
    """``rows`` times ``True``, read-only (shared by every step that finds nothing)."""
    ok = np.ones(rows, dtype=np.bool_)
    ok.flags.writeable = False
    return ok


def zeroed(value: Any, ok: np.ndarray[Any, Any]) -> Any:
    """``value`` (an array, or a mapping of arrays, environments first) with the rows that
    are not ``ok`` set to 0: what a skipped step leaves for the normaliser and the next step."""
    if isinstance(value, Mapping):
        return {key: zeroed(part, ok) for key, part in value.items()}
    array = np.array(value, copy=True)
    array[~ok] = 0
    return array


def finite_mean(values: list[torch.Tensor]) -> float | None:
    """The mean of the finite ones of ``values`` (scalars; ``None`` if none is): a stat that
    leaves out the gradient steps skipped as non-finite."""
    stacked = torch.stack(values)
    finite = stacked[torch.isfinite(stacked)]
    return float(finite.mean()) if len(finite) else None


def nonfinite_tensors(value: Any, where: str = "") -> list[str]:
    """The paths (``agent.body.0.weight``) of the floating-point tensors in ``value`` (a state
    dict, nested dicts/lists of tensors, or a module) holding a NaN or an infinity.

    A replay buffer saved with the state (``replay_buffer``) holds what the environments
    returned, not weights: it is not looked at.
    """
    if isinstance(value, torch.nn.Module):
        named = [*value.named_parameters(), *value.named_buffers()]
        return [name for name, t in named if _nonfinite(t)]
    if isinstance(value, Mapping):
        found = []
        for key, item in value.items():
            if key != "replay_buffer":
                found += nonfinite_tensors(item, f"{where}.{key}" if where else str(key))
        return found
    if isinstance(value, list | tuple):
        return [p for i, item in enumerate(value) for p in nonfinite_tensors(item, f"{where}[{i}]")]
    return [where] if isinstance(value, torch.Tensor) and _nonfinite(value) else []


def refuse_nonfinite_weights(behavior: str, step: int, *values: Any) -> None:
    """Before a checkpoint or an export of ``behavior`` at ``step`` is written.

    :param values: state dicts or modules (:func:`nonfinite_tensors`).
    :raises NonFiniteError: a weight is NaN or infinite; the message names the first three.
    """
    bad = [path for value in values for path in nonfinite_tensors(value)]
    if bad:
        more = f" and {len(bad) - 3} more" if len(bad) > 3 else ""
        raise NonFiniteError(
            "weights",
            behavior,
            step,
            f"found in {', '.join(bad[:3])}{more}; this checkpoint and its export were not "
            "written, the last one on disk is kept",
        )


def _nonfinite(tensor: torch.Tensor) -> bool:
    return tensor.is_floating_point() and not bool(torch.isfinite(tensor).all())


class FiniteGuard:
    """One behavior's checks, and what it does on a non-finite number.

    :param policy: ``"stop"`` (raise) or ``"skip"`` (skip and count), from the behavior's
        ``on_nonfinite``.
    """

    def __init__(self, behavior: str, policy: str, reporter: StatsReporter) -> None:
        self.behavior = behavior
        self.policy = policy
        self.reporter = reporter
        self.skipped = 0
        """Updates and environment steps skipped so far."""
        self._pending: list[tuple[torch.Tensor, torch.Tensor]] = []
        """Under ``stop``: each gradient step's loss and gradient norm since the last
        :meth:`check_updates`."""

    def step(self, step: int, rewards: Any, observations: Any) -> np.ndarray[Any, Any]:
        """Check a vector step; returns per environment whether its transition is finite.

        :raises NonFiniteError: a number is not finite, under ``stop``.
        """
        rows = len(rewards)
        if _surely_finite(rewards) and _surely_finite(observations):  # (nearly always)
            return _all_rows(rows)
        ok = finite_rows(rewards, rows)
        quantity = "reward"
        if ok.all():
            ok = finite_rows(observations, rows)
            quantity = "observation"
        if not ok.all():
            self.found(quantity, step)
        return ok

    def update(self, step: int, loss: torch.Tensor, grad_norm: torch.Tensor) -> bool:
        """Whether a gradient step may be applied: its loss and its gradient's total norm are
        finite.

        Under ``skip`` that costs a device sync per gradient step.  Under ``stop`` the answer
        is always yes: the flags are kept on the device and :meth:`check_updates` raises once
        per update, so training pays no sync per gradient step (what a non-finite step wrote
        into the weights is never saved: the run stops, and saves refuse such weights).

        Under ``skip``, a non-finite step is counted (:meth:`found`) and ``False`` returned.
        """
        if self.policy != "skip":
            # Kept as they are and checked together: no operation per gradient step.
            self._pending.append((loss.detach(), grad_norm.detach()))
            return True
        finite = torch.isfinite(torch.stack([loss.detach().sum(), grad_norm.detach()]))
        if bool(finite.all()):
            return True
        self.found("loss" if not bool(finite[0]) else "gradient", step)
        return False

    def check_updates(self, step: int) -> None:
        """After an update's gradient steps, under ``stop``: one device sync.

        :raises NonFiniteError: a loss or gradient of them was not finite.
        """
        if not self._pending:
            return
        pending, self._pending = self._pending, []
        losses = torch.stack([loss if loss.dim() == 0 else loss.sum() for loss, _ in pending])
        norms = torch.stack([norm.reshape(()) for _, norm in pending])
        finite = torch.isfinite(torch.stack([losses, norms])).all(dim=1).cpu()
        if not bool(finite.all()):
            self.found("loss" if not bool(finite[0]) else "gradient", step)

    def found(self, quantity: str, step: int) -> None:
        """A non-finite ``quantity`` at ``step``: raise, or count the skip.

        :raises NonFiniteError: under ``stop``.
        """
        if self.policy != "skip":
            raise NonFiniteError(
                quantity,
                self.behavior,
                step,
                f"the run stops, and nothing trained from it is saved. Check the environment "
                f"and the hyperparameters, or set behaviors.{self.behavior}.on_nonfinite: skip to "
                "skip such updates",
            )
        if not self.skipped:
            logger.warning(
                "behavior %s: non-finite %s at step %d; skipping it (on_nonfinite: skip), "
                "counted in %s",
                self.behavior,
                quantity,
                step,
                SKIPPED_STAT,
            )
        self.skipped += 1
        self.reporter.add_stat(SKIPPED_STAT, 1.0, StatsAggregationMethod.SUM)
