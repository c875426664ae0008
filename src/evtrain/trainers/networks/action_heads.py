"""How a policy's output layer reads as actions, for every action space the on-policy
trainers learn (PPO, POCA, MAPPO and their recurrent and exported policies):

* ``Box``: a diagonal Gaussian (:func:`~evtrain.trainers.networks.policies.sample_action`);
* ``Discrete(n)``: one categorical of ``n`` logits;
* ``MultiDiscrete([n_1, ..., n_k])`` (ML-Agents' discrete branches, e.g. SoccerTwos' three
  branches of three): one independent categorical per branch, ``sum n_b`` logits side by side;
* the **hybrid** ``Dict({"continuous": Box(-1, 1, (c,)), "discrete": MultiDiscrete(...)})``
  (ML-Agents' hybrid actions, the order of ``ActionSpec``): ``c`` Gaussian means, then the
  branches' logits.

An action as the trainers store it (rollouts, checkpoints of nothing but weights) and as the
policy modules return it is one tensor per batch row: a ``Discrete``'s index ``[B]`` (int64),
a ``Box``'s values ``[B, c]``, a ``MultiDiscrete``'s indices ``[B, k]`` (int64), and a hybrid
action's ``[B, c + k]`` float32 row: the ``c`` continuous values, then the ``k`` indices
(exact in float32).  :func:`to_env` turns the last into the ``{"continuous", "discrete"}``
dict of arrays a vector environment takes.

The log-probability of a joint action is the sum of its parts' (the Gaussian's dimensions and
each branch's categorical: they are independent), the entropy likewise the sum, as ML-Agents'
``ActionModel`` sums its entropies.  (ML-Agents' PPO takes a ratio per column of its
log-probabilities; evtrain's takes the ratio of the joint probabilities, as it does for the
dimensions of a ``Box``.)

Action masks (:mod:`evtrain.trainers.networks.masks`) hold one entry per action of every
branch (``sum n_b``, the branches' masks concatenated, 1 allowed); a branch whose entries
are all 0 counts as all allowed.  :meth:`ActionHeads.allowed` widens them to the output
layer's width, the continuous columns always allowed, so one ``masked_logits`` serves all.

**For exporters.** The policy modules
(:class:`~evtrain.trainers.networks.policies.DeterministicPolicy`, its sampling subclass and
:class:`~evtrain.trainers.networks.recurrent.RecurrentPolicy`) carry their ``heads``: an
exporter of ML-Agents' contract reads ``heads.kind``, ``heads.continuous`` and
``heads.branches`` and splits the one action tensor: ``[:, :continuous]`` are the continuous
actions (clipped), ``[:, continuous:]`` each branch's index (a ``Discrete``'s ``[B]`` is one
branch).

``Box`` and ``Discrete`` take exactly the operations they always took (``ActionHeads`` hands
them to :func:`~evtrain.trainers.networks.policies.sample_action` and
:func:`~evtrain.trainers.networks.policies.score_actions`), so their numbers do not change.
"""

from __future__ import annotations

import math
from typing import Any, Literal

import attrs
import numpy as np
import numpy.typing as npt
import torch
from gymnasium import spaces

from evtrain.errors import SpaceMismatchError
from evtrain.trainers.networks.masks import allowed, masked_scores

CONTINUOUS_KEY = "continuous"
"""A hybrid action space's ``Box`` key (ML-Agents' ``ActionTuple.continuous``)."""
DISCRETE_KEY = "discrete"
"""A hybrid action space's ``MultiDiscrete`` key (ML-Agents' ``ActionTuple.discrete``)."""

Kind = Literal["box", "discrete", "multi_discrete", "hybrid"]

_LOG_SQRT_2PI = 0.5 * math.log(2.0 * math.pi)


