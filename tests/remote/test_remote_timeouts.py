"""Every remote call is bounded: a hung or failing ``faultfs://`` tier never blocks appends,
local reads or shutdown; a timed-out copy is abandoned (committing nothing, cleaned once its
thread returns) and retried with backoff; a read of the tier waits at most
``remote.fetch.max.wait.ms``; the reader's queue is bounded; the copy lag refuses appends
with a retriable error. The S3 timeouts reach botocore (moto).

No test sleeps to wait: hangs are Events, the clock is the FakeClock, waits are futures with
timeouts. A step that must not block runs in a helper future with a timeout.
"""

from __future__ import annotations

import logging
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import replace
from itertools import pairwise
from pathlib import Path
from typing import Any

import pytest
from support.fault_fs import fault_storage
from support.s3 import S3_BUCKET

from tierlog import Record
from tierlog.errors import (
    CopyLagExceededError,
    RemoteFetchTimeoutError,
    RemoteReaderBusyError,
    RemoteStorageError,
    RemoteTimeoutError,
    RetriableError,
)
from tierlog.manager.log_manager import LogManager
from tierlog.remote.api import RemoteLogSegmentState
from tierlog.remote.rlm.deadline import BoundedReaderPool, RemoteCalls
from tierlog.remote.rlm.remote_reader import topic_id_partition

STEP_S = 10
_FINISHED = RemoteLogSegmentState.COPY_SEGMENT_FINISHED
_STARTED = RemoteLogSegmentState.COPY_SEGMENT_STARTED


def _config(tmp_path: Path, **extra: Any) -> dict[str, Any]:
    return {"segment.bytes": 4096, "remote.storage.enable": True,
            "remote.storage.manager": "fsspec",
            "remote.storage.url": f"faultfs://{tmp_path}/tier", "local.retention.bytes": 0,
            "remote.storage.request.timeout.ms": 1500, "remote.fetch.max.wait.ms": 10_000,
            **extra}


def _fill(log: Any, batches: int, start: int = 0) -> None:
    for i in range(start, start + batches):
        log.append_records([Record(key=b"k%d" % i, value=b"v" * 500)])


@pytest.fixture
def helper():
    with ThreadPoolExecutor(4) as pool:
        yield pool


def _segments(mgr: LogManager, log: Any) -> list[Any]:
    return list(mgr._remote.manager().rlmm.list_remote_log_segments(topic_id_partition(log)))


def test_a_hung_upload_is_abandoned_retried_with_backoff_and_never_committed(
        tmp_path, clock, helper) -> None:
    with fault_storage() as faults, LogManager.open(
            tmp_path / "data", _config(tmp_path), time_ms=clock,
            start_scheduler=False) as mgr:
        log = mgr.create_topic("orders", 1)[0]
        _fill(log, 20)
        hang = faults.hang("put_file")
        result = helper.submit(mgr.tier_now).result(STEP_S)["orders-0"]
        assert hang.wait_entered(0)
        assert result.errors and "within 1500 ms; abandoned" in result.errors[0]
        assert log.highest_offset_in_remote == -1
        rlm = mgr._remote.manager()
        states = [m.state for m in _segments(mgr, log)]
        assert states == [_STARTED]  # nothing committed: no reader sees the segment
        # While the upload hangs: appends and local reads go on at once.
        helper.submit(_fill, log, 5, 20).result(STEP_S)
        assert helper.submit(log.read, log.local_log_start_offset, 1024).result(STEP_S)
        # Backoff: the scheduler's next tick does not retry yet (500 ms +/- 20%).
        puts = faults.calls["put_file"]
        assert rlm.submit_tiering(mgr._remote.tiered_logs()) == []
        assert faults.calls["put_file"] == puts
        # The hung thread returns late: its upload finishes, but commits nothing.
        abandoned = list(rlm._abandoned.values())
        faults.heal()
        for future in abandoned:
            future.result(STEP_S)
        assert [m.state for m in _segments(mgr, log)] == [_STARTED]
        clock.advance(1000)
        result = helper.submit(mgr.tier_now).result(STEP_S)["orders-0"]
        assert not result.errors and result.orphans_removed == 1 and result.copied
        committed = [m for m in _segments(mgr, log) if m.state is _FINISHED]
        assert committed and log.highest_offset_in_remote == committed[-1].end_offset
        # Nothing committed points at missing data: every object of a FINISHED segment is there.
        for metadata in committed:
            log_object = rlm.rsm.fs.info(rlm.rsm.object_path(metadata, ".log"))
            assert log_object["size"] == metadata.segment_size_in_bytes
            for suffix in (".index", ".timeindex", ".snapshot", ".leader_epoch_checkpoint"):
                rlm.rsm.fs.info(rlm.rsm.object_path(metadata, suffix))  # exists
        assert rlm.retries.attempts(committed[0].remote_log_segment_id.topic_id_partition) == 0


