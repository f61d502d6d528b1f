"""One root error, then what the caller should do about it.

Driver exceptions (pymysql, librdkafka, redis, psycopg) are translated at the boundary with
``raise SomeError("one sentence") from exc``, so a user reads one sentence, not a stack of
driver internals.
"""


class CdcMirrorError(Exception):
    """Root of every error cdc-mirror raises on purpose. ``str(err)`` is meant for a user."""


class ConfigError(CdcMirrorError):
    """The configuration is wrong; fix it and start again (fatal)."""


class ServiceUnavailableError(CdcMirrorError):
    """A service could not be reached; retrying later may succeed (retriable)."""


class ContractError(CdcMirrorError):
    """A message or value does not satisfy the SimpleBinlog contract (data error).

    Raised for malformed messages; the caller sends them to the dead-letter place with their
    offset and this error, never drops them.
    """


class UnsupportedTypeError(ContractError):
    """A column type the contract cannot carry losslessly."""


class StackError(CdcMirrorError):
    """A local-stack service could not be installed, started or stopped."""