def sample_action(
    out: torch.Tensor,
    log_std: torch.Tensor,
    discrete: bool,
    generator: torch.Generator,
    ok: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Sample from the policy's output layer ``out``: ``(action, log_prob)``.

    ``Discrete``: ``out`` are logits (masked already where there is a mask); ``Box``: the
    Gaussian's mean, ``log_std`` its log standard deviation.

    :param ok: the allowed actions (:func:`~evtrain.trainers.networks.masks.allowed`), never
        to be sampled otherwise; ``None``: all.
    """
    if discrete:
        log_probs = torch.log_softmax(out, dim=-1)
        # Gumbel-max: argmax(log p + Gumbel noise) is an exact sample of Categorical(p),
        # cheaper than torch.multinomial on small batches.  Gumbel = -log(Exponential(1)).
        noise = torch.empty_like(log_probs).exponential_(generator=generator)
        action = masked_scores(log_probs - noise.log(), ok).argmax(-1, keepdim=True)
        return action.squeeze(-1), log_probs.gather(-1, action).squeeze(-1)
    noise = torch.randn(out.shape, generator=generator, device=out.device, dtype=out.dtype)
    action = out + log_std.exp() * noise
    log_prob = (-0.5 * noise.square() - log_std - _LOG_SQRT_2PI).sum(-1)
    return action, log_prob


def score_actions(
    out: torch.Tensor,
    log_std: torch.Tensor,
    discrete: bool,
    action: torch.Tensor,
    entropy: bool,
    entropy_grad: bool,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """``(log_prob, entropy)`` of taken actions under the policy's output layer ``out``
    (see :meth:`ActorCritic.evaluate` for the flags)."""
    if discrete:
        log_probs = torch.log_softmax(out, dim=-1)
        log_prob = log_probs.gather(-1, action.unsqueeze(-1)).squeeze(-1)
        ent = None
        if entropy:
            with torch.set_grad_enabled(entropy_grad and torch.is_grad_enabled()):
                ent = -(log_probs.exp() * log_probs).sum(-1)
        return log_prob, ent
    z = (action - out) * torch.exp(-log_std)
    log_prob = (-0.5 * z.square() - log_std - _LOG_SQRT_2PI).sum(-1)
    ent = (0.5 + _LOG_SQRT_2PI + log_std).sum().expand(out.shape[0]) if entropy else None
    return log_prob, ent


@attrs.frozen
class ActionHeads:
    """The parts of an action space as a policy's output layer holds them (see the module's
    docs); :func:`action_heads` builds it from a space."""

    kind: Kind
    """Which of the four spaces."""
    continuous: int
    """Width of the Gaussian (0: none)."""
    branches: tuple[int, ...]
    """Each categorical branch's number of actions (empty for a ``Box``)."""

    @property
    def width(self) -> int:
        """Width of the policy's output layer: the means, then every branch's logits."""
        return self.continuous + sum(self.branches)

    @property
    def written_out(self) -> bool:
        """``Box`` or ``Discrete``: the operations of :mod:`~.policies` (and PPO's hand-written
        gradients, :mod:`evtrain.trainers.ppo.gradients`) apply as they are."""
        return self.kind in ("box", "discrete")

    @property
    def action_width(self) -> int:
        """Columns of a stored action ``[B, action_width]`` (a ``Discrete``'s is ``[B]``:
        1)."""
        return self.continuous + len(self.branches) if self.kind != "discrete" else 1

    @property
    def feature_width(self) -> int:
        """Width of :meth:`features`: what a critic that sees actions takes of one."""
        return self.width

    # -- masks -------------------------------------------------------------------------------

    def allowed(self, mask: torch.Tensor) -> torch.Tensor:
        """The boolean allowed columns ``[..., width]`` of the output layer, from raw mask
        entries ``[..., sum n_b]`` (each branch's all-zero entries: all allowed; the
        continuous columns: always)."""
        if self.kind == "discrete":
            return allowed(mask)
        ok = torch.cat([allowed(part) for part in torch.split(mask, list(self.branches), -1)], -1)
        if self.continuous:
            ok = torch.cat([ok.new_ones((*ok.shape[:-1], self.continuous)), ok], -1)
        return ok

    # -- the distribution --------------------------------------------------------------------

    def sample(
        self,
        out: torch.Tensor,
        log_std: torch.Tensor,
        generator: torch.Generator,
        ok: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``(action, log_prob)`` drawn from output layer ``out`` (logits masked already);
        never an action ``ok`` leaves out."""
        if self.written_out:
            return sample_action(out, log_std, self.kind == "discrete", generator, ok)
        mean, logits = out[..., : self.continuous], out[..., self.continuous :]
        ok_logits = None if ok is None else ok[..., self.continuous :]
        indices, log_prob = [], out.new_zeros(out.shape[:-1])
        for part, part_ok in zip(
            torch.split(logits, list(self.branches), -1), self._split(ok_logits), strict=True
        ):
            log_probs = torch.log_softmax(part, dim=-1)
            # Gumbel-max, as a Discrete samples (see sample_action)
            noise = torch.empty_like(log_probs).exponential_(generator=generator)
            index = masked_scores(log_probs - noise.log(), part_ok).argmax(-1, keepdim=True)
            indices.append(index)
            log_prob = log_prob + log_probs.gather(-1, index).squeeze(-1)
        discrete = torch.cat(indices, -1)
        if self.kind == "multi_discrete":
            return discrete, log_prob
        noise = torch.randn(mean.shape, generator=generator, device=out.device, dtype=out.dtype)
        continuous = mean + log_std.exp() * noise
        log_prob = log_prob + (-0.5 * noise.square() - log_std - _LOG_SQRT_2PI).sum(-1)
        return torch.cat([continuous, discrete.to(continuous.dtype)], -1), log_prob

    def score(
        self,
        out: torch.Tensor,
        log_std: torch.Tensor,
        action: torch.Tensor,
        entropy: bool,
        entropy_grad: bool,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """``(log_prob, entropy)`` of taken actions under output layer ``out`` (the flags as
        :meth:`~evtrain.trainers.networks.policies.ActorCritic.evaluate` takes them)."""
        if self.written_out:
            discrete = self.kind == "discrete"
            return score_actions(out, log_std, discrete, action, entropy, entropy_grad)
        c = self.continuous
        indices = action[..., c:].long()
        log_prob, ent = out.new_zeros(out.shape[:-1]), out.new_zeros(out.shape[:-1])
        for i, part in enumerate(torch.split(out[..., c:], list(self.branches), -1)):
            log_probs = torch.log_softmax(part, dim=-1)
            log_prob = log_prob + log_probs.gather(-1, indices[..., i : i + 1]).squeeze(-1)
            if entropy:
                with torch.set_grad_enabled(entropy_grad and torch.is_grad_enabled()):
                    ent = ent - (log_probs.exp() * log_probs).sum(-1)
        if c:
            z = (action[..., :c] - out[..., :c]) * torch.exp(-log_std)
            log_prob = log_prob + (-0.5 * z.square() - log_std - _LOG_SQRT_2PI).sum(-1)
            if entropy:
                ent = ent + (0.5 + _LOG_SQRT_2PI + log_std).sum()
        return log_prob, ent if entropy else None

    def mode(self, out: torch.Tensor) -> torch.Tensor:
        """The most likely action of output layer ``out`` (masked already): the means and
        each branch's argmax (an ``argmax`` per branch)."""
        if self.kind == "discrete":
            return out.argmax(-1)
        if self.kind == "box":
            return out
        c = self.continuous
        parts = torch.split(out[..., c:], list(self.branches), -1)
        # argmax kept 2-D and concatenated: ONNX opset 9 (ML-Agents' export) loses the rank of
        # a stack of 1-D argmaxes beside the means
        discrete = torch.cat([part.argmax(-1, keepdim=True) for part in parts], -1)
        if self.kind == "multi_discrete":
            return discrete
        return torch.cat([out[..., :c], discrete.to(out.dtype)], -1)

    def features(self, action: torch.Tensor) -> torch.Tensor:
        """Stored actions ``[..., action_width]`` (``[...]`` for a ``Discrete``) as a critic
        sees them, ``[..., width]`` float32: the continuous values, then each branch's
        one-hot."""
        if self.kind == "box":
            return action.reshape(*action.shape[: action.ndim - 1], self.continuous)
        if self.kind == "discrete":
            return torch.nn.functional.one_hot(action.long(), self.branches[0]).to(torch.float32)
        c = self.continuous
        parts = [action[..., :c].to(torch.float32)]
        for i, n in enumerate(self.branches):
            one_hot = torch.nn.functional.one_hot(action[..., c + i].long(), n)
            parts.append(one_hot.to(torch.float32))
        return torch.cat(parts, -1)

    def _split(self, ok: torch.Tensor | None) -> list[torch.Tensor | None]:
        if ok is None:
            return [None] * len(self.branches)
        return list(torch.split(ok, list(self.branches), -1))


def action_heads(space: spaces.Space[Any]) -> ActionHeads:
    """The :class:`ActionHeads` of an action space.

    :raises SpaceMismatchError: none of ``Box``, ``Discrete`` (starting at 0),
        ``MultiDiscrete`` (one dimension, starting at 0) or the hybrid ``Dict`` of the
        module's docs.
    """
    if isinstance(space, spaces.Box):
        return ActionHeads("box", int(np.prod(space.shape)), ())
    if isinstance(space, spaces.Discrete):
        return ActionHeads("discrete", 0, (int(space.n),))
    if isinstance(space, spaces.MultiDiscrete):
        return ActionHeads("multi_discrete", 0, _branches(space))
    if isinstance(space, spaces.Dict) and set(space.spaces) == {CONTINUOUS_KEY, DISCRETE_KEY}:
        box, branches = space.spaces[CONTINUOUS_KEY], space.spaces[DISCRETE_KEY]
        if (
            isinstance(box, spaces.Box)
            and len(box.shape) == 1
            and isinstance(branches, spaces.MultiDiscrete)
        ):
            return ActionHeads("hybrid", int(box.shape[0]), _branches(branches))
    raise SpaceMismatchError(
        "the on-policy trainers take a Box, Discrete, MultiDiscrete or hybrid "
        f"Dict({CONTINUOUS_KEY}=Box, {DISCRETE_KEY}=MultiDiscrete) action space, got {space}"
    )


def _branches(space: spaces.MultiDiscrete) -> tuple[int, ...]:
    if space.nvec.ndim != 1 or np.any(space.start != 0):
        raise SpaceMismatchError(
            f"a MultiDiscrete action space must be one dimension of branches starting at 0 "
            f"(ML-Agents' discrete branches), got {space}"
        )
    return tuple(int(n) for n in space.nvec)


def to_env(space: spaces.Space[Any], actions: npt.NDArray[Any]) -> Any:
    """A batch of actions as the policies give them (see the module's docs) as a vector
    environment of ``space`` takes them: a hybrid ``Dict``'s as ``{"continuous": [B, c]
    float32, "discrete": [B, k] int64}``, any other as it is."""
    if not isinstance(space, spaces.Dict):
        return actions
    c = int(space.spaces[CONTINUOUS_KEY].shape[0])  # type: ignore[index]
    return {
        CONTINUOUS_KEY: np.ascontiguousarray(actions[:, :c], dtype=np.float32),
        DISCRETE_KEY: actions[:, c:].astype(np.int64),
    }
