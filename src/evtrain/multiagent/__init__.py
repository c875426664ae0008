"""PettingZoo environments for evtrain's trainers: agents mapped to behaviors, and each
behavior's copies of the environment as one Gymnasium vector environment of agent slots
(:class:`~evtrain.multiagent.slots.AgentSlots`).

A layer between ``world`` and ``trainers``: it knows Gymnasium and PettingZoo, never the
config or the run.  :mod:`evtrain.multiagent.mapping` imports nothing heavy (the config layer
validates ``env_settings.agent_behaviors`` with it); the rest is imported on first attribute
access, and PettingZoo only when an environment is asked whether it is one.
"""

from __future__ import annotations

import importlib
from typing import Any

_LAZY = {
    "AgentSlots": "evtrain.multiagent.slots",
    "EpisodeResult": "evtrain.multiagent.copies",
    "CoPlayer": "evtrain.multiagent.coplayers",
    "RandomCoPlayer": "evtrain.multiagent.coplayers",
    "api_of": "evtrain.multiagent.slots",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'evtrain.multiagent' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)


__all__ = ["AgentSlots", "CoPlayer", "EpisodeResult", "RandomCoPlayer", "api_of"]
