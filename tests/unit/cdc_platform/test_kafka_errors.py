"""The one table from librdkafka's errors to the product's: each kind of driver error becomes
one product error, and the product error's class says whether it is retried."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from confluent_kafka import KafkaError, KafkaException

from cdc_platform.kafka import (
    KafkaFatalError,
    MessageTooLargeError,
    RebalanceError,
    RetriableRequestError,
    UnknownTopicError,
    kafka_errors,
    map_kafka_error,
)
from cdc_platform.retry import is_retriable
from simple_binlog.errors import (
    CdcMirrorError,
    ConfigError,
    FencedError,
    ServiceUnavailableError,
    TransactionAbortedError,
)


@dataclass(frozen=True)
class FakeKafkaError:
    """Reads like confluent_kafka.KafkaError: a code and librdkafka's three flags."""

    error_code: int
    is_fatal: bool = False
    is_retriable: bool = False
    requires_abort: bool = False

    def code(self) -> int:
        return self.error_code

    def str(self) -> str:
        return f"error {self.error_code}"

    def fatal(self) -> bool:
        return self.is_fatal

    def retriable(self) -> bool:
        return self.is_retriable

    def txn_requires_abort(self) -> bool:
        return self.requires_abort


CASES = [
    # (driver error, product error, retried by the policy)
    (FakeKafkaError(KafkaError._FENCED, is_fatal=True), FencedError, False),
    (FakeKafkaError(KafkaError.INVALID_PRODUCER_EPOCH, is_fatal=True), FencedError, False),
    (FakeKafkaError(KafkaError._GAPLESS_GUARANTEE, is_fatal=True), KafkaFatalError, False),
    # fatal wins over the other flags and over a code of its own
    (
        FakeKafkaError(KafkaError._TIMED_OUT, is_fatal=True, is_retriable=True),
        KafkaFatalError,
        False,
    ),
    (
        FakeKafkaError(KafkaError.INVALID_TXN_STATE, requires_abort=True),
        TransactionAbortedError,
        True,
    ),
    (
        FakeKafkaError(KafkaError.MSG_SIZE_TOO_LARGE, requires_abort=True),
        TransactionAbortedError,
        True,
    ),
    (FakeKafkaError(KafkaError.MSG_SIZE_TOO_LARGE), MessageTooLargeError, False),
    (FakeKafkaError(KafkaError.SASL_AUTHENTICATION_FAILED), ConfigError, False),
    (FakeKafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED), ConfigError, False),
    (FakeKafkaError(KafkaError._INVALID_ARG), ConfigError, False),
    (FakeKafkaError(KafkaError._UNKNOWN_PARTITION), UnknownTopicError, True),
    (FakeKafkaError(KafkaError.UNKNOWN_TOPIC_OR_PART), UnknownTopicError, True),
    (FakeKafkaError(KafkaError.REBALANCE_IN_PROGRESS), RebalanceError, True),
    (FakeKafkaError(KafkaError.ILLEGAL_GENERATION), RebalanceError, True),
    (FakeKafkaError(KafkaError.UNKNOWN_MEMBER_ID), RebalanceError, True),
    (FakeKafkaError(KafkaError._NO_OFFSET), RebalanceError, True),
    (FakeKafkaError(KafkaError._TIMED_OUT, is_retriable=True), RetriableRequestError, True),
    (
        FakeKafkaError(KafkaError.COORDINATOR_NOT_AVAILABLE, is_retriable=True),
        RetriableRequestError,
        True,
    ),
    (FakeKafkaError(KafkaError._TRANSPORT), ServiceUnavailableError, True),
    (FakeKafkaError(KafkaError._ALL_BROKERS_DOWN), ServiceUnavailableError, True),
    (FakeKafkaError(KafkaError._TIMED_OUT), ServiceUnavailableError, True),
]


@pytest.mark.parametrize(("driver", "product", "retried"), CASES)
def test_each_driver_error_maps_to_one_product_error(
    driver: FakeKafkaError, product: type[CdcMirrorError], retried: bool
) -> None:
    mapped = map_kafka_error(driver, "committing")
    assert type(mapped) is product
    assert is_retriable(mapped) is retried
    assert str(mapped) == f"Kafka failed while committing (error {driver.error_code})."


def test_the_boundary_raises_the_mapped_error_from_the_driver_exception() -> None:
    driver = KafkaError(KafkaError._FENCED, "fenced by a newer producer", fatal=True)
    expected = r"aborting \(fenced by a newer producer\)"
    with pytest.raises(FencedError, match=expected) as raised, kafka_errors("aborting"):
        raise KafkaException(driver)
    assert isinstance(raised.value.__cause__, KafkaException)


def test_a_driver_exception_made_of_a_string_is_a_service_failure() -> None:
    with (
        pytest.raises(ServiceUnavailableError, match="no such broker"),
        kafka_errors("listing the topics"),
    ):
        raise KafkaException("no such broker")


def test_the_boundary_lets_product_errors_and_success_through() -> None:
    with kafka_errors("nothing"):
        value = 42
    assert value == 42
    with pytest.raises(ConfigError, match="unchanged"), kafka_errors("configuring"):
        raise ConfigError("unchanged")