def test_a_failing_store_is_retried_with_exponential_backoff_not_every_tick(
        tmp_path, clock) -> None:
    with fault_storage() as faults, LogManager.open(
            tmp_path / "data", _config(tmp_path, **{
                "remote.log.manager.task.retry.jitter": 0}),
            time_ms=clock, start_scheduler=False) as mgr:
        log = mgr.create_topic("orders", 1)[0]
        _fill(log, 20)
        faults.fail("put_file")
        rlm = mgr._remote.manager()
        tiered = mgr._remote.tiered_logs()
        attempts_at = []
        for _ in range(12):  # ticks 250 ms apart over 3 s
            if rlm.submit_tiering(tiered):
                attempts_at.append(clock())
                assert rlm.await_tiering(STEP_S)
            clock.advance(250)
        gaps = [b - a for a, b in pairwise(attempts_at)]
        assert gaps == [500, 1000]  # 500 ms, then 1000 ms (the tick granularity is 250 ms)
        faults.heal()
        clock.advance(2000)
        assert rlm.submit_tiering(tiered) and rlm.await_tiering(STEP_S)
        assert log.highest_offset_in_remote >= 0
        assert rlm.retries.attempts(topic_id_partition(log)) == 0


def test_closing_with_a_hung_store_is_bounded(tmp_path, clock, helper) -> None:
    with fault_storage() as faults:
        mgr = LogManager.open(tmp_path / "data", _config(
            tmp_path, **{"remote.storage.request.timeout.ms": 60_000}), time_ms=clock,
            start_scheduler=False)
        log = mgr.create_topic("orders", 1)[0]
        _fill(log, 20)
        hang = faults.hang("put_file")
        rlm = mgr._remote.manager()
        rlm.shutdown_timeout_s = 0.2
        rlm.submit_tiering(mgr._remote.tiered_logs())
        assert hang.wait_entered(STEP_S)
        helper.submit(_fill, log, 3, 20).result(STEP_S)  # appends while the upload hangs
        helper.submit(mgr.close).result(STEP_S)  # does not wait for the hung upload
        hang.release()


def test_a_read_of_a_hung_tier_raises_a_retriable_timeout_after_fetch_max_wait(
        tmp_path, clock, helper) -> None:
    with fault_storage() as faults, LogManager.open(
            tmp_path / "data", _config(tmp_path, **{"remote.fetch.max.wait.ms": 200}),
            time_ms=clock, start_scheduler=False) as mgr:
        log = mgr.create_topic("orders", 1)[0]
        _fill(log, 20)
        mgr.tier_now()
        assert log.local_log_start_offset > 0
        hang = faults.hang("cat_file")
        with pytest.raises(RemoteFetchTimeoutError, match=r"orders-0: read of offset 0.*200 ms"):
            helper.submit(log.read, 0, 4096).result(STEP_S)
        assert hang.wait_entered(0)
        assert isinstance(RemoteFetchTimeoutError("x"), RetriableError)
        # Local reads are not held up by the hung remote read.
        assert helper.submit(log.read, log.local_log_start_offset, 1024).result(STEP_S)
        faults.heal()
        rlm = mgr._remote.manager()
        rlm.limits = replace(rlm.limits, fetch_max_wait_ms=10_000)  # no flake on a busy host
        assert log.read(0, 4096).from_remote


