"""``env_settings`` and ``engine_settings``: what a run trains on.

A run trains on a Gymnasium or PettingZoo environment (``env_id``), or on a Unity build
(``env_path``, ML-Agents' key), or in the Unity Editor (``base_port: 5004`` without
``env_path``, ML-Agents' Editor port).  The Unity keys are ML-Agents' own, with its defaults
(``mlagents/trainers/settings.py`` and ``cli_utils.py``): ``env_args``, ``base_port``,
``num_areas``, ``timeout_wait``, ``max_lifetime_restarts``, ``restarts_rate_limit_n``,
``restarts_rate_limit_period_s``, and the ``engine_settings`` section sent to every build
through the engine configuration side channel.
"""

from __future__ import annotations

import math
from typing import Any, Literal

import attrs

from evtrain.multiagent.mapping import spec_problem
from evtrain.trainers.limits import MAX_NUM_ENVS, MAX_SEED, at_most

BUILD_PORT = 5005
"""ML-Agents' ``BASE_ENVIRONMENT_PORT``: build instance ``i`` connects to ``base_port + i``."""
EDITOR_PORT = 5004
"""ML-Agents' ``DEFAULT_EDITOR_PORT``: the Unity Editor in Play mode connects here."""
MAX_PORT = 65535


# Validators raise (message, attribute), as attrs' own do: the attribute is the key in the path.
def positive(_: Any, attribute: attrs.Attribute[Any], value: int) -> None:
    """An integer of at least 1."""
    if value < 1:
        raise ValueError(f"expected an integer of at least 1, got {value}", attribute)


def seconds(_: Any, attribute: attrs.Attribute[Any], value: float) -> None:
    """A number of seconds above 0."""
    if not value > 0:
        raise ValueError(f"expected a number of seconds above 0, got {value}", attribute)


def finite_seconds(_: Any, attribute: attrs.Attribute[Any], value: float) -> None:
    """A finite number of seconds above 0."""
    if not (math.isfinite(value) and value > 0):
        raise ValueError(f"expected a finite number of seconds above 0, got {value}", attribute)


def _above_zero(_: Any, attribute: attrs.Attribute[Any], value: float) -> None:
    if not (math.isfinite(value) and value > 0):
        raise ValueError(f"expected a finite number above 0, got {value}", attribute)


def _natural(_: Any, attribute: attrs.Attribute[Any], value: int) -> None:
    if value < 0:
        raise ValueError(f"expected an integer of at least 0, got {value}", attribute)


def _limit(_: Any, attribute: attrs.Attribute[Any], value: int) -> None:
    if value < -1:
        raise ValueError(
            f"expected an integer of at least 0, or -1 for no limit, got {value}", attribute
        )


def _port(_: Any, attribute: attrs.Attribute[Any], value: int) -> None:
    if not 1 <= value <= MAX_PORT:
        raise ValueError(f"expected a port from 1 to {MAX_PORT}, got {value}", attribute)


def _seed(_: Any, attribute: attrs.Attribute[Any], value: int) -> None:
    if value < -1:
        raise ValueError(
            f"expected a seed of 0 or more, or -1 to draw one (logged), got {value}", attribute
        )


def _agent_behaviors(_: Any, attribute: attrs.Attribute[Any], value: dict[str, str]) -> None:
    problems = [p for agent, spec in value.items() if (p := spec_problem(agent, spec))]
    if problems:
        raise ValueError("; ".join(problems), attribute)


def _workers(_: Any, attribute: attrs.Attribute[Any], value: int | None) -> None:
    if value is not None and value < 1:
        raise ValueError(f"expected null or an integer of at least 1, got {value}", attribute)


def _cpus(_: Any, attribute: attrs.Attribute[Any], value: float) -> None:
    if not value >= 0:
        raise ValueError(f"expected a number of CPUs of 0 or more, got {value}", attribute)


def _arguments(_: Any, attribute: attrs.Attribute[Any], value: list[str] | None) -> None:
    if value is not None and not all(isinstance(arg, str) for arg in value):
        raise ValueError(f"expected a list of strings, got {value!r}", attribute)


