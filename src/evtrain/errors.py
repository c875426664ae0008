"""Every exception evtrain raises on purpose.

::

    EvtrainError
    ├── ConfigError(ValueError)           a YAML/dict option is wrong: path, expected, fix
    │   └── SpaceMismatchError(TypeError)  the environment's spaces do not suit the trainer
    ├── RunFolderError(FileExistsError)   the run folder clashes with the flags, or is held
    ├── PluginError(RuntimeError)         a required plugin failed to load or register
    ├── BusClosedError(RuntimeError)      emit/connect on a bus that is closed or closing
    ├── BusTimeoutError(TimeoutError)     flush/close did not finish within its timeout
    ├── JournalInUseError(RuntimeError)   a spool subscriber's journal is open in another bus
    ├── JournalFormatError(ValueError)    a journal file is not one this evtrain wrote or reads
    ├── CheckpointError(ValueError)       a checkpoint cannot be loaded, or does not fit the run
    ├── DistributedError(RuntimeError)    a collective failed: another rank stopped
    ├── SubscriberError(RuntimeError)     a subscriber raised under the ``raise`` failure policy
    ├── SubscriberProcessError(RuntimeError)  a process-isolated subscriber raised in its child
    ├── CopyProcessError(RuntimeError)    a copy of an environment failed in its own process
    ├── EnvWorkerError(RuntimeError)      a Ray environment worker failed past its restarts
    ├── NonFiniteError(ArithmeticError)   a NaN or infinity in a behavior's numbers or weights
    └── UnityError(RuntimeError)          a Unity build (ML-Agents' protocol) failed
        ├── UnityPortInUseError(OSError)      the port a build connects to is taken
        ├── UnityTimeoutError(TimeoutError)   the build did not connect or answer in time
        ├── UnityVersionError(ValueError)     the build speaks another API version
        ├── UnityDataError(ValueError)        the build sent what its specs do not allow
        └── UnityCommunicationError(ConnectionError)  the build closed the connection
            ├── UnityBuildExitedError         ... because its process ended
            └── UnityRestartLimitError        ... once more than the restart limits allow

Each class also subclasses the builtin a caller would naturally catch, so ``except ValueError``
around config loading keeps working.  Messages say what was expected, what came, and the fix.
"""

from __future__ import annotations

from collections.abc import Sequence


class EvtrainError(Exception):
    """Base class of every error evtrain raises on purpose."""


class ConfigError(EvtrainError, ValueError):
    """Options are invalid. ``problems`` holds one ``"path.to.key: what is wrong"`` per error."""

    def __init__(self, problems: Sequence[str]) -> None:
        self.problems: tuple[str, ...] = tuple(problems)
        """One line per problem, each starting with the full path of the bad key."""
        super().__init__("\n".join(self.problems))


class SpaceMismatchError(ConfigError, TypeError):
    """The environment's observation or action space is one the chosen trainer cannot use
    (e.g. SAC on an unbounded Box action space).  A config error: change ``trainer_type`` or
    ``env_settings.env_id``."""

    def __init__(self, message: str) -> None:
        super().__init__([message])


class RunFolderError(EvtrainError, FileExistsError):
    """The run folder exists without ``--resume``/``--force``, ``--resume`` has nothing to
    resume, the folder is not an evtrain run, or another process holds the run."""


class PluginError(EvtrainError, RuntimeError):
    """A plugin the configuration requires could not be loaded or registered."""


class BusClosedError(EvtrainError, RuntimeError):
    """The bus no longer accepts events or subscribers."""


class BusTimeoutError(EvtrainError, TimeoutError):
    """``Bus.flush`` or ``Bus.close`` ran out of time; ``pending`` names who is behind."""

    def __init__(self, message: str, pending: Sequence[str] = ()) -> None:
        self.pending: tuple[str, ...] = tuple(pending)
        """Names of the subscribers that had not handled everything."""
        super().__init__(message)


class JournalInUseError(EvtrainError, RuntimeError):
    """A spool subscriber's journal folder is held by another bus, in this process or another:
    two buses appending to one journal would interleave their events."""


class JournalFormatError(EvtrainError, ValueError):
    """A file where a spool subscriber's journal lives is not an evtrain journal this version
    reads (another format version, or not a journal at all): it is refused whole, never
    interpreted."""


class CheckpointError(EvtrainError, ValueError):
    """A checkpoint (``--resume``, ``--initialize-from``, ``init_path``) is refused: it is
    corrupt or cut short, holds more than tensors and plain data, or its networks do not fit
    the ones the options build."""


class DistributedError(EvtrainError, RuntimeError):
    """A collective operation across ranks failed, almost always because another rank of the
    job died.  The original error is ``__cause__``."""


