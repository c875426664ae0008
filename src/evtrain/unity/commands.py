"""What evtrain sends a build: the handshake's answer and the commands, as messages.

Each command (``RESET``, ``STEP``) carries the side channels' messages; a ``STEP`` carries the
actions of each behavior's agents that asked for a decision, one ``AgentActionProto`` each in
the order of their decision steps (zeros for a behavior whose actions were not set).  A build
older than API 1.3 reads them from the deprecated ``vector_actions_deprecated`` field.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from evtrain._version import __version__
from evtrain.unity import schema
from evtrain.unity.specs import BehaviorSpec
from evtrain.unity.steps import ActionTuple, DecisionSteps, TerminalSteps

__all__ = ["API_VERSION", "command", "init_reply", "step_message"]

API_VERSION = "1.5.0"
"""The communication API evtrain speaks: that of com.unity.ml-agents 2.x to 4.x."""


def init_reply(seed: int, num_areas: int, capabilities: Sequence[str]) -> Any:
    """The answer to a build's first message: evtrain's versions and ``capabilities``."""
    reply = schema.UnityMessageProto()
    reply.header.status = 200
    init = reply.unity_input.rl_initialization_input
    init.seed = seed
    init.communication_version = API_VERSION
    init.package_version = __version__
    init.num_areas = num_areas
    for name in capabilities:
        setattr(init.capabilities, name, True)
    return reply


def command(name: str, side_channel: bytes) -> Any:
    """A command (``"RESET"``, ``"STEP"``) with the side channels' framed messages."""
    message = schema.UnityMessageProto()
    message.header.status = 200
    rl_input = message.unity_input.rl_input
    rl_input.command = schema.CommandProto[name]
    rl_input.side_channel = side_channel
    return message


def step_message(
    latest: Mapping[str, tuple[DecisionSteps, TerminalSteps]],
    actions: Mapping[str, ActionTuple],
    specs: Mapping[str, BehaviorSpec],
    side_channel: bytes,
    *,
    deprecated: bool = False,
) -> Any:
    """A ``STEP`` with ``actions`` for the agents of ``latest``'s decision steps."""
    message = command("STEP", side_channel)
    agent_actions = message.unity_input.rl_input.agent_actions
    for name, (decisions, _) in latest.items():
        n = len(decisions)
        if n == 0:
            continue
        chosen = actions.get(name)
        if chosen is None:
            chosen = ActionTuple.zeros(specs[name].action_spec, n)
        continuous = chosen.continuous.tolist()
        discrete = chosen.discrete.tolist()
        value = agent_actions[name].value
        for i in range(n):
            c = continuous[i] if continuous else ()
            d = discrete[i] if discrete else ()
            if deprecated:
                value.add(vector_actions_deprecated=[*c, *d])
            else:
                value.add(continuous_actions=c, discrete_actions=d)
    return message
