"""Building a run's vector environment from ``env_settings``.

``env_id`` is a registered Gymnasium id (``CartPole-v1``, or ``pkg.module:Env-v0``, which
Gymnasium imports to register), an id of PettingZoo's registry (``classic/connect_four-v3``:
its Parallel API where PettingZoo registers one, else its AEC API), or ``module:callable``
returning a ``gymnasium.Env`` or a PettingZoo ``ParallelEnv`` or ``AECEnv``
(``mpe2.simple_spread_v3:parallel_env``, ``pettingzoo.classic.connect_four_v3:env``;
``module:name`` naming a module stands for its ``parallel_env``, else its ``env``:
``pettingzoo.classic:connect_four_v3``).  Unknown ids fail with the closest registered ids,
and an environment whose package is missing names the pip install that provides it, before
any training starts.

A PettingZoo environment is built per behavior: ``num_envs`` copies of it, wrapped as the
behavior's :class:`~evtrain.multiagent.slots.AgentSlots` (:func:`make_envs` with
``behavior``; :mod:`evtrain.run.environments.pettingzoo_envs`), its agents mapped to behaviors by
``env_settings.agent_behaviors``.

The module of an id is looked up as ``python -m`` looks modules up: the current working folder
is on the import path (after the installed packages), so ``evtrain learn`` finds
``mymodule:make_env`` next to the config as ``python -m evtrain learn`` does
(:func:`working_folder_importable`).  A factory must return a ``gymnasium.Env`` or a PettingZoo
environment; anything else is a :class:`~evtrain.errors.ConfigError` naming the factory and
what it returned.
"""

from __future__ import annotations

import difflib
import importlib
import os
import re
import sys
import types
from collections.abc import Callable, Mapping
from typing import Any

import attrs

from evtrain.config.options import EnvironmentSettings
from evtrain.errors import ConfigError
from evtrain.run.environments.pettingzoo_envs import (
    PETTINGZOO_MODULES,
    agent_slots,
    call_factory,
    not_shareable,
    pettingzoo_hint,
    pettingzoo_ids,
    pettingzoo_install,
    pettingzoo_missing,
    pettingzoo_registered,
    shared_environment,
)


def make_envs(
    settings: EnvironmentSettings,
    wrapper: Callable[[Any], Any] | None = None,
    *,
    behavior: str | None = None,
    behaviors: Mapping[str, Any] | None = None,
) -> Any:
    """``num_envs`` copies in a Gymnasium vector env that resets sub-environments in the same
    step they end (what the trainers expect); for a PettingZoo environment, ``behavior``'s
    :class:`~evtrain.multiagent.slots.AgentSlots` over ``num_envs`` copies.

    :param wrapper: applied to each sub-environment, in its own process when vectorization is
        async or ray (so it must pickle): the run's ``environment_parameters``
        (:mod:`evtrain.run.parameters.env_parameters`).
    :param behavior: the behavior they are for (a PettingZoo environment needs it).
    :param behaviors: every behavior's settings: a PettingZoo environment's agents must fit.

    :raises ConfigError: the id is not registered, needs a package that is not installed, or
        the callable cannot be imported; a PettingZoo environment that its options do not fit
        (:func:`~evtrain.run.environments.pettingzoo_envs.agent_slots`).
    """
    import gymnasium as gym

    from evtrain.trainers.envs import make_vector_env

    working_folder_importable()
    factory = _callable(settings.env_id)
    if factory is None and settings.env_id not in gym.registry:
        factory = pettingzoo_registered(settings.env_id)
    if factory is not None:
        return _factory_envs(settings, factory, wrapper, behavior, behaviors)
    _no_agents(settings)
    try:
        if settings.vectorization == "ray":
            gym.spec(settings.env_id)  # unknown ids are said here, not by every worker
            return _ray_envs(settings, None, wrapper)
        return make_vector_env(
            settings.env_id,
            settings.num_envs,
            asynchronous=settings.vectorization == "async",
            env_kwargs=settings.env_kwargs,
            wrappers=None if wrapper is None else [wrapper],
        )
    except (gym.error.DependencyNotInstalled, ImportError) as error:
        raise ConfigError([_missing_dependency(settings.env_id, error)]) from None
    except gym.error.Error as error:
        raise ConfigError([_not_registered(settings.env_id, error)]) from None
    except TypeError as error:
        raise ConfigError([f"env_settings.env_kwargs: {error}"]) from None


