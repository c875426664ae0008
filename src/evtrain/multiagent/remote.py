"""Copies of a PettingZoo Parallel environment each in a process of its own (``vectorization:
async``), as Gymnasium's ``AsyncVectorEnv`` keeps its sub-environments.

A :class:`RemoteCopy` stands in the main process for one copy: it offers what
:class:`~evtrain.multiagent.parallel.ParallelCopies` needs of a copy (``agents``,
``possible_agents``, ``observation_space(agent)``, ``action_space(agent)``, ``reset``, ``step``,
``close``), and splits each call into :meth:`RemoteCopy.send` and :meth:`RemoteCopy.receive`:
the caller sends every copy its call before it receives any answer, so the copies step at once.
The co-players still act in the main process, batched over all the copies: only the
environments move out.

The worker builds its copy from a factory (and wraps it, e.g. in the run's
``environment_parameters``) in the child, so both must pickle: pickled with cloudpickle, as
Gymnasium does, a module-level callable travels by name and must be importable there.  The
children start from the ``forkserver`` context: never forked from a process that runs torch's
threads, and quicker to start than ``spawn``: the fork server has imported Gymnasium and
PettingZoo once for all of them.  An exception in a child comes back as
:class:`~evtrain.errors.CopyProcessError` naming the copy and the environment, as does a child
that dies; :meth:`RemoteCopy.close` ends the child within a bounded time (asked, then
terminated, then killed).
"""

from __future__ import annotations

import contextlib
import functools
import multiprocessing
import traceback
from collections.abc import Callable, Sequence
from multiprocessing.connection import Connection, wait
from typing import Any

from gymnasium import spaces
from gymnasium.vector.utils import CloudpickleWrapper

from evtrain.errors import CopyProcessError

PRELOAD = ["evtrain.multiagent.remote", "pettingzoo"]
"""What the fork server imports once for all the copies' processes it forks (what it cannot
import, it skips); the factory's own module each process imports itself."""
CLOSE_TIMEOUT = 5.0
"""Seconds a copy's process has to close its environment before it is terminated."""


class RemoteCopy:
    """One copy of a PettingZoo Parallel environment, in a process of its own (see the module).

    :param factory: makes the copy, in the child (no arguments).
    :param wrapper: wraps it there, when given.
    :param index: which copy it is (errors name it).
    :param env_name: how errors name the environment.
    """

    def __init__(
        self,
        factory: Callable[[], Any],
        wrapper: Callable[[Any], Any] | None,
        index: int,
        env_name: str,
    ) -> None:
        self.index = index
        self.env_name = env_name
        self.agents: list[str] = []
        """The agents of the copy after its latest reset or step."""
        self.possible_agents: list[str] = []
        self._observation_spaces: dict[str, spaces.Space[Any]] = {}
        self._action_spaces: dict[str, spaces.Space[Any]] = {}
        self._doing = "start"
        context = multiprocessing.get_context("forkserver")
        context.set_forkserver_preload(PRELOAD)  # effective until the fork server runs
        self._pipe, child = context.Pipe()
        self._process = context.Process(
            target=_work,
            args=(child, CloudpickleWrapper(functools.partial(_make, factory, wrapper))),
            name=f"evtrain copy {index}",
            daemon=True,
        )
        self._process.start()
        child.close()

    def started(self) -> None:
        """Wait for the child to have made its copy; take its agents and spaces."""
        self._doing = "start"
        self.possible_agents, self._observation_spaces, self._action_spaces = self.receive()

    def observation_space(self, agent: str) -> spaces.Space[Any]:
        return self._observation_spaces[agent]

    def action_space(self, agent: str) -> spaces.Space[Any]:
        return self._action_spaces[agent]

    def reset(self, seed: int | None = None, options: dict[str, Any] | None = None) -> Any:
        self.send("reset", seed=seed, options=options)
        return self.receive()

    def step(self, actions: dict[str, Any]) -> Any:
        self.send("step", actions)
        return self.receive()

    def call(self, name: str, *args: Any, **kwargs: Any) -> Any:
        """Call the copy's method ``name`` (an attribute that is not callable: its value)."""
        self.send("call", name, *args, **kwargs)
        return self.receive()

    def send(self, method: str, *args: Any, **kwargs: Any) -> None:
        """Ask the child for ``method(*args, **kwargs)`` of its copy; :meth:`receive` answers."""
        self._doing = method
        try:
            self._pipe.send((method, args, kwargs))
        except (BrokenPipeError, OSError):
            raise self._ended() from None

    def receive(self) -> Any:
        """The answer to the last :meth:`send`.

        :raises CopyProcessError: the copy raised in its process, or its process ended.
        """
        wait([self._pipe, self._process.sentinel])
        if not self._pipe.poll():
            raise self._ended()
        try:
            ok, answer = self._pipe.recv()
        except (EOFError, OSError):
            raise self._ended() from None
        if not ok:
            raise CopyProcessError(self.index, self.env_name, self._doing, answer)
        if self._doing in ("reset", "step"):
            result, self.agents = answer
            return result
        return answer

    def close(self) -> None:
        """Ask the child to close its copy; terminate it if it has not ended within
        :data:`CLOSE_TIMEOUT` seconds, kill it if that does not end it either."""
        if self._process.is_alive():
            with contextlib.suppress(BrokenPipeError, OSError):
                self._pipe.send(("close", (), {}))
            self._process.join(CLOSE_TIMEOUT)
        if self._process.is_alive():
            self._process.terminate()
            self._process.join(1.0)
        if self._process.is_alive():
            self._process.kill()
            self._process.join()
        self._pipe.close()

    def _ended(self) -> CopyProcessError:
        self._process.join(1.0)
        code = self._process.exitcode
        return CopyProcessError(
            self.index, self.env_name, self._doing, f"its process ended (exit code {code})"
        )

    def __repr__(self) -> str:
        return f"RemoteCopy({self.index} of {self.env_name}, pid {self._process.pid})"


