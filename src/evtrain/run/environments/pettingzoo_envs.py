"""PettingZoo environments of a run: ids of PettingZoo's registry, what to install when it is
missing, and each behavior's :class:`~evtrain.multiagent.slots.AgentSlots` over copies made by
the environment's factory (:func:`evtrain.run.environments.envs.make_envs` decides which
environments are PettingZoo's).

With ``vectorization: async`` each copy of a Parallel environment lives in a process of its own
(:mod:`evtrain.multiagent.remote`), made there by the factory, and the copies step at once;
the co-players still act in this process, batched across the copies, one forward pass per
step.  A turn-based (AEC) game with it is refused (every move would be a round trip to a
process), as is ``network_settings.memory`` (an agent's memory would run on through the steps
it is out of its episode).  ``environment_parameters`` wrap each copy
(:mod:`evtrain.run.parameters.pettingzoo_parameters`).  PettingZoo is imported only here and in that
module, and only when asked.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from typing import Any

from evtrain.config.options import EnvironmentSettings
from evtrain.errors import ConfigError
from evtrain.extras import install_hint


def call_factory(factory: Callable[..., Any], env_id: str, kwargs: Mapping[str, Any]) -> Any:
    """``factory(**kwargs)``; PettingZoo, or a package one of its games needs, missing from
    inside it is said with the extra to install."""
    try:
        return factory(**kwargs)
    except Exception as error:
        missing = missing_import(error)
        if missing is not None and pettingzoo_missing(missing):
            raise ConfigError([pettingzoo_install(env_id, missing)]) from None
        raise


def pettingzoo_registered(env_id: str) -> Callable[..., Any] | None:
    """``pettingzoo.make`` of ``env_id`` if PettingZoo's registry has it (the Parallel API
    preferred: all agents act at once, each co-player once per step for all copies)."""
    if ":" in env_id:
        return None
    try:
        import pettingzoo
    except ImportError:
        return None
    for api, registry in (
        ("parallel", pettingzoo.parallel_registry),
        ("aec", pettingzoo.aec_registry),
    ):
        if env_id in registry:
            return functools.partial(pettingzoo.make, api, env_id)
    return None


def pettingzoo_ids() -> list[str]:
    """The ids of PettingZoo's registry, if it is installed."""
    try:
        import pettingzoo
    except ImportError:
        return []
    return sorted({*pettingzoo.parallel_registry, *pettingzoo.aec_registry})


PETTINGZOO_NAMESPACES = ("atari/", "butterfly/", "classic/", "sisl/")
"""The namespaces of PettingZoo's own registry."""

PETTINGZOO_MODULES = ("pettingzoo.", "mpe2.")
"""Names of modules of PettingZoo's, which an ``env_id`` may give with a dot before the last
part as with a colon (no Gymnasium id starts so)."""


def pettingzoo_hint(env_id: str) -> str:
    """What to install for a PettingZoo id when PettingZoo is not installed."""
    if not env_id.startswith(PETTINGZOO_NAMESPACES):
        return ""
    try:
        import pettingzoo  # noqa: F401  # installed: the id is just not one of its
    except ImportError:
        pass
    else:
        return ""
    return (
        f" {env_id!r} looks like an id of PettingZoo, which is not installed; "
        f"{install_hint('pettingzoo')}"
    )


PETTINGZOO_PACKAGES = frozenset({"pettingzoo", "mpe2", "pymunk"})
"""What the ``pettingzoo`` extra installs."""

GAME_PACKAGES: dict[str, str] = {
    "rlcard": "pettingzoo-classic",
    "chess": "pettingzoo-classic",
    "Box2D": "pettingzoo-sisl",
}
"""What some of PettingZoo's games need besides it, and the extra that installs it: RLCard for
the card games of ``classic`` (leduc_holdem, texas_holdem, gin_rummy), python-chess for its
chess, Box2D for ``sisl``'s multiwalker."""


def missing_import(error: BaseException) -> ImportError | None:
    """The :class:`ImportError` behind ``error``: itself, or what it was raised from
    (PettingZoo's registry raises its own ``FailedToImport`` from the import that failed)."""
    seen: BaseException | None = error
    while seen is not None and not isinstance(seen, ImportError):
        seen = seen.__cause__
    return seen


def pettingzoo_missing(error: ImportError) -> str | None:
    """The extra that installs the package whose import failed, if one of ours does."""
    package = (getattr(error, "name", None) or "").partition(".")[0]
    if package in PETTINGZOO_PACKAGES:
        return "pettingzoo"
    return GAME_PACKAGES.get(package)


def pettingzoo_install(env_id: str, error: ImportError) -> str:
    extra = pettingzoo_missing(error)
    if extra is not None and extra != "pettingzoo":
        package = (error.name or "").partition(".")[0]
        return (
            f"env_settings.env_id: {env_id!r} needs {package}, which is not installed; "
            f"{install_hint(extra)}"
        )
    return (
        f"env_settings.env_id: {env_id!r} needs a package that is not installed "
        f"({type(error).__name__}: {error}); {install_hint('pettingzoo')}: PettingZoo, its "
        "MPE and butterfly environments"
    )