@attrs.define(kw_only=True)
class RaySettings:
    """Where ``vectorization: ray`` runs the environments: Ray actors ("workers"), each
    stepping its share of ``num_envs`` in one remote call per vector step
    (:mod:`evtrain.run.environments.ray_envs`)."""

    address: str | None = None
    """The cluster, as ``ray.init(address=...)`` takes it: ``auto`` (the one ``ray start``
    started on this machine, or ``RAY_ADDRESS``), ``host:port`` of its head; ``null`` starts a
    Ray of its own in this process."""
    workers: int | None = attrs.field(default=None, validator=_workers)
    """Actors per rank; ``null``: one per CPU the cluster has, at most ``num_envs``."""
    cpus_per_worker: float = attrs.field(default=1.0, validator=_cpus)
    """CPUs each actor reserves in Ray's scheduler (``num_cpus``)."""
    max_restarts: int = attrs.field(default=3, validator=_natural)
    """Times each actor is restarted after its process died; once more is an error."""


@attrs.define(kw_only=True)
class EnvironmentSettings:
    """The environments every behavior trains on: Gymnasium or PettingZoo (``env_id``), or a
    Unity build (``env_path``) or the Unity Editor."""

    env_id: str = "CartPole-v1"
    """A registered Gymnasium id, or ``module:callable`` returning an environment."""
    env_kwargs: dict[str, Any] = attrs.field(factory=dict)
    """Keyword arguments for ``gymnasium.make`` (or the callable)."""
    env_path: str | None = None
    """A Unity build to train (ML-Agents' ``--env``): the executable, or its path without
    ``.x86_64``, ``.x86``, ``.app`` or ``.exe``, found as ML-Agents finds it."""
    env_args: list[str] | None = attrs.field(default=None, validator=_arguments)
    """Arguments passed to every build instance, after ML-Agents' own."""
    num_envs: int = attrs.field(
        default=1, validator=[positive, at_most(MAX_NUM_ENVS, "environments")]
    )
    """Sub-environments stepped together (per rank in a distributed run); a Unity build's
    instances, each a process."""
    base_port: int = attrs.field(default=BUILD_PORT, validator=_port)
    """Build instance ``i`` connects to the port ``base_port + i``; ``5004`` without
    ``env_path``: wait for the Unity Editor (press Play) on 5004."""
    num_areas: int = attrs.field(default=1, validator=positive)
    """Training areas each build instance makes (sent in the handshake)."""
    timeout_wait: float = attrs.field(default=60.0, validator=finite_seconds)
    """Seconds to wait for a build (or the Editor) to connect, and for each of its answers."""
    max_lifetime_restarts: int = attrs.field(default=10, validator=_limit)
    """Times one build instance may be restarted after it crashed; -1: no limit."""
    restarts_rate_limit_n: int = attrs.field(default=1, validator=_limit)
    """Restarts of one instance allowed within ``restarts_rate_limit_period_s``; -1: no
    limit."""
    restarts_rate_limit_period_s: float = attrs.field(default=60.0, validator=finite_seconds)
    """The period ``restarts_rate_limit_n`` counts over."""
    spare_copies: int = attrs.field(default=0, validator=[_natural, at_most(64, "copies")])
    """Room for a Unity build's agents that appear after the first step (enabled or spawned
    later, a group formed later): per build instance, behavior and team, this many more copies
    of the slots its first step fills (its agents then, or its largest ML-Agents group).  Not
    an ML-Agents key (its trainer needs none); the spare slots stay idle until an agent comes."""
    vectorization: Literal["sync", "async", "ray"] = "sync"
    """``sync`` steps them in this process; ``async`` in one subprocess each; ``ray`` in Ray
    actors (``ray`` below; the ``ray`` extra, README.md "Installing extras")."""
    ray: RaySettings = attrs.field(factory=RaySettings)
    """Ray's cluster and workers, for ``vectorization: ray``."""
    seed: int = attrs.field(default=-1, validator=[_seed, at_most(MAX_SEED, "(a 32-bit seed)")])
    """Seeds environments, networks and sampling; -1 draws one (and logs it), as in ML-Agents;
    other negative values are refused.  Build instance ``i`` gets ``seed + i``."""
    agent_behaviors: dict[str, str] = attrs.field(factory=dict, validator=_agent_behaviors)
    """A PettingZoo environment's agents' behaviors, ``{agent_id: "behavior"}`` or ML-Agents'
    ``"behavior?team=N"``; an agent not named here belongs to its id without ``_<digits>``
    (``player_0`` -> ``player``)."""
    shared_env: bool = False
    """A PettingZoo Parallel environment's ``num_envs`` instances are every behavior's at once:
    in each step each behavior acts for its own agents (:mod:`evtrain.multiagent.shared`),
    instead of training on copies of its own where the others' agents are co-players.  Always
    on for Unity (a build's behaviors act in one scene)."""

    def __attrs_post_init__(self) -> None:
        if self.unity:
            self.shared_env = True

    @property
    def editor(self) -> bool:
        """Train in the Unity Editor: no ``env_path``, ``base_port`` ML-Agents' Editor port."""
        return self.env_path is None and self.base_port == EDITOR_PORT

    @property
    def unity(self) -> bool:
        """Train a Unity build or in the Unity Editor, not ``env_id``."""
        return self.env_path is not None or self.editor

    def port(self, worker_id: int) -> int:
        """The port build instance ``worker_id`` connects to."""
        return self.base_port + worker_id


