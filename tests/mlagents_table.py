"""The table of every ML-Agents trainer key and what evtrain does with it (docs/ml-agents.md),
read for the tests of keys and of ML-Agents' sample configs."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import attrs


def table_rows() -> list[tuple[str, str | None, str]]:
    text = DOCS.read_text()
    section = text[text.index("## Every ML-Agents key") :]
    section = section[: section.index("\n## ")]
    rows = [ROW.match(line) for line in section.splitlines() if line.startswith("| `")]
    assert all(rows), "every row starts with a key in backticks"
    return [(m["key"], m["trainer"], m["status"]) for m in rows if m]


def how_evtrain_treats(key: str, trainer: str | None) -> str:
    """``yes``, or the kind of the key (or of the nearest key above it) in evtrain's table of
    ML-Agents options; fails for a key evtrain would call unknown."""
    from evtrain.config.mlagents import Kind, kind_of

    names = {Kind.UNSUPPORTED: "not yet", Kind.DEPRECATED: "deprecated"}
    parts = key.split(".")
    for end in range(len(parts), 0, -1):
        section, name = ".".join(parts[: end - 1]), parts[end - 1]
        classes = section_classes(section, trainer)
        if classes is None:
            continue
        for cls in classes:
            kind = kind_of(cls, name)
            if kind is not None:
                return names[kind]
        if end == len(parts) and any(name in attrs.fields_dict(cls) for cls in classes):
            return "yes"
    raise AssertionError(f"{key}: unknown to evtrain")


DOCS = Path(__file__).parents[1] / "docs/configuration.md"


ROW = re.compile(r"^\| `(?P<key>[^`]+)`(?: \((?P<trainer>PPO|SAC)\))? \| (?P<status>[^|]+?) \|")


def section_classes(section: str, trainer: str | None) -> tuple[type[Any], ...] | None:
    """The evtrain options classes a YAML section is structured as (``None``: not one)."""
    from evtrain.config import environment_parameters as ep
    from evtrain.config import options
    from evtrain.trainers import settings

    behavior = "behaviors.<name>"
    param = "environment_parameters.<param>"
    hyperparameters = settings.SACSettings if trainer == "SAC" else settings.PPOSettings
    return {
        "": (options.RunOptions,),
        "env_settings": (options.EnvironmentSettings,),
        "engine_settings": (options.EngineSettings,),
        "checkpoint_settings": (options.CheckpointSettings,),
        "torch_settings": (options.TorchSettings,),
        behavior: (settings.TrainerSettings,),
        f"{behavior}.hyperparameters": (hyperparameters,),
        f"{behavior}.network_settings": (settings.NetworkSettings,),
        f"{behavior}.network_settings.memory": (settings.MemorySettings,),
        f"{behavior}.reward_signals": (settings.RewardProviders,),
        f"{behavior}.reward_signals.extrinsic": (settings.RewardProviderSettings,),
        f"{behavior}.reward_signals.curiosity": (settings.CuriositySettings,),
        f"{behavior}.reward_signals.rnd": (settings.RNDSettings,),
        f"{behavior}.reward_signals.gail": (settings.GAILSettings,),
        **{
            f"{behavior}.reward_signals.{signal}.network_settings": (settings.NetworkSettings,)
            for signal in ("extrinsic", "curiosity", "rnd", "gail")
        },
        f"{behavior}.behavioral_cloning": (settings.BehavioralCloningSettings,),
        f"{behavior}.self_play": (settings.SelfPlaySettings,),
        f"{behavior}.self_play.league": (settings.LeagueSettings,),
        param: (ep.SamplerSpec, ep.EnvironmentParameter),
        f"{param}.sampler_parameters": tuple(ep.SAMPLERS.values()),
        f"{param}.curriculum.<i>": (ep.Lesson,),
        f"{param}.curriculum.<i>.completion_criteria": (ep.CompletionCriteria,),
    }.get(section)