def test_remote_calls_abandon_a_late_call_and_never_run_a_queued_one() -> None:
    calls = RemoteCalls(threads=1, timeout_s=0.1)
    gate = threading.Event()
    abandoned: list[Future[Any]] = []
    ran: list[str] = []
    try:
        assert calls.call("quick", lambda: 7) == 7
        with pytest.raises(RemoteTimeoutError, match=r"copy of segment 5: no answer .* 100 ms"):
            calls.call("copy of segment 5", lambda: gate.wait(STEP_S), abandoned.append)
        assert len(abandoned) == 1 and not abandoned[0].done()  # its thread is still blocked
        assert calls.abandoned_total == 1
        # The one thread is taken: the next call times out in the queue and never runs.
        with pytest.raises(RemoteTimeoutError):
            calls.call("queued", lambda: ran.append("queued"), abandoned.append)
        assert len(abandoned) == 1 and calls.abandoned_total == 1
        gate.set()
        assert abandoned[0].result(STEP_S) is True
        assert calls.call("after", lambda: 8) == 8 and ran == []
        assert issubclass(RemoteTimeoutError, RetriableError)
    finally:
        gate.set()
        calls.close()
    with pytest.raises(RemoteStorageError, match="closed"):
        calls.call("late", lambda: 9)


def test_the_reader_queue_is_bounded_and_a_full_queue_rejects_at_once() -> None:
    pool = BoundedReaderPool(threads=1, max_pending=2)
    gate = threading.Event()
    started = threading.Event()

    def blocked() -> int:
        started.set()
        gate.wait(STEP_S)
        return 1

    try:
        running = pool.submit(blocked)
        assert started.wait(STEP_S)
        queued = [pool.submit(lambda: 2), pool.submit(lambda: 3)]
        assert pool.queue_size() == 2 and pool.active() == 1
        with pytest.raises(RemoteReaderBusyError, match=r"max\.pending\.tasks=2"):
            pool.submit(lambda: 4)
        gate.set()
        assert [f.result(STEP_S) for f in (running, *queued)] == [1, 2, 3]
        assert pool.queue_size() == 0
    finally:
        gate.set()
        pool.close()


def test_a_read_rejected_by_a_full_queue_reaches_log_read(tmp_path, clock, helper) -> None:
    with fault_storage() as faults, LogManager.open(
            tmp_path / "data", _config(tmp_path, **{
                "remote.log.reader.threads": 1, "remote.log.reader.max.pending.tasks": 1,
                "remote.fetch.max.wait.ms": 5000}),
            time_ms=clock, start_scheduler=False) as mgr:
        log = mgr.create_topic("orders", 1)[0]
        _fill(log, 20)
        mgr.tier_now()
        rlm = mgr._remote.manager()
        gate = threading.Event()
        entered = threading.Event()
        first: Future[Any] = rlm._reader_pool.submit(lambda: (entered.set(), gate.wait(STEP_S)))
        assert entered.wait(STEP_S)
        second = rlm._reader_pool.submit(lambda: None)
        assert rlm.reader_queue_size() == 1
        with pytest.raises(RemoteReaderBusyError):
            log.read(0, 4096)
        gate.set()
        first.result(STEP_S), second.result(STEP_S)
        assert faults.calls is not None and log.read(0, 4096).from_remote


def test_copy_lag_over_its_limit_refuses_client_appends_and_warns(tmp_path, clock, helper,
                                                                  caplog) -> None:
    with fault_storage() as faults, LogManager.open(
            tmp_path / "data", _config(tmp_path, **{"remote.log.copy.lag.max.bytes": 20_000}),
            time_ms=clock, start_scheduler=False) as mgr:
        log = mgr.create_topic("orders", 1)[0]
        faults.fail("put_file")
        _fill(log, 60)  # ~32 KB not copied
        with caplog.at_level(logging.WARNING, logger="tierlog.manager.manager_remote"):
            mgr.tier_now()  # fails, then measures the lag
        lag = mgr._remote.update_copy_lag()["orders-0"]
        assert lag > 20_000
        with pytest.raises(CopyLagExceededError, match=r"orders-0: \d+ local bytes not yet "
                                                       r"copied.*copy.lag.max.bytes=20000"):
            log.append_records([Record(value=b"refused")])
        assert isinstance(log.copy_lag_error, RetriableError)
        assert any("orders-0" in r.getMessage() and str(lag) in r.getMessage()
                   for r in caplog.records)
        # Rate-limited: the next check within a minute does not warn again.
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="tierlog.manager.manager_remote"):
            mgr._remote.update_copy_lag()
        assert not caplog.records
        # The remote is back: tiering catches up and appends are accepted again.
        faults.heal()
        clock.advance(60_000)
        mgr.tier_now()
        assert log.copy_lag_error is None
        helper.submit(log.append_records, [Record(value=b"accepted")]).result(STEP_S)


