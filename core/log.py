"""Log: one partition directory (``<topic>-<partition>``): append, read, roll, offsets.

The composition root of the local engine: validates producer batches as bytes, assigns offsets
by patching headers, writes with one vectored write, and keeps LEO / high watermark / LSO.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, NamedTuple

from tierlog import filenames
from tierlog.appender import AppendPlan, plan_append
from tierlog.atomic import fsync_dir
from tierlog.checkpoint import LeaderEpochCheckpointFile
from tierlog.config import INT_MAX, LONG_MAX, LogConfig
from tierlog.errors import LogClosedError, RecordBatchTooLargeError
from tierlog.events import EventQueue, SegmentRolled
from tierlog.leader_epoch import LeaderEpochFileCache
from tierlog.loader import LogLoader, RecoveryReport, rebuild_producer_state
from tierlog.partition_metadata import PartitionMetadataFile, new_topic_id
from tierlog.plain_appender import PlainAppenderType
from tierlog.producer_state import (
    DEFAULT_PRODUCER_ID_EXPIRATION_MS,
    ProducerBatchRun,
    ProducerStateManager,
)
from tierlog.log_reads import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP, MAX_TIMESTAMP, LogReads
from tierlog.log_retention import LogRetention
from tierlog.plugin_manager import PluginHost, get_plugins
from tierlog.records.builder import build_batch, build_control_batch
from tierlog.records.compression import NONE, codec_id
from tierlog.records.record import Record
from tierlog.scheduler import Scheduler
from tierlog.segment import LogSegment
from tierlog.segments import LogSegments

log = logging.getLogger(__name__)

#: (topic_id, topic, partition, offset) -> the producer snapshot a remote tier holds there.
RemoteSnapshots = Callable[[str, str, int, int], "bytes | None"]

__all__ = ["EARLIEST_TIMESTAMP", "LATEST_TIMESTAMP", "MAX_TIMESTAMP", "Log", "LogAppendInfo"]


def _now_ms() -> int:
    return int(time.time() * 1000)


def _check_leader_epoch(epoch: int) -> None:
    """A partition leader epoch is an int32: -1 (none) or a leader's epoch, >= 0."""
    if not -1 <= epoch <= INT_MAX:
        raise ValueError(f"leader epoch {epoch} is not -1 or an int32 >= 0")


def _fast_append_allowed(config: LogConfig) -> bool:
    """Whether this config lets single producer batches skip the general append planner:
    CreateTime with no timestamp bounds."""
    return (not config.is_log_append_time
            and config["message.timestamp.before.max.ms"] == LONG_MAX
            and config["message.timestamp.after.max.ms"] == LONG_MAX)


class LogAppendInfo(NamedTuple):
    """The result of an append: where the batches landed."""

    first_offset: int
    last_offset: int
    max_timestamp: int
    offset_of_max_timestamp: int
    log_append_time: int
    log_start_offset: int
    record_count: int
    num_batches: int
    valid_bytes: int
    duplicate: bool = False


_new_tuple = tuple.__new__


