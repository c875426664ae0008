"""``self_play``: a behavior that plays against past versions of itself (ML-Agents' ghost
trainer), with ML-Agents' names and defaults (re-exported by :mod:`evtrain.trainers.settings`).

What the keys do is :mod:`evtrain.trainers.ghost`'s; here they are declared and range-checked.
``opponent_sampling`` and the ``pfsp_`` keys are evtrain's (prioritized fictitious self-play,
AlphaStar's): unset, a snapshot is drawn uniformly, as ML-Agents draws it; so is ``league``
(a main exploiter, AlphaStar's): unset, there is none; ``random_opponent_ratio``: unset,
no opponent plays at random; and ``scripted_opponents``: unset, none plays.
"""

from __future__ import annotations

from typing import Any, Literal

import attrs
from attrs import validators as v

from evtrain.evaluation.opponents import kind_of
from evtrain.trainers.network_settings import ABSENT_WHEN_NONE

_positive_int = [v.instance_of(int), v.gt(0)]


def _five_save_steps(instance: Any) -> int:
    # ML-Agents' default: team_change is five times save_steps (100,000 by default).
    return 5 * int(instance.save_steps)


def _one_exploiter(instance: Any, attribute: attrs.Attribute[int], value: int) -> None:
    if value != 1:
        raise ValueError(
            f"evtrain's league has one main exploiter, got {value}; set exploiters: 1, or "
            "remove league",
            attribute,
        )


def _scripted_specs(instance: Any, attribute: attrs.Attribute[list[str]], value: Any) -> None:
    if not isinstance(value, list):
        raise ValueError(
            f"expected a list of module:function players, got {value!r}",
            attribute,
        )
    for i, spec in enumerate(value):
        if not isinstance(spec, str) or kind_of(spec) != "callable":
            raise ValueError(
                f"item {i}: expected module:function (a scripted player, "
                f"function(observation, action_mask) -> action), got {spec!r}",
                attribute,
            )


def _scripted_ratio(instance: Any, attribute: attrs.Attribute[float], value: float) -> None:
    players = instance.scripted_opponents
    if value > 0 and not players:
        raise ValueError(
            f"{value} draws a scripted opponent, and scripted_opponents names none; list "
            "them (module:function), or remove the ratio",
            attribute,
        )
    if players and value == 0:
        raise ValueError(
            "0 (unset) never draws the scripted_opponents listed; set the share of draws that "
            "take one (e.g. scripted_opponent_ratio: 0.5), or remove scripted_opponents",
            attribute,
        )


@attrs.define(kw_only=True)
class LeagueSettings:
    """``self_play.league``: a main exploiter beside the behavior's policy (the main learner),
    AlphaStar's; what it does is :mod:`evtrain.trainers.ghost.league`'s."""

    exploiters: int = attrs.field(default=1, validator=[v.instance_of(int), _one_exploiter])
    """Main exploiters: one."""
    exploiter_ratio: float = attrs.field(default=0.25, validator=[v.ge(0.0), v.le(1.0)])
    """Probability that a draw of the main learner's opponent takes the exploiter as it is
    now (before ``play_against_latest_model_ratio`` and the window are considered)."""
    reset_steps: int = attrs.field(default=100000, validator=_positive_int)
    """The exploiter's steps after which it starts again from its initial weights."""
    win_threshold: float = attrs.field(default=0.7, validator=[v.gt(0.0), v.le(1.0)])
    """The exploiter's win rate against the main learner, over its games since its last
    reset, at which a snapshot of it joins the main learner's window and it starts again."""
    min_games: int = attrs.field(default=200, validator=_positive_int)
    """Games since its last reset before ``win_threshold`` is checked."""


@attrs.define(kw_only=True)
class SelfPlaySettings:
    """ML-Agents' ``self_play``: one team of the behavior learns while the others play
    snapshots of its policy, and an ELO rating follows its results."""

    save_steps: int = attrs.field(default=20000, validator=_positive_int)
    """Steps of the learning team between two snapshots of its policy."""
    team_change: int = attrs.field(
        default=attrs.Factory(_five_save_steps, takes_self=True), validator=_positive_int
    )
    """Steps of the learning team before the next team learns (ML-Agents' default: five
    times ``save_steps``)."""
    swap_steps: int = attrs.field(default=2000, validator=_positive_int)
    """Steps between two draws of the opponent's snapshot."""
    window: int = attrs.field(default=10, validator=_positive_int)
    """Snapshots kept; the oldest is replaced by each new one."""
    play_against_latest_model_ratio: float = attrs.field(
        default=0.5, validator=[v.ge(0.0), v.le(1.0)]
    )
    """Probability that a swap draws the learning policy as it is now, instead of a snapshot
    of the window (drawn as ``opponent_sampling`` says)."""
    random_opponent_ratio: float = attrs.field(default=0.0, validator=[v.ge(0.0), v.le(1.0)])
    """Probability that a draw takes an opponent whose actions ignore what it observes (the
    policy with every parameter zero: uniform over the legal moves of a discrete action), before
    anything else is considered.  evtrain's; 0 (ML-Agents): never.  Its games move no rating."""
    scripted_opponents: list[str] = attrs.field(factory=list, validator=_scripted_specs)
    """Scripted players (``module:function``, ``function(observation, action_mask) ->
    action``, as ``evaluation.opponents`` takes them) a draw may seat in the behavior's own
    copies instead of a policy (a game of two teams of it).  evtrain's; none unset."""
    scripted_opponent_ratio: float = attrs.field(
        default=0.0, validator=[v.ge(0.0), v.le(1.0), _scripted_ratio]
    )
    """Probability that a draw which did not take the random opponent takes one of
    ``scripted_opponents`` (uniformly), before the league's exploiter, the policy now and the
    window are considered.  Required with them; its games move no rating."""
    initial_elo: float = 1200.0
    """The ELO rating the policy and every snapshot start from."""
    opponent_sampling: Literal["uniform", "pfsp"] = attrs.field(
        default="uniform", validator=v.in_(("uniform", "pfsp"))
    )
    """How a snapshot of the window is drawn: ``uniform`` (ML-Agents), or ``pfsp``, weighted
    by how often the learning side beats each one
    (:func:`~evtrain.trainers.ghost.pfsp.pfsp_weights`)."""
    pfsp_weighting: Literal["hard", "variance"] = attrs.field(
        default="hard", validator=v.in_(("hard", "variance"))
    )
    """PFSP's weighting of a snapshot the learning side beats with probability ``x``:
    ``hard``, ``(1 - x) ** pfsp_exponent`` (the snapshots it loses to most); ``variance``,
    ``x * (1 - x)`` (the snapshots of its level)."""
    pfsp_exponent: float = attrs.field(default=2.0, validator=v.gt(0.0))
    """The ``p`` of the ``hard`` weighting."""
    pfsp_prior: float = attrs.field(default=0.5, validator=[v.ge(0.0), v.le(1.0)])
    """The win rate assumed against a snapshot not played yet: its estimate starts as one
    game of this score."""
    league: LeagueSettings | None = attrs.field(default=None, metadata=ABSENT_WHEN_NONE)
    """A main exploiter trained against the policy (:class:`LeagueSettings`); none unset."""