class SubscriberError(EvtrainError, RuntimeError):
    """A subscriber raised while the bus runs with ``on_error="raise"``.

    The original exception is ``__cause__``; ``subscriber`` is the subscriber's name.
    """

    def __init__(self, subscriber: str, signal: str, error: BaseException) -> None:
        self.subscriber = subscriber
        """Name of the subscriber that raised."""
        self.signal = signal
        """Name of the signal it was handling."""
        super().__init__(
            f"subscriber {subscriber!r} raised {type(error).__name__} handling {signal!r}: {error}"
        )


class SubscriberProcessError(EvtrainError, RuntimeError):
    """A subscriber running in a child process (``isolation="process"``) raised there; the
    bus's failure policy applies to this in the parent.  The child's exception cannot travel
    (it may not pickle): ``error`` is its type and message."""

    def __init__(self, subscriber: str, error: str) -> None:
        self.subscriber = subscriber
        """Name of the subscriber that raised."""
        self.error = error
        """``"ExceptionType: message"`` as raised in the child."""
        super().__init__(
            f"subscriber {subscriber!r} raised in its child process: {error} (its traceback "
            "is the child's; run it with isolation='thread' to debug it in-process)"
        )


class CopyProcessError(EvtrainError, RuntimeError):
    """A copy of a PettingZoo environment stepped in a process of its own (``vectorization:
    async``) raised there, or its process ended.  The child's exception cannot travel (it may
    not pickle): the message carries its type, message and traceback."""

    def __init__(self, copy: int, env_name: str, doing: str, error: str) -> None:
        self.copy = copy
        """Which copy of the environment (0-based)."""
        self.error = error
        """What happened in the child: ``"ExceptionType: message"`` and its traceback, or how
        the process ended."""
        super().__init__(
            f"copy {copy} of {env_name} failed in its process during {doing}: {error} (run it "
            "with env_settings.vectorization: sync to debug it in-process)"
        )


class EnvWorkerError(EvtrainError, RuntimeError):
    """An environment worker of ``vectorization: ray`` (a Ray actor holding some of the
    environments) could not make its environments, or was lost more often than
    ``env_settings.ray.max_restarts`` allows."""


class NonFiniteError(EvtrainError, ArithmeticError):
    """A reward, observation, loss, gradient or weight of a behavior is NaN or infinite.

    Raised where it is found, before the number reaches the weights (``on_nonfinite: stop``),
    and by a checkpoint or export that would write non-finite weights.
    """

    def __init__(self, quantity: str, behavior: str, step: int, fix: str) -> None:
        self.quantity = quantity
        """What was not finite: ``reward``, ``observation``, ``loss``, ``gradient`` or
        ``weights``."""
        self.behavior = behavior
        self.step = step
        super().__init__(
            f"behavior {behavior}: non-finite {quantity} (NaN or infinity) at step {step}, "
            f"expected finite numbers; {fix}"
        )


class PermanentDeliveryError(EvtrainError, RuntimeError):
    """A ``spool`` subscriber (a tracker writer) says its sink rejected an event for good: a
    validation error, a 4xx answer.  Retrying cannot help, so the bus does not retry it: the
    event goes to the dead-letter file ``run_logs/dead_letter/<subscriber>.jsonl`` with this
    message as its reason, is counted (``SubscriberMetrics.dead_lettered``, the close report),
    and later events flow.  Any other exception is transient: the event stays journaled and is
    retried.

    ``keys`` names the offending parts when the subscriber delivered the rest of the event (an
    MLflow metric key over the length limit): only those are dead-lettered.
    """

    def __init__(self, reason: str, keys: tuple[str, ...] = ()) -> None:
        self.reason = reason
        """Why the sink refused it, as the dead-letter record says."""
        self.keys = keys
        """The parts of the event that were refused; empty: all of it."""
        super().__init__(reason)


class UnityError(EvtrainError, RuntimeError):
    """A Unity build, spoken to through ML-Agents' protocol (:mod:`evtrain.unity`), failed."""


class UnityPortInUseError(UnityError, OSError):
    """The port a build is to connect to is in use (another run, another build, an Editor)."""


class UnityTimeoutError(UnityError, TimeoutError):
    """A build did not connect, or did not answer an exchange, within its timeout."""


class UnityVersionError(UnityError, ValueError):
    """A build speaks a communication API version evtrain's (1.5.0) is not compatible with."""


class UnityDataError(UnityError, ValueError):
    """A build sent data its behavior specs do not allow: a shape that differs, an image that
    does not decode, a NaN or infinity in a reward or an observation."""


class UnityCommunicationError(UnityError, ConnectionError):
    """A build closed its connection in the middle of the exchanges (it quit or crashed)."""


class UnityBuildExitedError(UnityCommunicationError):
    """A build's process ended before it connected or while evtrain waited for it."""


class UnityRestartLimitError(UnityCommunicationError):
    """A build instance crashed, hung up or stopped answering during the run once more than
    ``env_settings.max_lifetime_restarts`` or ``restarts_rate_limit_n`` allow it to be
    restarted; the run saves its models, then stops."""