@attrs.define(kw_only=True)
class EngineSettings:
    """What a Unity build's engine is set to (ML-Agents' ``engine_settings``; sent to every
    build instance through the engine configuration side channel).  No effect on ``env_id``."""

    width: int = attrs.field(default=84, validator=positive)
    """The build's window width, in pixels (ignored by the Editor)."""
    height: int = attrs.field(default=84, validator=positive)
    """The build's window height, in pixels (ignored by the Editor)."""
    quality_level: int = attrs.field(default=5, validator=_natural)
    """Unity's ``QualitySettings.SetQualityLevel``."""
    time_scale: float = attrs.field(default=20.0, validator=_above_zero)
    """Unity's ``Time.timeScale``: how much faster than real time the build runs."""
    target_frame_rate: int = -1
    """Unity's ``Application.targetFrameRate``; -1: the platform's default."""
    capture_frame_rate: int = 60
    """Unity's ``Time.captureFramerate``."""
    no_graphics: bool = False
    """Start the builds with ``-nographics -batchmode`` (no visual observations then)."""


_GYMNASIUM_KEYS = {
    "env_kwargs": "the keyword arguments of env_id (a build takes env_args)",
    "agent_behaviors": "a PettingZoo environment's agents (a build names its behaviors)",
    "vectorization": "how copies of env_id step (each build instance is a process already)",
}
"""The keys of a Gymnasium or PettingZoo environment, which a Unity run refuses."""


def unity_problems(env_settings: Any) -> list[str]:
    """``env_settings`` (as the YAML gives it, flags applied) asking for a Unity build (or the
    Editor) and a Gymnasium environment at once, one line each, naming the keys."""
    if not isinstance(env_settings, dict):
        return []
    if env_settings.get("env_path") is not None:
        unity = "env_settings.env_path"
    elif env_settings.get("base_port") == EDITOR_PORT:
        unity = f"env_settings.base_port {EDITOR_PORT} (the Unity Editor)"
    else:
        return []
    problems = []
    if "env_id" in env_settings:
        problems.append(
            f"{unity} and env_settings.env_id: a run trains a Unity build or a Gymnasium "
            "environment (env_id), not both; remove one of them"
        )
    problems += [
        f"env_settings.{key}: has no meaning with {unity}: it sets {what}; remove it"
        for key, what in _GYMNASIUM_KEYS.items()
        if key in env_settings
    ]
    return problems
