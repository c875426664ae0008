"""Building a run's vector environment from ``env_settings``.

``env_id`` is a registered Gymnasium id (``CartPole-v1``, or ``pkg.module:Env-v0``, which
Gymnasium imports to register), or ``module:callable`` returning a ``gymnasium.Env``.  Unknown
ids fail with the closest registered ids, and an environment whose package is missing names
the pip install that provides it, before any training starts.
"""

from __future__ import annotations

import difflib
import importlib
import re
from collections.abc import Callable
from typing import Any

from evtrain.config.options import EnvironmentSettings
from evtrain.errors import ConfigError


def make_envs(settings: EnvironmentSettings, wrapper: Callable[[Any], Any] | None = None) -> Any:
    """``num_envs`` copies in a Gymnasium vector env that resets sub-environments in the same
    step they end (what the trainers expect).

    :param wrapper: applied to each sub-environment, in its own process when vectorization is
        async (so it must pickle): the run's ``environment_parameters``
        (:mod:`evtrain.run.env_parameters`).

    :raises ConfigError: the id is not registered, needs a package that is not installed, or
        the callable cannot be imported.
    """
    import gymnasium as gym
    from gymnasium.vector import AsyncVectorEnv, AutoresetMode, SyncVectorEnv

    from evtrain.trainers.envs import make_vector_env

    asynchronous = settings.vectorization == "async"
    factory = _callable(settings.env_id)
    if factory is not None:
        kwargs = dict(settings.env_kwargs)

        def make() -> Any:
            env = factory(**kwargs)
            return env if wrapper is None else wrapper(env)

        fns = [make for _ in range(settings.num_envs)]
        vector_cls = AsyncVectorEnv if asynchronous else SyncVectorEnv
        return vector_cls(fns, autoreset_mode=AutoresetMode.SAME_STEP)
    try:
        return make_vector_env(
            settings.env_id,
            settings.num_envs,
            asynchronous=asynchronous,
            env_kwargs=settings.env_kwargs,
            wrappers=None if wrapper is None else [wrapper],
        )
    except (gym.error.DependencyNotInstalled, ImportError) as error:
        raise ConfigError([_missing_dependency(settings.env_id, error)]) from None
    except gym.error.Error as error:
        registered = sorted(gym.registry)
        close = difflib.get_close_matches(settings.env_id, registered, n=5, cutoff=0.5)
        hint = (
            f"did you mean {', '.join(close)}?"
            if close
            else (f"registered ids include {', '.join(registered[:12])}, ...")
        )
        raise ConfigError(
            [
                f"env_settings.env_id: {settings.env_id!r} is not a Gymnasium environment "
                f"({type(error).__name__}: {error}); {hint} Or give module:callable."
            ]
        ) from None
    except TypeError as error:
        raise ConfigError([f"env_settings.env_kwargs: {error}"]) from None


def _callable(env_id: str) -> Any:
    """The callable ``module:attr`` names, if it is one and not a registered Gymnasium id."""
    module_name, sep, attr = env_id.partition(":")
    if not sep or "-v" in attr:
        return None  # "pkg.module:Env-v0" is Gymnasium's own registering form
    try:
        target = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError) as error:
        raise ConfigError(
            [f"env_settings.env_id: cannot import {env_id!r}: {type(error).__name__}: {error}"]
        ) from None
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
