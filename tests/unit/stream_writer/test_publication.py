"""Pure: how the job learns that a batch's background publication failed."""

from __future__ import annotations

from concurrent.futures import Future

from stream_writer.writer import publication_error


def test_a_failed_publication_is_reported_once_it_has_finished() -> None:
    pending: Future[None] = Future()
    assert publication_error(pending) is None  # still running: never waited for
    failure = OSError("metastore unreachable")
    pending.set_exception(failure)
    assert publication_error(pending) is failure


def test_no_publication_or_a_successful_one_reports_nothing() -> None:
    assert publication_error(None) is None
    done: Future[None] = Future()
    done.set_result(None)
    assert publication_error(done) is None
    cancelled: Future[None] = Future()
    cancelled.cancel()
    assert publication_error(cancelled) is None
