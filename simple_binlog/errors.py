"""One root error, then what the caller should do about it.

Driver exceptions (pymysql, librdkafka, redis, psycopg) are translated at the boundary with
``raise SomeError("one sentence") from exc``, so a user reads one sentence, not a stack of
driver internals. The Kafka, Redis and PostgreSQL adapters (``cdc_platform.kafka``,
``redis_store``, ``warehouse``) do it in one table each.

Two branches say whether doing the work again can help: ``RetriableError`` (retried by
``cdc_platform.retry``, with back-off) and ``FatalError`` (never retried: stop and say why).

``EXIT_CODES`` is the one table of the process exit codes every command line uses, and
``exit_code_for`` maps an error of this taxonomy onto it.
"""

from collections.abc import Sequence
from enum import IntEnum


class CdcMirrorError(Exception):
    """Root of every error cdc-mirror raises on purpose. ``str(err)`` is meant for a user."""


class FatalError(CdcMirrorError):
    """Retrying cannot help: stop, and say why."""


class ConfigError(FatalError):
    """The configuration is wrong; fix it and start again (fatal).

    ``problems``: every problem found, one sentence each (the message alone when not given);
    the message itself may summarise them.
    """

    def __init__(self, message: str, problems: Sequence[str] = ()) -> None:
        super().__init__(message)
        self.problems: tuple[str, ...] = tuple(problems) or (message,)


class FencedError(FatalError):
    """A newer owner of the same transactional identity took over; this one must stop writing
    (what it still sends is aborted by the broker)."""


class RetriableError(CdcMirrorError):
    """Doing the same work again may succeed (``cdc_platform.retry`` retries these)."""


class ServiceUnavailableError(RetriableError):
    """A service could not be reached; retrying later may succeed (retriable)."""


class TransactionAbortedError(RetriableError):
    """The open transaction is aborted (nothing of it is visible to readers): abort it, then
    redo the work from the last committed position (retriable)."""


class ContractError(CdcMirrorError):
    """A message or value does not satisfy the SimpleBinlog contract (data error).

    Raised for malformed messages; the caller sends them to the dead-letter place with their
    offset and this error, never drops them.
    """


class UnsupportedTypeError(ContractError):
    """A column type the contract cannot carry losslessly."""


class NotReadyError(CdcMirrorError):
    """The data asked for is not complete yet (e.g. the stream writer's watermark has not
    passed the day or hour to merge): nothing was done, and running again later may succeed.
    Not a failure: a scheduler waits and asks again (``ExitCode.NOT_READY``)."""


class StackError(CdcMirrorError):
    """A local-stack service could not be installed, started or stopped."""


class ExitCode(IntEnum):
    """What a command's exit status means; one meaning each (``EXIT_CODES``)."""

    OK = 0
    UNEXPECTED = 1
    USAGE = 2
    UNAVAILABLE = 3
    CHECK_FAILED = 4
    FAILED = 5
    NOT_READY = 6
    INTERRUPTED = 130
    TERMINATED = 143  # 128 + SIGTERM, as shells report a process SIGTERM ended


EXIT_CODES: dict[ExitCode, str] = {
    ExitCode.OK: "done",
    ExitCode.UNEXPECTED: "unexpected error, a bug (the traceback says where)",
    ExitCode.USAGE: "usage or configuration error: fix the command line or the config",
    ExitCode.UNAVAILABLE: "a service is unavailable or unhealthy: retrying later may succeed",
    ExitCode.CHECK_FAILED: "a check failed: the data differs from its source or its contract",
    ExitCode.FAILED: "stopped with a reason (fatal error, a table or item that failed)",
    ExitCode.NOT_READY: "the day or hour is not ready yet (the stream writer's watermark has "
    "not passed it): run again later",
    ExitCode.INTERRUPTED: "interrupted or cancelled (Ctrl-C); the work can be resumed",
    ExitCode.TERMINATED: "stopped by SIGTERM (kill, docker stop); the work can be resumed",
}


# The first kind an error is of decides its code (ConfigError before FatalError's FAILED).
_CODE_OF_KIND: tuple[tuple[type[CdcMirrorError], ExitCode], ...] = (
    (ConfigError, ExitCode.USAGE),
    (RetriableError, ExitCode.UNAVAILABLE),
    (ContractError, ExitCode.CHECK_FAILED),
    (NotReadyError, ExitCode.NOT_READY),
)


def exit_code_for(error: BaseException) -> ExitCode:
    """The exit code of a command that ends with ``error``."""
    if isinstance(error, KeyboardInterrupt):
        return ExitCode.INTERRUPTED
    if not isinstance(error, CdcMirrorError):
        return ExitCode.UNEXPECTED
    return next((code for kind, code in _CODE_OF_KIND if isinstance(error, kind)), ExitCode.FAILED)
