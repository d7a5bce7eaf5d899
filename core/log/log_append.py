"""The writes of a :class:`~tierlog.log.log.Log`: appends, rolls and flushes, and their settings.

:class:`AppendSettings` is what an append needs of the config, built once when the log opens.
:class:`LogAppends` runs the general append path: plan the data (validating every batch,
:mod:`tierlog.log.append_plan`), check producer sequences and epochs (:mod:`tierlog.producer`),
roll the active segment when due, write (the LocalLog moves its own log end offset), count,
apply the batches to producer state, then do the append's bookkeeping
(:meth:`LogAppends.appended`, the one home of it for the producer hot path as well) and re-arm
the hot path, whose one call writes, moves the end and counts. It holds the parts of the log it drives, handed to it
by the Log that owns them, never the Log itself; it runs under that Log's lock.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from tierlog.common.int_bounds import INT64_MAX
from tierlog.common.stats import LogStats, perf_ns
from tierlog.config import LogConfig
from tierlog.errors import RecordListTooLargeError
from tierlog.index.index_types import SegmentIndexTypes
from tierlog.log.append_plan import AppendPlan, LogAppendInfo, plain_appends_allowed, plan_append
from tierlog.log.leader_epoch import LeaderEpochFileCache
from tierlog.log.local_log import LocalLog
from tierlog.log.log_events import PartitionEvents
from tierlog.log.offsets import LogOffsets
from tierlog.log.segment import LogSegment
from tierlog.producer.append import ProducerBatchRun
from tierlog.producer.state import ProducerStateManager

__all__ = ["AppendSettings", "LogAppends"]


@dataclass(frozen=True, slots=True)
class AppendSettings:
    """What appends read of a log's config, read once when the log opens."""

    config: LogConfig
    #: ``max.message.bytes``: the largest batch.
    max_message: int
    #: ``segment.bytes`` and ``segment.ms``: when the active segment rolls.
    segment_bytes: int
    segment_ms: int
    #: ``flush.messages``: the log flushes once this many offsets are not yet fsynced.
    flush_messages: int
    #: ``record.validation=full``: every record of a producer's batch is walked.
    check_records: bool
    #: The producer hot path may be armed: no plugin index, CreateTime without bounds.
    fast_append: bool
    #: The high watermark follows the log end on every append (one replica).
    auto_high_watermark: bool
    #: Whether :meth:`LogAppends.appended` may have work after any append: the high watermark
    #: follows the end, or ``flush.messages`` is set (its default, Long.MAX_VALUE, is never
    #: reached). When not, only a new leader epoch gives it work, and the hot path skips it.
    book_every_append: bool = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "book_every_append",
                           self.auto_high_watermark or self.flush_messages < INT64_MAX)

    @classmethod
    def from_config(cls, config: LogConfig, index_types: SegmentIndexTypes,
                    auto_high_watermark: bool) -> AppendSettings:
        # The plain appender writes the built-in index maps itself and feeds no plugin index.
        fast = (not index_types.extras and not index_types.replaced
                and plain_appends_allowed(config))
        return cls(config, config["max.message.bytes"], config["segment.bytes"],
                   config["segment.ms"], config["flush.messages"],
                   config["record.validation"] == "full", fast, auto_high_watermark)