def test_unlimited_copy_lag_never_refuses(tmp_path, clock) -> None:
    with fault_storage() as faults, LogManager.open(
            tmp_path / "data", _config(tmp_path), time_ms=clock, start_scheduler=False) as mgr:
        log = mgr.create_topic("orders", 1)[0]
        faults.fail("put_file")
        _fill(log, 60)
        mgr.tier_now()
        assert mgr._remote.update_copy_lag()["orders-0"] > 20_000
        log.append_records([Record(value=b"fine")])


def test_s3_timeouts_reach_botocore_and_tiering_works_on_moto(tmp_path, clock,
                                                              s3_options) -> None:
    options = {f"remote.storage.options.{k}": v for k, v in s3_options.items()}
    config = {"segment.bytes": 4096, "remote.storage.enable": True,
              "remote.storage.manager": "s3", "remote.storage.url": f"s3://{S3_BUCKET}/t",
              "remote.storage.request.timeout.ms": 10_000,
              "remote.storage.options.connect_timeout": "2",
              "remote.storage.options.read_timeout": "3",
              "remote.storage.options.skip_instance_cache": True, **options}
    with LogManager.open(tmp_path / "data", config, time_ms=clock,
                         start_scheduler=False) as mgr:
        log = mgr.create_topic("orders", 1)[0]
        _fill(log, 20)
        assert not mgr.tier_now()["orders-0"].errors
        assert log.highest_offset_in_remote >= 0
        fs = mgr._remote.manager().rsm.fs
        assert fs.config_kwargs["connect_timeout"] == 2.0
        assert fs.config_kwargs["read_timeout"] == 3.0
        client_config = fs.s3.meta.config
        assert (client_config.connect_timeout, client_config.read_timeout) == (2.0, 3.0)


def test_opening_over_a_hung_tier_is_bounded_and_isolates_the_partition(tmp_path, clock,
                                                                        helper) -> None:
    config = _config(tmp_path)
    with fault_storage() as faults:
        with LogManager.open(tmp_path / "data", config, time_ms=clock,
                             start_scheduler=False) as mgr:
            log = mgr.create_topic("orders", 1)[0]
            _fill(log, 20)
            mgr.tier_now()
        hangs = [faults.hang(method) for method in ("cat_file", "ls", "info", "pipe_file")]

        def reopen() -> LogManager:
            return LogManager.open(tmp_path / "data", config, time_ms=clock,
                                   start_scheduler=False)

        mgr = helper.submit(reopen).result(STEP_S)
        try:
            assert any(h.wait_entered(0) for h in hangs)
            error = mgr._remote.unavailable_error(("orders", 0))
            assert error is not None and "abandoned" in str(error)
            log = mgr.log("orders", 0)
            assert helper.submit(log.read, log.local_log_start_offset, 1024).result(STEP_S)
            helper.submit(_fill, log, 3, 20).result(STEP_S)
        finally:
            faults.heal()
            mgr.close()


# -- tail publishing and the attach-time staging sweep ---------------------------------------


def _tail_objects(tmp_path: Path) -> list[str]:
    return sorted(p.name for p in (tmp_path / "tier").rglob("*") if p.is_file()
                  and "_tail" in p.parts and p.name != "_tail.json")


