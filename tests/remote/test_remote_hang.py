"""A hung remote tier stops nothing local: tiering runs on the RemoteLogManager's own threads
(the scheduler's task only submits it), no lock a reader or a flush needs is held across a
remote call, and closing the manager waits for a hung upload only a bounded time.

The tier is a FaultFS whose chosen call waits for an Event the test releases; the
scheduler is driven with a FakeClock. Each step that must not block runs in a helper thread
joined with a timeout, so a regression fails instead of hanging the suite.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import pytest
from support.fault_fs import fault_storage

from tierlog import Record
from tierlog.manager.log_manager import LogManager

STEP_TIMEOUT_S = 10
HANG_TIMEOUT_S = 60  # far longer than any step: a step that waits on the hang fails


def _records(i: int) -> list[Record]:
    return [Record(key=b"k%d" % j, value=b"value-%d-" % i + b"x" * 40) for j in range(10)]


def _fill(log: Any, start: int, count: int) -> None:
    for i in range(start, start + count):
        log.append_records(_records(i))


def bounded(fn: Callable[[], Any], what: str) -> Any:
    """``fn()`` in a helper thread; fails the test if it has not returned in STEP_TIMEOUT_S."""
    out: list[Any] = []
    errors: list[BaseException] = []

    def run() -> None:
        try:
            out.append(fn())
        except BaseException as e:  # noqa: BLE001 - reported to the test thread
            errors.append(e)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(STEP_TIMEOUT_S)
    assert not thread.is_alive(), f"{what} waited on the hung remote tier"
    if errors:
        raise errors[0]
    return out[0]


@pytest.fixture
def tiered(tmp_path, clock):
    """A LogManager over the faulty tier with one tiered topic whose first segments are
    already copied (and deleted locally); every scheduled task is due each 1000 ms."""
    config = {"segment.bytes": 2048, "remote.storage.enable": True,
              "remote.storage.manager": "faulty",
              "remote.storage.url": f"faulty://{tmp_path}/tier", "local.retention.bytes": 0,
              "flush.ms": 1000, "log.flush.scheduler.interval.ms": 1000,
              "log.flush.offset.checkpoint.interval.ms": 1000,
              "log.retention.check.interval.ms": 1000,
              "remote.log.manager.task.interval.ms": 1000}
    hangs: list[Any] = []
    with fault_storage() as fs:
        mgr = LogManager.open(tmp_path / "data", config, time_ms=clock, start_scheduler=False)
        try:
            log = mgr.create_topic("orders", 1)[0]
            _fill(log, 0, 20)
            mgr.tier_now()
            assert log.local_log_start_offset > 0  # offset 0 is now read from the tier
            _fill(log, 20, 10)

            def hang(method: str) -> Any:
                hangs.append(fs.hang(method, nth=1, timeout=HANG_TIMEOUT_S))
                return hangs[-1]

            yield mgr, log, hang
        finally:
            for h in hangs:
                h.release()
            mgr.close()


def test_flushes_and_checkpoints_go_on_while_an_upload_hangs(tiered, clock, tmp_path):
    mgr, log, hang = tiered
    upload = hang("put_file")  # the next segment's .log
    clock.advance(1000)
    bounded(mgr.scheduler.run_due, "the scheduler's run (tiering submitted)")
    assert upload.entered.wait(STEP_TIMEOUT_S), "tiering never reached the upload"
    flushed = log.recovery_point
    _fill(log, 30, 10)
    assert log.log_end_offset > flushed
    clock.advance(1000)
    bounded(mgr.scheduler.run_due, "the scheduler's next run")
    assert log.recovery_point == log.log_end_offset  # flushed while the upload hangs
    checkpoint = (tmp_path / "data" / "recovery-point-offset-checkpoint").read_text()
    assert f"orders 0 {log.log_end_offset}" in checkpoint
    # The partition's run is still going: the second run skipped it rather than queueing.
    assert mgr.remote_log_manager.tiering_in_flight() == ["orders-0"]
    records = bounded(lambda: list(log.read(0, max_bytes=1).records()), "a remote read")
    assert records[0].offset == 0


def test_remote_reads_do_not_wait_for_a_hung_metadata_write(tiered, clock):
    mgr, log, hang = tiered
    write = hang("pipe_file")  # the next metadata write (segment metadata or manifest)
    clock.advance(1000)
    driver = threading.Thread(target=mgr.scheduler.run_due, daemon=True)
    driver.start()
    assert write.entered.wait(STEP_TIMEOUT_S), "tiering never wrote metadata"
    records = bounded(lambda: list(log.read(0, max_bytes=1).records()), "a remote read")
    assert records[0].offset == 0
    found = bounded(lambda: log.offset_for_timestamp(0), "a remote timestamp lookup")
    assert found == 0
    write.release()
    driver.join(STEP_TIMEOUT_S)


def test_close_gives_up_on_a_hung_upload_after_a_bounded_wait(tiered, clock):
    mgr, log, hang = tiered
    upload = hang("put_file")
    mgr.remote_log_manager.shutdown_timeout_s = 0.2
    clock.advance(1000)
    bounded(mgr.scheduler.run_due, "the scheduler's run (tiering submitted)")
    assert upload.entered.wait(STEP_TIMEOUT_S)
    bounded(mgr.close, "LogManager.close")
    assert log.closed
