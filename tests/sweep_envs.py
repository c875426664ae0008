"""An environment a sweep's parameter changes the returns of, for tests/test_sweep.py:
``env_id: tests.sweep_envs:bonus_cartpole`` with ``env_kwargs: {bonus: 100}``."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Any

import gymnasium as gym

MEETING_S = 60.0
"""How long a process waits at the rendezvous for the others."""


def bonus_cartpole(
    bonus: float = 0.0,
    rendezvous: str | None = None,
    processes: int = 2,
    fail: bool = False,
    fail_in_first: bool = False,
    **kwargs: Any,
) -> gym.Env[Any, Any]:
    """CartPole-v1 paying ``1 + bonus`` a step: a trial with a large ``bonus`` scores far
    above one without, whatever its episodes, so a test knows which trials a pruner prunes.

    :param rendezvous: a folder where the first environment of each process waits until
        ``processes`` processes have made one: every worker of a sweep then takes a trial
        before any can run them all.
    :param fail: raise instead (a trial that fails).
    :param fail_in_first: raise, after the rendezvous, in the process that ``evtrain sweep``
        started, not in a worker it started (whose command line holds ``--worker-index``):
        that process's trials fail at once, and it goes on to wait for its workers.
    """
    if fail:
        raise RuntimeError("this trial's environment fails, as asked")
    if rendezvous is not None:
        meet(Path(rendezvous), processes)
    if fail_in_first and "--worker-index" not in sys.argv:
        raise RuntimeError("this trial's environment fails in the first process, as asked")
    env = gym.make("CartPole-v1", **kwargs)
    return gym.wrappers.TransformReward(env, lambda reward: float(reward) + bonus)


def meet(folder: Path, processes: int) -> None:
    """Sign in to ``folder`` (a file named after this process) and wait for ``processes``
    signatures in all.

    :raises TimeoutError: the others did not come within :data:`MEETING_S` seconds.
    """
    folder.mkdir(parents=True, exist_ok=True)
    (folder / str(os.getpid())).touch()
    deadline = time.monotonic() + MEETING_S
    while len(list(folder.iterdir())) < processes:
        if time.monotonic() > deadline:
            raise TimeoutError(f"{processes} processes did not meet in {folder}")
        time.sleep(0.01)