def agent_slots(
    settings: EnvironmentSettings,
    first: Any,
    factory: Callable[..., Any],
    wrapper: Callable[[Any], Any] | None,
    behavior: str | None,
    behaviors: Mapping[str, Any] | None,
) -> Any:
    """Behavior ``behavior``'s :class:`~evtrain.multiagent.slots.AgentSlots` over ``first`` and
    ``num_envs - 1`` more copies from ``factory``, each wrapped in ``wrapper`` (the run's
    ``environment_parameters``) when one is given.

    With ``vectorization: async`` ``first`` is closed and every copy is made (and wrapped) in
    a process of its own: ``factory`` and ``wrapper`` must pickle.

    :raises ConfigError: no behavior given (a command other than ``evtrain learn``),
        ``vectorization: async`` with a turn-based game, the behavior's
        ``network_settings.memory``, or a mapping of agents that does not fit.
    """
    from evtrain.multiagent.remote import start_copies
    from evtrain.multiagent.slots import AgentSlots, api_of

    env_id = settings.env_id
    own = None if behaviors is None or behavior is None else behaviors.get(behavior)
    problems = _pettingzoo_problems(settings, behavior, own, api_of(first))
    if problems:
        first.close()
        raise ConfigError(problems)
    copies = [first]
    try:
        if settings.vectorization == "async":
            first.close()
            copies = []
            make = functools.partial(call_factory, factory, env_id, dict(settings.env_kwargs))
            copies = wrapped = start_copies(make, wrapper, settings.num_envs, repr(env_id))
        else:
            for _ in range(settings.num_envs - 1):
                copies.append(call_factory(factory, env_id, settings.env_kwargs))
            wrapped = copies if wrapper is None else [wrapper(copy) for copy in copies]
        return AgentSlots(
            wrapped,
            str(behavior),
            agent_behaviors=settings.agent_behaviors,
            behaviors=None if behaviors is None else list(behaviors),
            self_play=getattr(own, "self_play", None) is not None,
            self_play_behaviors=[
                name
                for name, other in (behaviors or {}).items()
                if getattr(other, "self_play", None) is not None
            ],
            env_name=repr(env_id),
        )
    except BaseException:
        for copy in copies:
            copy.close()
        raise


def _pettingzoo_problems(
    settings: EnvironmentSettings,
    behavior: str | None,
    own: Any,
    api: str | None,
) -> list[str]:
    """What a PettingZoo environment cannot do (yet) that the options ask for."""
    env_id = settings.env_id
    if behavior is None:
        return [
            f"env_settings.env_id: {env_id!r} is a PettingZoo environment, which this command "
            "does not support yet (evtrain learn trains on it)"
        ]
    problems = []
    if settings.vectorization == "async" and api == "aec":
        problems.append(
            f"env_settings.vectorization: 'async' is not supported with a turn-based (AEC) "
            f"PettingZoo environment ({env_id!r}) yet: every move would be a round trip to the "
            "copy's process; use vectorization: sync (the num_envs copies still step together)"
        )
    if own is not None and own.network_settings.memory is not None:
        problems.append(
            f"behaviors.{behavior}.network_settings.memory: not supported with a PettingZoo "
            f"environment ({env_id!r}) yet: an agent's memory would run on through the steps "
            "it is out of its episode; remove network_settings.memory"
        )
    return problems


def shared_environment(
    settings: EnvironmentSettings,
    factory: Callable[..., Any],
    behaviors: Mapping[str, Any],
    wrapper: Callable[[Any], Any] | None = None,
) -> Any:
    """``env_settings.shared_env``: ``num_envs`` instances from ``factory``, each wrapped in
    ``wrapper`` (the run's ``environment_parameters``), every behavior of ``behaviors`` acting
    in each (:class:`~evtrain.multiagent.shared.SharedEnvironment`).

    :raises ConfigError: ``factory`` makes no PettingZoo Parallel environment, or a mapping of
        agents that does not fit it.
    """
    from evtrain.multiagent.shared import SharedEnvironment
    from evtrain.multiagent.slots import api_of

    env_id = settings.env_id
    envs = [call_factory(factory, env_id, settings.env_kwargs)]
    try:
        api = api_of(envs[0])
        if api != "parallel":
            kind = "a turn-based (AEC) game" if api == "aec" else "not a PettingZoo environment"
            raise ConfigError([not_shareable(env_id, kind)])
        for _ in range(settings.num_envs - 1):
            envs.append(call_factory(factory, env_id, settings.env_kwargs))
        if wrapper is not None:
            envs = [wrapper(env) for env in envs]
        playing = [b for b, found in behaviors.items() if getattr(found, "self_play", None)]
        return SharedEnvironment(
            envs,
            list(behaviors),
            agent_behaviors=settings.agent_behaviors,
            self_play=playing,
            env_name=repr(env_id),
        )
    except BaseException:
        for env in envs:
            env.close()
        raise


def not_shareable(env_id: str, kind: str) -> str:
    """The error of ``env_settings.shared_env`` with an environment of ``kind``."""
    return (
        f"env_settings.shared_env: {env_id!r} is {kind}; behaviors share the instances of a "
        "PettingZoo Parallel environment only (every agent acts in every step): remove "
        "shared_env"
    )