def test_a_hung_tier_during_tail_publishing_leaves_appends_scheduling_and_close_prompt(
        tmp_path, clock, helper) -> None:
    """The scheduler's tail task hands publishes to the publisher's threads, whose calls to a
    hung tier are bounded: appends, the next scheduler tick and close() all return at once."""
    with fault_storage() as faults:
        mgr = LogManager.open(tmp_path / "data", _config(
            tmp_path, **{"remote.log.tail.ms": 0,
                         "remote.storage.request.timeout.ms": 60_000}),
            time_ms=clock, start_scheduler=False)
        log = mgr.create_topic("orders", 1)[0]
        _fill(log, 3)
        hang = faults.hang("pipe_file")  # every tail object and manifest upload
        rlm = mgr._remote.manager()
        rlm.shutdown_timeout_s = 0.2
        helper.submit(mgr._remote.submit_due_tails).result(STEP_S)
        assert hang.wait_entered(STEP_S), "the tail publish should reach the hung tier"
        helper.submit(_fill, log, 5, 3).result(STEP_S)  # appends while the publish hangs
        clock.advance(1000)
        helper.submit(mgr._remote.submit_due_tails).result(STEP_S)  # the next tick
        assert log.log_end_offset == 8
        helper.submit(mgr.close).result(STEP_S)  # does not wait for the hung publish
        hang.release()


def test_a_hung_tail_call_times_out_pauses_the_partition_until_it_returns_then_recovers(
        tmp_path, clock, helper, caplog) -> None:
    """A tail upload past remote.storage.request.timeout.ms fails the publish (retriable,
    logged, the partition's lock released); while the abandoned upload may still land the
    partition publishes nothing and sweeps nothing; once it returned, the next tiering run
    sweeps its orphan and the next publish writes a manifest naming only live objects."""
    with fault_storage() as faults, LogManager.open(
            tmp_path / "data", _config(tmp_path, **{"remote.log.tail.ms": 0,
                                                    "local.retention.bytes": -1}),
            time_ms=clock, start_scheduler=False) as mgr:
        log = mgr.create_topic("orders", 1)[0]
        _fill(log, 3)
        hang = faults.hang("pipe_file")
        with caplog.at_level(logging.WARNING, logger="tierlog"):
            published = helper.submit(mgr._remote.publish_tail_now).result(STEP_S)
        assert published == {"orders-0": False} and hang.wait_entered(0)
        assert any("tail: upload tail object" in r.getMessage() and "abandoned" in
                   r.getMessage() for r in caplog.records)
        tail = mgr._remote.manager().tail
        state = tail._state(topic_id_partition(log))
        assert state.abandoned is not None and not state.abandoned.done()
        uploads = faults.calls["pipe_file"]
        # Paused: nothing runs beside the abandoned upload (it could still land).
        assert helper.submit(mgr._remote.publish_tail_now).result(STEP_S) == {"orders-0": False}
        assert tail.remove_orphans(topic_id_partition(log)) == 0
        assert faults.calls["pipe_file"] == uploads
        faults.heal()
        state.abandoned.result(STEP_S)  # the late upload landed: an orphan
        assert len(_tail_objects(tmp_path)) == 1
        assert not helper.submit(mgr.tier_now).result(STEP_S)["orders-0"].errors
        assert _tail_objects(tmp_path) == []  # the orphan was swept
        assert helper.submit(mgr._remote.publish_tail_now).result(STEP_S) == {"orders-0": True}
        named = {o.name for o in tail._state(topic_id_partition(log)).manifest.objects}
        assert named and set(_tail_objects(tmp_path)) == named


def test_a_hung_staging_sweep_at_attach_is_bounded_and_tried_again(tmp_path, clock,
                                                                   helper, caplog) -> None:
    """The attach-time sweep of crashed backfill jobs' staging lists the tier: hung, it is
    abandoned after the request timeout, the attach goes on, and the next attach tries it."""
    with fault_storage() as faults, LogManager.open(
            tmp_path / "data", _config(tmp_path), time_ms=clock,
            start_scheduler=False) as mgr:
        rlm = mgr._remote.manager()
        hang = faults.hang("ls", where="/tier/_staging")
        with caplog.at_level(logging.WARNING, logger="tierlog"):
            log = helper.submit(mgr.create_topic, "orders", 1).result(STEP_S)[0]
        assert hang.wait_entered(0)
        assert any("staging" in r.getMessage() and "abandoned" in r.getMessage()
                   for r in caplog.records)
        assert not rlm._staging_swept
        helper.submit(_fill, log, 3).result(STEP_S)
        faults.heal()
        helper.submit(mgr.create_topic, "payments", 1).result(STEP_S)
        assert rlm._staging_swept
