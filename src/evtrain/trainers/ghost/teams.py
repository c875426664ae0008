"""Which environments self-play can play: what the ghost controller needs of a behavior's
environments (:class:`TeamSlots`, what ``AgentSlots`` offers), and the check that its
self-playing agents form exactly two teams.

Two forms pass (:func:`team_slots`): the behavior's agents form both teams (SoccerTwos, a board
game's two players), or they form one team and another self-playing behavior's agents the
other (ML-Agents' asymmetric self-play: Strikers against a Goalie).  More than two teams, one
team without a second to play, and a team of two behaviors are refused.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Protocol

from evtrain.errors import ConfigError


class EpisodeOutcome(Protocol):
    """How a copy's episode ended for its learning team (``AgentSlots``' ``EpisodeResult``)."""

    @property
    def team(self) -> int | None: ...
    @property
    def reward(self) -> float: ...


class TeamSlots(Protocol):
    """What self-play needs of a behavior's environments (``AgentSlots``)."""

    teams: list[int]
    learning_team: int | None
    co_players: dict[str, Callable[[Any], Any]]
    episode_listeners: list[Callable[[Any], None]]

    def set_learning_team(self, team: int) -> None: ...


def self_play_teams(behavior: str, envs: Any) -> dict[int, list[str]]:
    """Every self-play team of the environment and the self-playing behaviors of its agents:
    ``AgentSlots.self_play_teams``, else (environments that know only their own behavior) the
    behavior's teams."""
    found: Mapping[int, list[str]] | None = getattr(envs, "self_play_teams", None)
    if found is None:
        return {team: [behavior] for team in envs.teams}
    return dict(found)


def rivals(envs: Any) -> list[str]:
    """The other self-playing behaviors whose team plays against the behavior's one team in
    its environments (``AgentSlots.rivals``; none for a behavior of two teams)."""
    return list(getattr(envs, "rivals", ()))


def team_slots(behavior: str, envs: Any) -> TeamSlots:
    """``envs`` as the environments of a self-playing behavior.

    :raises ConfigError: they are not a multi-agent environment's, or its self-playing agents
        do not form exactly two teams, each of one behavior.
    """
    key = f"behaviors.{behavior}.self_play"
    if getattr(envs, "teams", None) is None:
        raise ConfigError(
            [
                f"{key}: self-play needs a multi-agent (PettingZoo) environment whose agents of "
                f"behavior {behavior!r} form two teams; this environment has one agent (a "
                "Gymnasium environment): remove self_play, or train a PettingZoo environment"
            ]
        )
    teams = self_play_teams(behavior, envs)
    for team, names in teams.items():
        if len(names) > 1:
            raise ConfigError(
                [
                    f"{key}: team {team} holds agents of self-playing behaviors "
                    f"{' and '.join(map(repr, names))}; a self-play team is the agents of one "
                    "behavior: give the behaviors different teams with env_settings."
                    f"agent_behaviors ('{names[0]}?team=0', '{names[1]}?team=1'), or map the "
                    "agents to one behavior"
                ]
            )
    if len(teams) != 2:
        listed = ", ".join(f"team {team}: {' and '.join(names)}" for team, names in teams.items())
        raise ConfigError(
            [
                f"{key}: the self-playing agents of the environment form {len(teams)} team(s) "
                f"({listed}); evtrain's self-play plays exactly two teams against each other "
                "(ML-Agents' ELO rates two): with env_settings.agent_behaviors, make them two "
                f"teams of the behavior ('{behavior}?team=0', '{behavior}?team=1'), or a team "
                f"of it against a team of another behavior with self_play ('{behavior}?team=0', "
                "'<other>?team=1'); or remove self_play"
            ]
        )
    return envs  # type: ignore[no-any-return]
