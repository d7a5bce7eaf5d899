"""``tierlog consume`` over a data dir reads a slow tier as a Kafka consumer does: a remote read
that passes ``remote.fetch.max.wait.ms`` (retriable) is read again, a bounded number of times.
Hangs are Events of the fault-injecting tier; nothing sleeps."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pytest
from support.fault_fs import fault_storage

from tierlog import Record
from tierlog.cli.consume import FETCH_ATTEMPTS, records_from
from tierlog.errors import RemoteFetchTimeoutError
from tierlog.manager.log_manager import LogManager

RECORDS = 20


class _OnRetry(logging.Handler):
    """Runs ``action`` when the reader logs its first retry."""

    def __init__(self, action: Callable[[], None]) -> None:
        super().__init__(logging.WARNING)
        self.action = action
        self.retries = 0

    def emit(self, record: logging.LogRecord) -> None:
        if "reading again" in record.getMessage():
            self.retries += 1
            if self.retries == 1:
                self.action()


def _open(tmp_path: Path, clock: object) -> LogManager:
    return LogManager.open(
        tmp_path / "data",
        {"segment.bytes": 4096, "remote.storage.enable": True,
         "remote.storage.manager": "fsspec", "remote.storage.url": f"faultfs://{tmp_path}/tier",
         "local.retention.bytes": 0, "remote.fetch.max.wait.ms": 200},
        time_ms=clock, start_scheduler=False)


def test_a_read_that_times_out_once_is_read_again(tmp_path, clock) -> None:
    with fault_storage() as faults, _open(tmp_path, clock) as mgr:
        log = mgr.create_topic("orders", 1)[0]
        for i in range(RECORDS):
            log.append_records([Record(key=b"k%d" % i, value=b"v" * 500)])
        mgr.tier_now()
        assert log.local_log_start_offset > 0
        hang = faults.hang("cat_file")
        rlm = mgr._remote.manager()

        def heal() -> None:  # the tier answers again, and in time on a busy host
            hang.release()
            rlm.limits = replace(rlm.limits, fetch_max_wait_ms=30_000)

        on_retry = _OnRetry(heal)
        logger = logging.getLogger("tierlog.cli.consume")
        logger.addHandler(on_retry)
        try:
            keys = [r.key for r in records_from(log, 0, "read_uncommitted")]
        finally:
            logger.removeHandler(on_retry)
            hang.release()
        assert keys == [b"k%d" % i for i in range(RECORDS)]
        assert hang.wait_entered(0)
        assert on_retry.retries == 1


def test_a_tier_that_never_answers_fails_after_the_attempts(tmp_path, clock, caplog) -> None:
    with fault_storage() as faults, _open(tmp_path, clock) as mgr:
        log = mgr.create_topic("orders", 1)[0]
        for i in range(RECORDS):
            log.append_records([Record(key=b"k%d" % i, value=b"v" * 500)])
        mgr.tier_now()
        hang = faults.hang("cat_file")
        try:
            with caplog.at_level(logging.WARNING, logger="tierlog.cli.consume"), \
                    pytest.raises(RemoteFetchTimeoutError, match="orders-0: read of offset 0"):
                list(records_from(log, 0, "read_uncommitted"))
        finally:
            hang.release()
        retries = [m for m in caplog.messages if "reading again" in m]
        assert len(retries) == FETCH_ATTEMPTS - 1