class Log(LogReads, LogRetention):
    """A partition's log: segments on disk plus the offsets that describe them.

    Thread-safe: appends, rolls and truncations hold the log's lock; reads take a consistent
    view of the segments and offsets under it and then read without it. The read side is in
    :mod:`tierlog.log_reads`, truncation and retention in :mod:`tierlog.log_retention`.
    """

    def __init__(
        self,
        directory: Path,
        topic: str,
        partition: int,
        config: LogConfig,
        *,
        time_ms: Callable[[], int],
        rng: random.Random,
        recovery_point: int,
        log_start_offset: int,
        had_clean_shutdown: bool,
        topic_id: str | None,
        auto_high_watermark: bool = False,
        scheduler: Scheduler | None = None,
        producer_id_expiration_ms: int = DEFAULT_PRODUCER_ID_EXPIRATION_MS,
        plugins: PluginHost | None = None,
        leader_epoch: int | None = None,
        remote_snapshots: RemoteSnapshots | None = None,
    ) -> None:
        self.directory = directory
        host = plugins or get_plugins()
        #: Lifecycle events queued under the lock, delivered to plugins after it is released.
        self._events = EventQueue(host.events)
        self._extra_index_types = [
            t for t in host.registries.index_types.values()
            if not t.builtin and t.enabled_for(config)
        ]
        self._leader_epoch: int | None = None
        self.leader_epoch = leader_epoch
        self._fast_append = not self._extra_index_types and _fast_append_allowed(config)
        self._max_message = config["max.message.bytes"]
        self._segment_bytes = config["segment.bytes"]
        self._segment_ms = config["segment.ms"]
        self._flush_messages = config["flush.messages"]
        self._check_records = config["record.validation"] == "full"
        self._known_epoch: int | None = None  # an epoch the epoch cache already covers
        #: The active segment's hot-path appender, armed after a general append (may since
        #: have been disarmed by the segment: it then writes nothing and returns None).
        self._plain_appender: PlainAppenderType | None = None
        #: The remote tier's reader once a RemoteLogManager attached one (see attach_remote).
        self.remote: Any = None
        self._highest_offset_in_remote = -1
        self._scheduler = scheduler
        self.topic = topic
        self.partition = partition
        self._config = config
        self._time_ms = time_ms
        self._rng = rng
        self._lock = threading.RLock()
        self._closed = False
        self._auto_high_watermark = auto_high_watermark
        self._last_flush_ms = time_ms()
        self.leader_epoch_cache = LeaderEpochFileCache(
            LeaderEpochCheckpointFile(directory / filenames.LEADER_EPOCH_CHECKPOINT)
        )
        self.producer_state = ProducerStateManager(directory, producer_id_expiration_ms,
                                                   time_ms=time_ms)
        self.topic_id = self._load_topic_id(topic_id)
        self._pending_deletes: list[LogSegment] = []
        loader = LogLoader(
            directory,
            self.open_segment,
            recovery_point=recovery_point,
            had_clean_shutdown=had_clean_shutdown,
            log_start_offset=log_start_offset,
            producer_state=self.producer_state,
            leader_epoch_cache=self.leader_epoch_cache,
            time_ms=time_ms,
            tiered=config["remote.storage.enable"],
            remote_snapshot=None if remote_snapshots is None else (
                lambda offset: remote_snapshots(self.topic_id, topic, partition, offset)),
        )
        self.segments: LogSegments = loader.load()
        self.recovery: RecoveryReport = loader.report
        self._next_offset = self.recovery.log_end_offset
        self._log_start_offset = self.recovery.log_start_offset
        self._recovery_point = self.recovery.recovery_point
        self._high_watermark = self._log_start_offset
        if auto_high_watermark:
            self._set_high_watermark(self._next_offset)
        self.segments.active.offset_index.resize(config["segment.index.bytes"])
        self.segments.active.time_index.resize(config["segment.index.bytes"])
        level = (logging.WARNING if self.recovery.repaired_anything
                 else logging.INFO if self.recovery.changed_anything else logging.DEBUG)
        log.log(level, "%s: %s", directory, self.recovery.summary())

    # -- opening ---------------------------------------------------------------------

    @classmethod
    def open(
        cls,
        directory: str | Path,
        config: LogConfig | Mapping[str, Any] | None = None,
        *,
        time_ms: Callable[[], int] | None = None,
        recovery_point: int = 0,
        log_start_offset: int = 0,
        had_clean_shutdown: bool = False,
        topic_id: str | None = None,
        seed: int | None = None,
        auto_high_watermark: bool = False,
        scheduler: Scheduler | None = None,
        producer_id_expiration_ms: int = DEFAULT_PRODUCER_ID_EXPIRATION_MS,
        plugins: PluginHost | None = None,
        leader_epoch: int | None = None,
        remote_snapshots: RemoteSnapshots | None = None,
    ) -> Log:
        """Open (creating if needed) the partition directory ``<topic>-<partition>``.

        Without ``had_clean_shutdown`` every segment from the one holding ``recovery_point``
        on is re-validated, as after a crash; what recovery did is in ``log.recovery``.
        After a crash the recovery point stays where it was until the next flush (Kafka).
        ``auto_high_watermark`` advances the high watermark to the log end on every append
        (a partition with one replica); otherwise the caller advances it. With a
        ``scheduler``, deleted segments are removed after ``file.delete.delay.ms``.
        ``plugins`` (default: the process-wide plugin host) supplies plugin index types and
        receives lifecycle events; ``leader_epoch`` is stamped into appended batches.
        ``remote_snapshots(topic_id, topic, partition, offset)`` returns the producer snapshot
        a remote tier holds at an offset (or None): a tiered log whose local snapshot at its
        local log start is gone takes it from there.
        """
        directory = Path(directory)
        topic, partition = filenames.parse_partition_dir(directory.name)
        if not isinstance(config, LogConfig):
            config = LogConfig(config)
        directory.mkdir(parents=True, exist_ok=True)
        return cls(
            directory, topic, partition, config,
            time_ms=time_ms or _now_ms,
            rng=random.Random(seed),
            recovery_point=recovery_point,
            log_start_offset=log_start_offset,
            had_clean_shutdown=had_clean_shutdown,
            topic_id=topic_id,
            auto_high_watermark=auto_high_watermark,
            scheduler=scheduler,
            producer_id_expiration_ms=producer_id_expiration_ms,
            plugins=plugins,
            leader_epoch=leader_epoch,
            remote_snapshots=remote_snapshots,
        )

    @classmethod
    def for_partition(
        cls, log_dir: str | Path, topic: str, partition: int,
        config: LogConfig | Mapping[str, Any] | None = None, **kwargs: Any,
    ) -> Log:
        """Open ``<log_dir>/<topic>-<partition>`` after validating the topic name."""
        return cls.open(Path(log_dir) / filenames.partition_dir_name(topic, partition), config,
                        **kwargs)

    def _load_topic_id(self, topic_id: str | None) -> str:
        metadata = PartitionMetadataFile(self.directory / filenames.PARTITION_METADATA)
        if metadata.path.exists():
            return metadata.read()
        topic_id = topic_id or new_topic_id()
        metadata.write(topic_id)
        return topic_id

    def open_segment(self, base_offset: int, suffix: str = "") -> LogSegment:
        """Open (creating) the segment files at ``base_offset`` with this log's settings, not
        yet part of the log: a roll adds it; the cleaner fills a ``.cleaned`` one and swaps it
        in (:mod:`tierlog.cleaner.swap`)."""
        config = self._config
        jitter = config["segment.jitter.ms"]
        return LogSegment.open(
            self.directory, base_offset,
            index_interval_bytes=config["index.interval.bytes"],
            max_index_size=config["segment.index.bytes"],
            rolling_jitter_ms=self._rng.randrange(jitter) if jitter > 0 else 0,
            time_ms=self._time_ms,
            preallocate_bytes=config["segment.bytes"] if config["preallocate"] else 0,
            suffix=suffix,
            extra_index_types=self._extra_index_types,
            config=config,
        )

    def _rebuild_producer_state(self) -> None:
        """Load the newest valid snapshot, then replay the batches after it (Kafka's rebuild)."""
        rebuild_producer_state(self.producer_state, self.segments, self._log_start_offset,
                               self._next_offset, self._time_ms())

    # -- offsets ---------------------------------------------------------------------

    @property
    def config(self) -> LogConfig:
        return self._config

    @property
    def log_start_offset(self) -> int:
        return self._log_start_offset

    @property
    def local_log_start_offset(self) -> int:
        first = self.segments.first
        return max(self._log_start_offset, first.base_offset if first else 0)

    @property
    def log_end_offset(self) -> int:
        """LEO: the offset the next appended record will get."""
        return self._next_offset

    @property
    def high_watermark(self) -> int:
        return self._high_watermark

    @property
    def recovery_point(self) -> int:
        return self._recovery_point

    @property
    def last_stable_offset(self) -> int:
        """The first offset of the earliest open transaction, else the high watermark."""
        first_unstable = self.producer_state.first_unstable_offset()
        if first_unstable is None:
            return self._high_watermark
        return min(first_unstable, self._high_watermark)

    def update_high_watermark(self, offset: int) -> int:
        """Set the high watermark (clamped to [log start, LEO]); returns the value set."""
        with self._lock:
            self._set_high_watermark(min(max(offset, self._log_start_offset), self._next_offset))
            return self._high_watermark

    def _set_high_watermark(self, offset: int) -> None:
        self._high_watermark = offset
        self.producer_state.on_high_watermark_updated(offset)

    @property
    def size_in_bytes(self) -> int:
        return self.segments.size_in_bytes()

    @property
    def leader_epoch(self) -> int | None:
        """The epoch stamped into appended batches (a leader's epoch), or None to keep theirs."""
        return self._leader_epoch

    @leader_epoch.setter
    def leader_epoch(self, epoch: int | None) -> None:
        if epoch is not None:
            _check_leader_epoch(epoch)
        self._leader_epoch = epoch

    # -- tiered storage ----------------------------------------------------------------

    @property
    def remote_storage_enabled(self) -> bool:
        return bool(self._config["remote.storage.enable"])

    @property
    def highest_offset_in_remote(self) -> int:
        """The last offset the remote tier holds (-1: none); local segments at or below it
        may be deleted by local retention."""
        return self._highest_offset_in_remote

    def attach_remote(self, reader: Any, highest_offset_in_remote: int) -> None:
        """Called by the RemoteLogManager: reads below the local log start offset go to
        ``reader`` from now on."""
        with self._lock:
            self.remote = reader
            self._highest_offset_in_remote = highest_offset_in_remote

    def update_highest_offset_in_remote(self, offset: int) -> None:
        with self._lock:
            self._highest_offset_in_remote = max(self._highest_offset_in_remote, offset)

    # -- appending -------------------------------------------------------------------

    def append(
        self,
        data: bytes | bytearray | memoryview,
        *,
        assign_offsets: bool = True,
        leader_epoch: int | None = None,
        origin: str = "client",
    ) -> LogAppendInfo:
        """Append producer-built v2 batches (bytes): validate, assign offsets, write.

        ``assign_offsets=False`` appends batches that already carry their offsets (a follower,
        a remote fetch, compaction output): they must start at or after the log end and
        increase. Any invalid batch rejects the whole append and leaves the log unchanged.
        """
        if leader_epoch is not None:
            _check_leader_epoch(leader_epoch)
        # acquire/release rather than `with`: half the cost (~75 ns) on a path run per batch.
        lock = self._lock
        lock.acquire()
        try:
            if self._closed:
                raise LogClosedError(f"{self.directory} is closed")
            appender = self._plain_appender
            if appender is not None and assign_offsets and origin == "client":
                # The producer hot path: one plain batch (no producer id, no control records)
                # while the active segment is armed, so no roll can be due. The header, CRC
                # and records get the general path's checks; None (nothing changed) sends
                # anything unusual down the general path, which reports the precise error.
                first = self._next_offset
                written = appender.append(
                    data, first, self._leader_epoch if leader_epoch is None else leader_epoch)
                if written is not None:
                    # The Log's bookkeeping, inline (as _append_planned's _after_append).
                    size, last, max_ts, count, epoch = written
                    self._next_offset = next_offset = last + 1
                    self.producer_state.update_map_end_offset(next_offset)
                    if self._auto_high_watermark:
                        self._set_high_watermark(next_offset)
                    if epoch >= 0 and epoch != self._known_epoch:
                        self._assign_epoch(epoch, first)
                    if next_offset - self._recovery_point >= self._flush_messages:
                        self.flush()
                    # tuple.__new__ skips the Python frame of the generated __new__.
                    return _new_tuple(LogAppendInfo, (
                        first, last, max_ts, last, -1, self._log_start_offset, count, 1, size,
                        False))
            info = self._append_planned(data, assign_offsets, leader_epoch, origin,
                                        self._check_records)
        finally:
            lock.release()
        self._deliver_events()  # the general path may have rolled
        return info

    def _append_planned(self, data: bytes | bytearray | memoryview, assign_offsets: bool,
                        leader_epoch: int | None, origin: str,
                        check_records: bool) -> LogAppendInfo:
        """The general path of :meth:`append`, under the lock: plan (validating every batch,
        walking the records when ``check_records``), roll if due, write, update the state."""
        now = self._time_ms()
        if leader_epoch is None and origin != "replication":
            leader_epoch = self._leader_epoch
        plan = plan_append(
            data, config=self._config, next_offset=self._next_offset, now_ms=now,
            assign_offsets=assign_offsets, leader_epoch=leader_epoch, origin=origin,
            check_records=check_records,
        )
        duplicate = self._producer_checks(plan, origin)
        if duplicate is not None:
            return duplicate
        segment = self._maybe_roll(plan, now)
        segment.append(plan.pieces, plan.batches, plan.views)
        self._next_offset = plan.last_offset + 1
        self._after_append(plan, segment)
        if self._fast_append:
            self._plain_appender = segment.arm_plain_appends(
                self._segment_bytes, self._segment_ms, self._max_message, self._check_records)
        return LogAppendInfo(
            plan.first_offset, plan.last_offset, plan.max_timestamp,
            plan.offset_of_max_timestamp, plan.log_append_time, self._log_start_offset,
            plan.record_count, len(plan.batches), plan.size,
        )

    def _assign_epoch(self, epoch: int, start_offset: int) -> None:
        """Record a leader epoch that starts at ``start_offset`` if it is newer than any."""
        latest = self.leader_epoch_cache.latest_epoch
        if latest is None or epoch > latest:
            self.leader_epoch_cache.assign(epoch, start_offset)
        self._known_epoch = epoch

    def _producer_checks(self, plan: AppendPlan, origin: str) -> LogAppendInfo | None:
        """Validate producer sequences/epochs into ``plan.producer_run`` (applied after the
        write); a duplicate batch returns its original offsets."""
        psm = self.producer_state
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
                        self._log_start_offset, dup.last_offset - dup.first_offset + 1, 0, 0,
                        duplicate=True,
                    )
            if run is None:
                run = ProducerBatchRun(psm, origin)
            run.add(batch, plan.base_offsets[batch.position])
        plan.producer_run = run
        return None

    def _after_append(self, plan: AppendPlan, segment: LogSegment) -> None:
        psm = self.producer_state
        if plan.producer_run is not None:
            plan.producer_run.apply(segment.append_aborted_txn)
        psm.update_map_end_offset(self._next_offset)
        if self._auto_high_watermark:
            self._set_high_watermark(self._next_offset)
        for epoch, start in plan.epoch_starts:
            self._assign_epoch(epoch, start)
        if self._next_offset - self._recovery_point >= self._flush_messages:
            self.flush()

    def append_records(
        self,
        records: Iterable[Record],
        compression: int | str = "none",
        *,
        producer_id: int = -1,
        producer_epoch: int = -1,
        base_sequence: int = -1,
        transactional: bool = False,
        leader_epoch: int | None = None,
    ) -> LogAppendInfo:
        """Build one v2 batch from ``records`` with any codec and append it."""
        records = records if isinstance(records, Sequence) else list(records)
        if compression == "producer":
            compression = "none"
        codec = codec_id(compression)
        data = build_batch(
            records, compression=codec, producer_id=producer_id,
            producer_epoch=producer_epoch, base_sequence=base_sequence,
            is_transactional=transactional, now_ms=self._time_ms(),
        )
        if codec == NONE:
            return self.append(data, leader_epoch=leader_epoch)
        # The records were encoded right here: checking them would decompress what was just
        # compressed (a quarter of the cost of the append).
        if leader_epoch is not None:
            _check_leader_epoch(leader_epoch)
        with self._lock:
            self._check_open()
            info = self._append_planned(data, True, leader_epoch, "client", False)
        self._deliver_events()
        return info

    def append_marker(
        self, producer_id: int, producer_epoch: int, *, commit: bool, coordinator_epoch: int = 0,
        leader_epoch: int | None = None,
    ) -> LogAppendInfo:
        """Write a COMMIT or ABORT control batch that ends the producer's open transaction."""
        data = build_control_batch(
            1 if commit else 0, producer_id=producer_id, producer_epoch=producer_epoch,
            coordinator_epoch=coordinator_epoch, timestamp=self._time_ms(),
        )
        return self.append(data, leader_epoch=leader_epoch, origin="coordinator")

    # -- rolling ---------------------------------------------------------------------

    def _maybe_roll(self, plan: AppendPlan, now: int) -> LogSegment:
        segment = self.segments.active
        max_bytes = self._config["segment.bytes"]
        if plan.size > max_bytes:
            raise RecordBatchTooLargeError(
                f"{self.directory.name}: append of {plan.size} bytes exceeds segment.bytes "
                f"({max_bytes})"
            )
        if segment.should_roll(plan.size, plan.max_timestamp, plan.last_offset, max_bytes,
                               self._segment_ms, lambda: now):
            return self._roll(plan.first_offset)
        return segment

    def roll(self) -> LogSegment:
        """Close the active segment and start a new one at the log end offset."""
        with self._lock:
            self._check_open()
            segment = self._roll(self._next_offset)
        self._deliver_events()
        return segment

    def _roll(self, new_base: int) -> LogSegment:
        active = self.segments.active
        if active.size == 0 and active.base_offset == new_base:
            return active  # nothing to roll: an empty segment at the same offset
        new_base = max(new_base, self._next_offset)
        if new_base in self.segments:
            raise RecordBatchTooLargeError(
                f"{self.directory.name}: cannot roll to offset {new_base}: segment exists"
            )
        # The new segment's files first: on a full disk that raises OSError (its index space
        # is reserved up front) before the active segment or the producer state changes.
        segment = self.open_segment(new_base)
        try:
            active.on_becoming_inactive()
            self.producer_state.update_map_end_offset(new_base)
            self.producer_state.take_snapshot()
        except BaseException:
            segment.delete()
            raise
        self.segments.add(segment)
        log.info("%s: rolled new segment at offset %d", self.directory.name, new_base)
        self._events.post("tierlog_segment_rolled", SegmentRolled(
            self.topic, self.partition, self.topic_id, active.base_offset, new_base,
            active.size, active.max_timestamp_so_far))
        return segment

    def _deliver_events(self) -> None:
        """Hand the queued lifecycle events to plugins, outside the log's lock: a caller that
        still holds the lock (re-entrantly) leaves them for the outermost release."""
        if self._events.pending and not self._lock._is_owned():  # type: ignore[attr-defined]
            self._events.deliver()

    # -- flush and close -------------------------------------------------------------

    def flush(self, up_to_offset: int | None = None) -> None:
        """fsync every segment holding offsets below ``up_to_offset`` (default: the LEO) and
        move the recovery point there."""
        with self._lock:
            self._check_open()
            target = self._next_offset if up_to_offset is None else min(up_to_offset, self._next_offset)
            if target <= self._recovery_point:
                return
            for segment in self.segments.values(self._recovery_point, target):
                segment.flush()
            fsync_dir(self.directory)
            self._recovery_point = target
            self._last_flush_ms = self._time_ms()

    @property
    def last_flush_ms(self) -> int:
        """When the log was last flushed (or opened)."""
        return self._last_flush_ms

    @property
    def min_snapshots_offset_to_retain(self) -> int:
        """The oldest producer snapshot worth keeping (Kafka's minSnapshotsOffsetToRetain):
        the lower of the base of the last segment starting below the recovery point (where
        recovery rebuilds from) and the base of the segment before the active one (where a
        truncation rebuilds from). Tiered, also the end of the last copied segment: the copy
        of each later segment ships the snapshot at its end to the tier."""
        with self._lock:
            active = self.segments.active.base_offset
            before_active = self.segments.floor(active - 1)
            two_segments = before_active.base_offset if before_active else active
            before_rp = self.segments.floor(self._recovery_point - 1)
            recovery = before_rp.base_offset if before_rp else self._recovery_point
            keep = min(recovery, two_segments)
            if self.remote_storage_enabled:
                keep = min(keep, self._highest_offset_in_remote + 1)
            return keep

    def delete_snapshots_after_recovery_point_checkpoint(self) -> int:
        """Delete the producer snapshots below ``min_snapshots_offset_to_retain`` (called once
        the recovery point is checkpointed); returns that offset."""
        with self._lock:
            keep = self.min_snapshots_offset_to_retain
            self.producer_state.delete_snapshots_before(keep)
            return keep

    def maybe_flush_by_time(self, now_ms: int) -> bool:
        """Flush if the last flush is at least ``flush.ms`` old (the scheduler's check)."""
        if now_ms - self._last_flush_ms < self._config["flush.ms"]:
            return False
        self.flush()
        return True

    @property
    def lock(self) -> threading.RLock:
        """The log's re-entrant lock, held by appends, rolls, truncations and swaps: hold it to
        read the segment list and several offsets as one consistent view, or to change the
        segment list (the cleaner's swap)."""
        return self._lock

    @property
    def closed(self) -> bool:
        return self._closed

    def close(self) -> None:
        """Snapshot producer state, trim and close every segment. Idempotent."""
        with self._lock:
            if self._closed:
                return
            self.producer_state.update_map_end_offset(self._next_offset)
            self.producer_state.take_snapshot()
            for segment in self.segments:
                segment.close()
            # Segments awaiting a scheduled delete keep their .deleted files for the loader.
            for segment in self._pending_deletes:
                segment.close()
            self._pending_deletes.clear()
            self._closed = True

    def __enter__(self) -> Log:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _check_open(self) -> None:
        if self._closed:
            raise LogClosedError(f"{self.directory} is closed")

    def __repr__(self) -> str:
        return (
            f"Log({self.directory.name}, start={self._log_start_offset}, "
            f"end={self._next_offset}, segments={len(self.segments)})"
        )

