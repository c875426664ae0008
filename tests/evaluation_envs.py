"""CartPole for tests of evaluations that go wrong (``env_id: tests.evaluation_envs:cartpole``).

Its keyword arguments, given in ``evaluation.env_kwargs`` so that only the evaluation
environments have them, choose the fault:

* ``once``: a folder; the fault happens in the first evaluation worker only: its first step
  creates ``<once>/faulted`` holding the worker's pid, later workers (the replacements) find it
  and play normally;
* ``fault``: ``"hang"`` (the step never returns), ``"raise"`` (it raises ``RuntimeError``) or
  ``"nan"`` (every reward is NaN, in every worker; ``once`` is not needed);
* ``improving``: each episode ends after one step with a reward one more than the last
  episode's of the process (1, 2, 3, ...): every evaluation of one episode beats the last.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import gymnasium as gym


class _Faulty(gym.Wrapper[Any, Any, Any, Any]):
    episodes = 0
    """Episodes begun in this process (``improving``)."""

    def __init__(
        self, env: gym.Env[Any, Any], fault: str | None, once: str | None, improving: bool
    ) -> None:
        super().__init__(env)
        self.fault, self.once, self.improving = fault, once, improving

    def reset(self, **kwargs: Any) -> Any:
        _Faulty.episodes += 1
        return self.env.reset(**kwargs)

    def step(self, action: Any) -> Any:
        if self.fault is not None and self._faulting():
            if self.fault == "hang":
                while True:
                    time.sleep(1)
            if self.fault == "raise":
                raise RuntimeError("the evaluation environment broke")
        obs, reward, terminated, truncated, info = self.env.step(action)
        if self.fault == "nan":
            reward = float("nan")
        if self.improving:
            return obs, float(_Faulty.episodes), True, False, info
        return obs, reward, terminated, truncated, info

    def _faulting(self) -> bool:
        if self.once is None:
            return True
        marker = Path(self.once) / "faulted"
        if marker.exists():
            return marker.read_text() == str(os.getpid())
        marker.write_text(str(os.getpid()))
        return True


def cartpole(
    fault: str | None = None, once: str | None = None, improving: bool = False, **kwargs: Any
) -> gym.Env[Any, Any]:
    """CartPole-v1 (``kwargs`` to ``gym.make``) with the fault asked for, if any."""
    return _Faulty(gym.make("CartPole-v1", **kwargs), fault, once, improving)
