"""What ``env_settings.shared_env`` does not support yet, said as the keys to change.

With ``shared_env`` every behavior acts in the same instances of a PettingZoo Parallel
environment (:mod:`evtrain.multiagent.shared`,
:mod:`evtrain.run.environments.shared_steps`): behaviors of every built-in trainer type (PPO,
SAC, and the group trainers POCA and MAPPO, each instance's agents of the behavior one group),
self-play between the teams of one behavior, ``environment_parameters`` (on the instances),
``vectorization: sync``, one process.  Loading a
config refuses the rest with these lines (:func:`evtrain.run.options.options_and_types`), and
so does the run (for options built in code).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from evtrain.config.options import RunOptions

SHARED_ENV = "env_settings.shared_env"
"""The option's path, as errors name it."""

SHARED_TRAINER_TYPES = ("ppo", "sac", "poca", "mappo")
"""The trainer types that train in a shared environment (a plugin's type steps its own
environments, and may not know a view's shared step)."""

FALLBACK = f"or remove {SHARED_ENV} (each behavior then trains on copies of its own)"


def shared_env_problems(options: RunOptions) -> list[str]:
    """What ``options`` ask of a shared environment that it does not support yet, one line
    each, naming the key and what to do (nothing when ``shared_env`` is off)."""
    env = options.env_settings
    if not env.shared_env:
        return []
    problems = []
    for name, settings in options.behaviors.items():
        if settings.trainer_type not in SHARED_TRAINER_TYPES:
            problems.append(
                f"behaviors.{name}.trainer_type: {settings.trainer_type!r} does not train in a "
                f"shared environment ({SHARED_ENV}) yet ({', '.join(SHARED_TRAINER_TYPES)} "
                f"do); use one of them, {FALLBACK}"
            )
        if settings.evaluation is not None:
            problems.append(
                f"behaviors.{name}.evaluation: not supported in a shared environment "
                f"({SHARED_ENV}) yet; remove evaluation, {FALLBACK}"
            )
        if settings.network_settings.memory is not None:
            problems.append(
                f"behaviors.{name}.network_settings.memory: not supported with a PettingZoo "
                "environment yet: an agent's memory would run on through the steps it is out "
                "of its episode; remove network_settings.memory"
            )
    if env.vectorization != "sync":
        problems.append(
            f"env_settings.vectorization: {env.vectorization!r} is not supported in a shared "
            f"environment ({SHARED_ENV}) yet; use vectorization: sync (the num_envs instances "
            "still step together)"
        )
    return problems
