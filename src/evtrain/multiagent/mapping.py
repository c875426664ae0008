"""Which behavior, and which team, each agent of a PettingZoo environment belongs to.

An agent's behavior is named by ``env_settings.agent_behaviors`` (``{agent_id: "behavior"}``,
or ML-Agents' ``"behavior?team=N"``), else by its id without the ``_<digits>`` PettingZoo
numbers agents with (``player_0`` -> ``player``, ``adversary_1`` -> ``adversary``; an id
without such a suffix is its own behavior).  Teams matter to self-play only: a behavior with
``self_play`` and no ``?team=`` on its agents makes each agent its own team, numbered by its
index among the behavior's agents.  Everything here is plain Python: the config layer uses it
to validate ``agent_behaviors`` without importing PettingZoo.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Iterable, Mapping, Sequence

import attrs

from evtrain.errors import ConfigError

AGENT_BEHAVIORS = "env_settings.agent_behaviors"
"""The option's path, as errors name it."""

_SUFFIX = re.compile(r"_\d+$")
_SPEC = re.compile(r"^(?P<behavior>[^?]+?)(?:\?team=(?P<team>\d+))?$")


def default_behavior(agent: str) -> str:
    """``agent`` without a trailing ``_<digits>`` (``player_0`` -> ``player``)."""
    return _SUFFIX.sub("", agent) or agent


def parse_behavior(spec: str) -> tuple[str, int | None]:
    """``"behavior"`` -> ``("behavior", None)``, ``"behavior?team=1"`` -> ``("behavior", 1)``.

    :raises ValueError: ``spec`` is neither form.
    """
    match = _SPEC.match(spec)
    if match is None:
        raise ValueError(f"expected 'behavior' or 'behavior?team=N' (N = 0, 1, ...), got {spec!r}")
    team = match.group("team")
    return match.group("behavior"), None if team is None else int(team)


def spec_problem(agent: str, spec: object) -> str | None:
    """What is wrong with the ``agent_behaviors`` entry ``agent: spec``, or ``None``."""
    if not isinstance(spec, str):
        return f"{agent!r}: expected a behavior name (a string), got {spec!r}"
    try:
        parse_behavior(spec)
    except ValueError as error:
        return f"{agent!r}: {error}"
    return None


@attrs.frozen(kw_only=True)
class AgentRole:
    """Where one agent belongs."""

    behavior: str
    team: int
    """Its team within the behavior (0 when the behavior has no teams)."""


def agent_roles(
    agents: Sequence[str],
    agent_behaviors: Mapping[str, str],
    self_play: Collection[str] = (),
) -> dict[str, AgentRole]:
    """Every agent's role, in ``agents``' order (an environment's ``possible_agents``).

    :param self_play: the behaviors that train with ``self_play``: their agents without a
        ``?team=`` are each a team of their own.
    :raises ConfigError: ``agent_behaviors`` names an agent the environment does not have, or
        mixes agents with and without ``?team=`` in one behavior.
    """
    unknown = sorted(set(agent_behaviors) - set(agents))
    if unknown:
        raise ConfigError(
            [
                f"{AGENT_BEHAVIORS}: no agent {', '.join(map(repr, unknown))} in the "
                f"environment; its agents are {', '.join(agents)}"
            ]
        )
    parsed = {a: parse_behavior(agent_behaviors.get(a, default_behavior(a))) for a in agents}
    roles: dict[str, AgentRole] = {}
    for behavior in _unique(b for b, _ in parsed.values()):
        members = [a for a in agents if parsed[a][0] == behavior]
        teams = [parsed[a][1] for a in members]
        if None in teams and any(t is not None for t in teams):
            raise ConfigError(
                [
                    f"{AGENT_BEHAVIORS}: agents {', '.join(members)} of behavior {behavior!r} "
                    "give a ?team= for some agents only; give every one of them a team "
                    f"('{behavior}?team=N'), or none"
                ]
            )
        for index, (agent, team) in enumerate(zip(members, teams, strict=True)):
            if team is None:
                team = index if behavior in self_play else 0
            roles[agent] = AgentRole(behavior=behavior, team=team)
    return {a: roles[a] for a in agents}


def check_behaviors(roles: Mapping[str, AgentRole], behaviors: Collection[str]) -> None:
    """Every behavior of ``behaviors:`` has agents, and every agent's behavior has settings.

    :raises ConfigError: one line per problem, naming the agents, the keys and the fix.
    """
    found = _unique(r.behavior for r in roles.values())
    problems = []
    for behavior in found:
        if behavior not in behaviors:
            agents = [a for a, r in roles.items() if r.behavior == behavior]
            problems.append(
                f"behaviors: agents {', '.join(agents)} of the environment belong to behavior "
                f"{behavior!r}, which has no settings; add behaviors.{behavior}, or map the "
                f"agents to behaviors that have settings with {AGENT_BEHAVIORS} "
                f"(behaviors: {', '.join(behaviors)})"
            )
    for behavior in behaviors:
        if behavior not in found:
            problems.append(
                f"behaviors.{behavior}: no agent of the environment belongs to behavior "
                f"{behavior!r} (agents: {', '.join(roles)}, behaviors by default their id "
                f"without _<digits>: {', '.join(found)}); rename the behavior, or map agents "
                f"to it with {AGENT_BEHAVIORS} (e.g. {{{next(iter(roles))}: {behavior}}})"
            )
    if problems:
        raise ConfigError(problems)


def _unique(items: Iterable[str]) -> list[str]:
    return list(dict.fromkeys(items))