class LogAppends:
    """The appends, rolls and flushes of one log (under its lock; not thread-safe alone)."""

    __slots__ = ("_epochs", "_events", "_local", "_offsets", "_producers", "_time_ms",
                 "settings", "stats")

    def __init__(self, settings: AppendSettings, local: LocalLog, offsets: LogOffsets,
                 producer_state: ProducerStateManager, epoch_cache: LeaderEpochFileCache,
                 events: PartitionEvents, stats: LogStats, time_ms: Callable[[], int]) -> None:
        self.settings = settings
        self._local = local
        self._offsets = offsets
        self._producers = producer_state
        self._epochs = epoch_cache
        self._events = events
        #: The log's counters (:meth:`count_into` another when a reopen carries them on).
        self.stats = stats
        self._time_ms = time_ms

    def append(self, data: bytes | bytearray | memoryview, assign_offsets: bool,
               leader_epoch: int | None, origin: str, check_records: bool) -> LogAppendInfo:
        """The general path of ``Log.append``: plan (validating every batch, walking the
        records when ``check_records``), roll if due, write, keep the books, re-arm."""
        started = perf_ns()
        now = self._time_ms()
        local, settings = self._local, self.settings
        plan = plan_append(
            data, config=settings.config, next_offset=local.next_offset, now_ms=now,
            assign_offsets=assign_offsets, leader_epoch=leader_epoch, origin=origin,
            check_records=check_records,
        )
        duplicate = self._producer_checks(plan, origin)
        if duplicate is not None:
            return duplicate
        segment = self._maybe_roll(plan, now)
        next_offset = plan.last_offset + 1
        local.append(plan.pieces, plan.batches, plan.views, next_offset)
        stats = self.stats
        stats.append_bytes += plan.size
        stats.append_messages += plan.record_count
        if plan.producer_run is not None:
            plan.producer_run.apply(segment.append_aborted_txn)
        self._producers.update_map_end_offset(next_offset)
        for epoch, start in plan.epoch_starts:
            self._epochs.assign_if_newer(epoch, start)
        self.appended(plan.first_offset, next_offset, -1)
        if settings.fast_append:
            local.arm_plain_appends(settings.segment_bytes, settings.segment_ms,
                                    settings.max_message, settings.check_records, stats)
        self.stats.record_general_append(perf_ns() - started)
        return LogAppendInfo(
            plan.first_offset, plan.last_offset, plan.max_timestamp,
            plan.offset_of_max_timestamp, plan.log_append_time, self._offsets.log_start_offset,
            plan.record_count, len(plan.batches), plan.size,
        )

    def appended(self, first: int, next_offset: int, epoch: int) -> None:
        """The bookkeeping of an append of the offsets [``first``, ``next_offset``), once its
        bytes are written, the log end moved and the batches counted (the hot path's and the
        general path's): the high watermark when it follows the end, a new leader epoch
        starting at ``first`` (-1: none to record) and a flush when ``flush.messages`` is
        reached. The general path calls it after every append; the hot path when
        ``settings.book_every_append`` or the epoch is news, as nothing else can be due.

        Producer state's map end is not moved here: the hot path's batches carry no producer
        and change nothing there, so it moves with the general path, which applies batches to
        producer state, and with every snapshot (a roll, a close), taken at the log end."""
        settings = self.settings
        if settings.auto_high_watermark:
            self._offsets.follow_log_end(next_offset)
        if epoch > self._epochs.newest_epoch:  # the cache's is_news, inline: run per batch
            self._epochs.assign_if_newer(epoch, first)
        if next_offset - self._local.recovery_point >= settings.flush_messages:
            self.flush()

    def count_into(self, stats: LogStats) -> None:
        """Count into ``stats`` from now on (a reopened log carries its partition's counters
        on). The armed hot path counts into the old ones: it is let go, and the next append
        (general) arms one that counts into these."""
        self.stats = stats
        self._local.disarm_plain_appends()

    def _producer_checks(self, plan: AppendPlan, origin: str) -> LogAppendInfo | None:
        """Validate producer sequences/epochs into ``plan.producer_run`` (applied after the
        write); a duplicate batch returns its original offsets."""
        psm = self._producers
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
                        self._offsets.log_start_offset, dup.last_offset - dup.first_offset + 1,
                        0, 0, duplicate=True,
                    )
            if run is None:
                run = ProducerBatchRun(psm, origin)
            run.add(batch, plan.base_offsets[batch.position])
        plan.producer_run = run
        return None

    def _maybe_roll(self, plan: AppendPlan, now: int) -> LogSegment:
        segment = self._local.segments.active
        settings = self.settings
        max_bytes = settings.segment_bytes
        if plan.size > max_bytes:
            raise RecordListTooLargeError(
                f"{self._local.name}: append of {plan.size} bytes exceeds segment.bytes "
                f"({max_bytes})"
            )
        if segment.should_roll(plan.size, plan.max_timestamp, plan.last_offset, max_bytes,
                               settings.segment_ms, lambda: now):
            return self.roll(plan.first_offset)
        return segment

    def roll(self, new_base: int) -> LogSegment:
        """Roll the local log at ``new_base`` (the producer state is snapshotted at the new
        base before the new segment joins) and post SegmentRolled: every roll of the log."""
        local = self._local
        active = local.segments.active
        segment = local.roll(new_base, self._snapshot_producer_state_at)
        if segment is not active:
            self.stats.rolls += 1
            self._events.rolled(active, segment)
        return segment

    def _snapshot_producer_state_at(self, offset: int) -> None:
        self._producers.update_map_end_offset(offset)
        self._producers.take_snapshot()

    def flush(self, up_to_offset: int | None = None) -> None:
        """fsync the local log below ``up_to_offset`` (default: its end), timing the flushes
        that moved the recovery point (as Kafka counts them)."""
        local, started = self._local, perf_ns()
        before = local.recovery_point
        local.flush(up_to_offset)
        if local.recovery_point != before:
            self.stats.record_flush(perf_ns() - started)