def make_shared_env(
    settings: EnvironmentSettings,
    behaviors: Mapping[str, Any],
    wrapper: Callable[[Any], Any] | None = None,
) -> Any:
    """``env_settings.shared_env``: ``num_envs`` instances of a PettingZoo Parallel
    environment (each wrapped in ``wrapper``) in which every behavior of ``behaviors`` acts, as a
    :class:`~evtrain.multiagent.shared.SharedEnvironment`
    (:func:`~evtrain.run.environments.pettingzoo_envs.shared_environment`).

    :raises ConfigError: ``env_id`` is not a PettingZoo Parallel environment, or any error of
        :func:`make_envs`'s for the id.
    """
    import gymnasium as gym

    working_folder_importable()
    factory = _callable(settings.env_id)
    if factory is None and settings.env_id not in gym.registry:
        factory = pettingzoo_registered(settings.env_id)
    if factory is None:
        # an unknown id is said there; a Gymnasium one is no environment to share
        make_envs(attrs.evolve(settings, num_envs=1, vectorization="sync")).close()
        raise ConfigError([not_shareable(settings.env_id, "a Gymnasium environment")])
    return shared_environment(settings, factory, behaviors, wrapper)


def _not_registered(env_id: str, error: Exception) -> str:
    """The error of an id Gymnasium does not know, with the registered ids closest to it."""
    import gymnasium as gym

    registered = sorted(gym.registry)
    close = difflib.get_close_matches(env_id, registered, n=5, cutoff=0.5)
    close = close or difflib.get_close_matches(env_id, pettingzoo_ids(), n=5)
    hint = (
        f"did you mean {', '.join(close)}?"
        if close
        else (f"registered ids include {', '.join(registered[:12])}, ...")
    )
    return (
        f"env_settings.env_id: {env_id!r} is not a Gymnasium environment "
        f"({type(error).__name__}: {error}); {hint} Or give module:callable."
        + pettingzoo_hint(env_id)
    )


def _factory_envs(
    settings: EnvironmentSettings,
    factory: Callable[..., Any],
    wrapper: Callable[[Any], Any] | None,
    behavior: str | None,
    behaviors: Mapping[str, Any] | None,
) -> Any:
    """:func:`make_envs` of ``module:callable``: what the first call returns says whether it
    is a Gymnasium environment or a PettingZoo one."""
    import gymnasium as gym
    from gymnasium.vector import AsyncVectorEnv, AutoresetMode, SyncVectorEnv

    from evtrain.multiagent.slots import api_of

    kwargs = dict(settings.env_kwargs)
    env_id = settings.env_id
    first = call_factory(factory, env_id, kwargs)
    if not isinstance(first, gym.Env):
        if api_of(first) is not None:
            _no_ray(settings, first)
            return agent_slots(settings, first, factory, wrapper, behavior, behaviors)
        raise ConfigError([_not_an_env(env_id, first)])
    _no_agents(settings)

    def make() -> Any:
        env = factory(**kwargs)
        if not isinstance(env, gym.Env):
            raise ConfigError([_not_an_env(env_id, env)])
        return env if wrapper is None else wrapper(env)

    if settings.vectorization == "ray":  # each copy is made in its worker
        first.close()
        return _ray_envs(settings, factory, wrapper)
    fns = [make for _ in range(settings.num_envs)]
    if settings.vectorization == "async":  # each copy is made in its own process
        first.close()
        return AsyncVectorEnv(fns, autoreset_mode=AutoresetMode.SAME_STEP)
    fns[0] = lambda: first if wrapper is None else wrapper(first)
    return SyncVectorEnv(fns, autoreset_mode=AutoresetMode.SAME_STEP)


def _ray_envs(
    settings: EnvironmentSettings,
    factory: Callable[..., Any] | None,
    wrapper: Callable[[Any], Any] | None,
) -> Any:
    """:func:`make_envs` with ``vectorization: ray`` (:mod:`evtrain.run.environments.ray_envs`; Ray
    is imported only then)."""
    from evtrain.run.environments.ray_envs import make_ray_envs
    from evtrain.run.environments.ray_worker import EnvMaker

    maker = EnvMaker(
        env_id=settings.env_id, env_kwargs=settings.env_kwargs, factory=factory, wrapper=wrapper
    )
    return make_ray_envs(settings, maker)


def _no_ray(settings: EnvironmentSettings, env: Any) -> None:
    """Refuse ``vectorization: ray`` for a PettingZoo environment."""
    if settings.vectorization == "ray":
        env.close()
        raise ConfigError(
            [
                f"env_settings.vectorization: 'ray' runs Gymnasium environments only; "
                f"{settings.env_id!r} is a PettingZoo environment: use vectorization: async "
                "(each copy in a process of its own) or sync"
            ]
        )


