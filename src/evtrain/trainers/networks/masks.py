"""Discrete action masks (ML-Agents' masking; PettingZoo's ``action_mask``): which actions a
policy may take in each state.

An environment says so with a ``Dict`` observation part keyed ``action_mask``
(:data:`~evtrain.trainers.observations.MASK_KEY`): a ``Box`` of one entry per action, 1 where
the action is allowed, 0 where it is masked.  The part stays in the observation row the
trainers store (:mod:`evtrain.trainers.observations`), so rollouts, replay buffers and the
exported policy's inputs carry it as they carry every other part, but no network takes it as
a feature and no normaliser touches it: the policies read it from the row and

* set the logits of masked actions to :data:`MASKED_LOGIT` (:func:`masked_logits`), so the
  masked distribution's probabilities of them are exactly 0 in float32 and its log-probability
  and entropy are those of the distribution over the allowed actions, as in ML-Agents;
* never sample a masked action (:func:`masked_scores` takes them out of the Gumbel-max draw
  outright, whatever the noise);
* treat a row whose entries are all 0 as all allowed (:func:`allowed`): PettingZoo gives an
  all-zero mask to an agent that is not to move, whose action is then ignored.

``-1e8`` rather than ``-inf``: a probability of 0 times a log-probability of ``-inf`` is NaN in
the entropy, times ``-1e8`` it is 0, and the gradient of a filled logit is 0 either way.
"""

from __future__ import annotations

import torch

MASKED_LOGIT = -1.0e8
"""What a masked action's logit becomes (ML-Agents' ``-1e8``)."""


def allowed(mask: torch.Tensor) -> torch.Tensor:
    """The boolean ``[..., n]`` allowed actions of raw mask entries ``mask`` (1 allowed, 0
    masked; above one half counts as 1), a row of zeros as all allowed."""
    ok = mask > 0.5
    return ok | ~ok.any(-1, keepdim=True)


def allowed_in(rows: torch.Tensor, columns: slice | None) -> torch.Tensor | None:
    """:func:`allowed` of the mask in ``columns`` of observation rows ``rows`` (any leading
    dimensions; :attr:`~evtrain.trainers.observations.ObservationLayout.mask`); ``None``
    without a mask."""
    return None if columns is None else allowed(rows[..., columns])


def masked_logits(logits: torch.Tensor, ok: torch.Tensor | None) -> torch.Tensor:
    """``logits`` with the masked actions' (``~ok``) set to :data:`MASKED_LOGIT`; as they are
    without a mask."""
    if ok is None:
        return logits
    return logits.masked_fill(~ok, MASKED_LOGIT)


def masked_scores(scores: torch.Tensor, ok: torch.Tensor | None) -> torch.Tensor:
    """Gumbel-max scores (``log p - log(Exponential noise)``) with the masked actions' at
    ``-inf``, so an ``argmax`` never picks one, even where the noise is 0 (a score of
    ``+inf``)."""
    if ok is None:
        return scores
    return scores.masked_fill(~ok, float("-inf"))
