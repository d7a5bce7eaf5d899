"""The general append path of a :class:`~tierlog.log.log.Log`, and its rolls.

Everything an append does that the producer hot path (the armed
:class:`~tierlog.log.segment_appender.PlainAppender`, which stays inline in ``Log.append``) does
not: plan the data (validating every batch), check producer sequences and epochs, roll the active
segment when due (snapshotting producer state at the new base, posting SegmentRolled), write,
then update the log end offset, producer state, high watermark, leader epochs and flush, and
re-arm the hot path. It owns no state of its own: it runs under the lock of the Log it serves
and changes that Log's state.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tierlog.common.stats import perf_ns
from tierlog.errors import RecordListTooLargeError
from tierlog.events import SegmentRolled
from tierlog.log.append_plan import AppendPlan, LogAppendInfo, plan_append
from tierlog.log.segment import LogSegment
from tierlog.producer.append import ProducerBatchRun

if TYPE_CHECKING:
    from tierlog.log.log import Log

__all__ = ["LogAppends"]


class LogAppends:
    """The general appends and rolls of one Log (under its lock; not thread-safe alone)."""

    __slots__ = ("_log",)

    def __init__(self, log: Log) -> None:
        self._log = log

    def append_planned(self, data: bytes | bytearray | memoryview, assign_offsets: bool,
                        leader_epoch: int | None, origin: str,
                        check_records: bool) -> LogAppendInfo:
        """The general path of :meth:`append`, under the lock: plan (validating every batch,
        walking the records when ``check_records``), roll if due, write, update the state."""
        log = self._log
        started = perf_ns()
        now = log._time_ms()
        if leader_epoch is None and origin != "replication":
            leader_epoch = log._leader_epoch
        plan = plan_append(
            data, config=log._config, next_offset=log.local.next_offset, now_ms=now,
            assign_offsets=assign_offsets, leader_epoch=leader_epoch, origin=origin,
            check_records=check_records,
        )
        duplicate = self._producer_checks(plan, origin)
        if duplicate is not None:
            return duplicate
        segment = self._maybe_roll(plan, now)
        segment.append(plan.pieces, plan.batches, plan.views)
        log.local.next_offset = plan.last_offset + 1
        self._after_append(plan, segment)
        if log._fast_append:
            log._plain_appender = segment.arm_plain_appends(
                log._segment_bytes, log._segment_ms, log._max_message, log._check_records)
        stats = log.stats
        stats.append_bytes += plan.size
        stats.append_messages += plan.record_count
        stats.record_general_append(perf_ns() - started)
        return LogAppendInfo(
            plan.first_offset, plan.last_offset, plan.max_timestamp,
            plan.offset_of_max_timestamp, plan.log_append_time, log._log_start_offset,
            plan.record_count, len(plan.batches), plan.size,
        )

    def _producer_checks(self, plan: AppendPlan, origin: str) -> LogAppendInfo | None:
        """Validate producer sequences/epochs into ``plan.producer_run`` (applied after the
        write); a duplicate batch returns its original offsets."""
        log = self._log
        psm = log.producer_state
        run: ProducerBatchRun | None = None
        for batch in plan.views:
            pid = batch.producer_id
            if pid < 0:
                continue
            if origin == "client" and not batch.is_control:
                dup = psm.find_duplicate_batch(pid, batch.producer_epoch,
                                               batch.base_sequence, batch.last_sequence)
                if dup is not None:
                    return LogAppendInfo(
                        dup.first_offset, dup.last_offset, dup.timestamp, dup.last_offset, -1,
                        log._log_start_offset, dup.last_offset - dup.first_offset + 1, 0, 0,
                        duplicate=True,
                    )
            if run is None:
                run = ProducerBatchRun(psm, origin)
            run.add(batch, plan.base_offsets[batch.position])
        plan.producer_run = run
        return None

    def _after_append(self, plan: AppendPlan, segment: LogSegment) -> None:
        log = self._log
        local = log.local
        if plan.producer_run is not None:
            plan.producer_run.apply(segment.append_aborted_txn)
        log.producer_state.update_map_end_offset(local.next_offset)
        if log._auto_high_watermark:
            log._set_high_watermark(local.next_offset)
        for epoch, start in plan.epoch_starts:
            log._assign_epoch(epoch, start)
        if local.next_offset - local.recovery_point >= log._flush_messages:
            log.flush()

    def _maybe_roll(self, plan: AppendPlan, now: int) -> LogSegment:
        log = self._log
        segment = log.local.segments.active
        max_bytes = log._config["segment.bytes"]
        if plan.size > max_bytes:
            raise RecordListTooLargeError(
                f"{log.directory.name}: append of {plan.size} bytes exceeds segment.bytes "
                f"({max_bytes})"
            )
        if segment.should_roll(plan.size, plan.max_timestamp, plan.last_offset, max_bytes,
                               log._segment_ms, lambda: now):
            return log._roll(plan.first_offset)  # through Log._roll, one name for every roll
        return segment

    def roll(self, new_base: int) -> LogSegment:
        """Roll the local log (the producer state is snapshotted at the new base before the
        new segment joins) and post SegmentRolled."""
        log = self._log
        active = log.local.segments.active
        segment = log.local.roll(new_base, self._snapshot_producer_state_at)
        if segment is not active:
            log.stats.rolls += 1
            log._events.post("tierlog_segment_rolled", SegmentRolled(
                log.topic, log.partition, log.topic_id, active.base_offset,
                segment.base_offset, active.size, active.max_timestamp_so_far))
        return segment

    def _snapshot_producer_state_at(self, offset: int) -> None:
        log = self._log
        log.producer_state.update_map_end_offset(offset)
        log.producer_state.take_snapshot()