def _no_agents(settings: EnvironmentSettings) -> None:
    """Refuse ``agent_behaviors`` for a Gymnasium environment (it has one agent)."""
    if settings.agent_behaviors:
        raise ConfigError(
            [
                f"env_settings.agent_behaviors: {settings.env_id!r} is a Gymnasium environment, "
                "with one agent: agent_behaviors maps the agents of a PettingZoo environment; "
                "remove it"
            ]
        )


def working_folder_importable() -> None:
    """Put the current working folder on ``sys.path`` (last) unless it is there already, as
    ``python -m`` does (first there): the ``evtrain`` console script's own ``sys.path[0]`` is
    its ``bin`` folder, where the user's environment module is not.  Last, so that a file of
    the working folder never shadows an installed package."""
    cwd = os.getcwd()
    if not any(os.path.abspath(p or os.curdir) == cwd for p in sys.path):
        sys.path.append(cwd)


def _not_an_env(env_id: str, made: Any) -> str:
    shown = repr(made)
    shown = shown if len(shown) <= 80 else shown[:77] + "..."
    return (
        f"env_settings.env_id: {env_id!r} returned {shown} (a {type(made).__qualname__}), not "
        "a gymnasium.Env or a PettingZoo ParallelEnv or AECEnv; make it return an environment, "
        "e.g. gymnasium.make(...) or an instance of a gymnasium.Env subclass (see "
        "docs/environments.md, docs/multi-agent.md)"
    )


def _callable(env_id: str) -> Any:
    """The callable ``module:attr`` names, if it is one and not a registered Gymnasium id; a
    module stands for its ``parallel_env``, else its ``env`` (PettingZoo's factories).  A
    module of PettingZoo or mpe2 may be named with a dot too (``pettingzoo.classic.rps_v2``)."""
    module_name, sep, attr = env_id.partition(":")
    if not sep and env_id.startswith(PETTINGZOO_MODULES):  # pettingzoo.classic.rps_v2
        module_name, sep, attr = env_id.rpartition(".")
    if not sep or "-v" in attr:
        return None  # "pkg.module:Env-v0" is Gymnasium's own registering form
    try:
        module = importlib.import_module(module_name)
        target = getattr(module, attr, None)
        if target is None:  # a submodule not imported by its package
            target = importlib.import_module(f"{module_name}.{attr}")
    except ImportError as error:
        if pettingzoo_missing(error):
            raise ConfigError([pettingzoo_install(env_id, error)]) from None
        raise ConfigError(
            [f"env_settings.env_id: cannot import {env_id!r}: {type(error).__name__}: {error}"]
        ) from None
    if isinstance(target, types.ModuleType):
        factory = getattr(target, "parallel_env", None) or getattr(target, "env", None)
        if factory is None:
            raise ConfigError(
                [
                    f"env_settings.env_id: {env_id!r} is a module without parallel_env or env; "
                    "give module:callable, the callable returning the environment"
                ]
            )
        target = factory
    if not callable(target):
        raise ConfigError([f"env_settings.env_id: {env_id!r} is not callable"])
    return target


_GYMNASIUM_EXTRA = re.compile(r"gymnasium\[([\w-]+)\]")


def _missing_dependency(env_id: str, error: Exception) -> str:
    """What to install for a registered environment whose import failed: the Gymnasium extra
    its message or its entry point's package names (``gymnasium.envs.box2d...`` needs
    ``gymnasium[box2d]``, ``ale_py`` ``gymnasium[atari]``), else the missing module."""
    import gymnasium as gym

    spec = gym.registry.get(env_id)
    entry_point = spec.entry_point if spec is not None and isinstance(spec.entry_point, str) else ""
    parts = entry_point.partition(":")[0].split(".")
    extra = _GYMNASIUM_EXTRA.search(str(error))
    if extra is not None:
        install = f'install it with pip install "gymnasium[{extra.group(1)}]"'
    elif parts[:2] == ["gymnasium", "envs"] and len(parts) > 3:
        install = f'install it with pip install "gymnasium[{parts[2].replace("_", "-")}]"'
    elif parts[0] == "ale_py":
        install = 'install it with pip install "gymnasium[atari]"'
    else:
        # "pkg.module:Env-v0" registers by importing pkg.module
        module = getattr(error, "name", None) or env_id.partition(":")[0] or parts[0]
        install = f"install the package that provides the module {module!r}"
    return (
        f"env_settings.env_id: {env_id!r} needs a package that is not installed "
        f"({type(error).__name__}: {error}); {install}"
    )
