"""One root error, then what the caller should do about it.

Driver exceptions (pymysql, librdkafka, redis, psycopg) are translated at the boundary with
``raise SomeError("one sentence") from exc``, so a user reads one sentence, not a stack of
driver internals. The Kafka adapter (``cdc_platform.kafka``) does it in one table.

Two branches say whether doing the work again can help: ``RetriableError`` (retried by
``cdc_platform.retry``, with back-off) and ``FatalError`` (never retried: stop and say why).
"""


class CdcMirrorError(Exception):
    """Root of every error cdc-mirror raises on purpose. ``str(err)`` is meant for a user."""


class FatalError(CdcMirrorError):
    """Retrying cannot help: stop, and say why."""


class ConfigError(FatalError):
    """The configuration is wrong; fix it and start again (fatal)."""


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


class StackError(CdcMirrorError):
    """A local-stack service could not be installed, started or stopped."""