def start_copies(
    factory: Callable[[], Any],
    wrapper: Callable[[Any], Any] | None,
    count: int,
    env_name: str,
) -> list[RemoteCopy]:
    """``count`` copies made by ``factory`` (each wrapped in ``wrapper``), each in its own
    process; all started before any is waited for.  Any copy failing to start closes them all.

    :raises CopyProcessError: a copy could not be made.
    """
    copies: list[RemoteCopy] = []
    try:
        for index in range(count):
            copies.append(RemoteCopy(factory, wrapper, index, env_name))
        for copy in copies:
            copy.started()
    except BaseException:
        close_copies(copies)
        raise
    return copies


def close_copies(copies: Sequence[RemoteCopy]) -> None:
    """Close ``copies``, every one even if one fails."""
    for copy in copies:
        copy.close()


def _make(factory: Callable[[], Any], wrapper: Callable[[Any], Any] | None) -> Any:
    env = factory()
    return env if wrapper is None else wrapper(env)


def _work(pipe: Connection, make: CloudpickleWrapper) -> None:
    """The child: make the copy, then answer the parent's calls until it says ``close``.  Each
    answer is ``(True, result)``, or ``(False, error)`` after which the child ends."""
    try:
        env: Any = make.fn()
        agents = list(env.possible_agents)
        pipe.send(
            (
                True,
                (
                    agents,
                    {a: env.observation_space(a) for a in agents},
                    {a: env.action_space(a) for a in agents},
                ),
            )
        )
        while True:
            method, args, kwargs = pipe.recv()
            if method == "close":
                env.close()
                return
            if method == "call":
                found = getattr(env, args[0])
                pipe.send((True, found(*args[1:], **kwargs) if callable(found) else found))
                continue
            result = getattr(env, method)(*args, **kwargs)
            pipe.send((True, (result, list(env.agents))))
    except KeyboardInterrupt:
        return
    except BaseException as error:  # the parent raises it, naming the copy
        trace = traceback.format_exc()
        with contextlib.suppress(BrokenPipeError, OSError):
            pipe.send((False, f"{type(error).__name__}: {error}\n{trace}"))
    finally:
        pipe.close()
