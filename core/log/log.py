"""Log: one partition directory (``<topic>-<partition>``): append, read, roll, offsets.

The composition root of the local engine (Kafka's ``UnifiedLog``): validates producer batches
as bytes, assigns offsets by patching headers and writes them with one vectored write; owns
the log start offset, high watermark, LSO, producer state, leader epochs, the remote tier and
lifecycle events. The segments, the log end offset and the recovery point are its
:class:`~tierlog.log.local_log.LocalLog`'s (``log.local``), which it drives under its lock.
"""

from __future__ import annotations

import logging
import os
import random
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, Self

from tierlog.checkpoint.checkpoint_file import LeaderEpochCheckpointFile
from tierlog.checkpoint.partition_metadata import ZERO_TOPIC_ID, PartitionMetadataFile, new_topic_id
from tierlog.common import filenames
from tierlog.common.clock import system_time_ms
from tierlog.common.scheduler import Scheduler
from tierlog.common.stats import LogStats, perf_ns
from tierlog.config import LogConfig
from tierlog.errors import (
    CopyLagExceededError,
    DataDirLockedError,
    LogClosedError,
    ReadOnlyLogError,
)
from tierlog.events import EventQueue
from tierlog.index.index_types import resolve_index_types
from tierlog.log.append_plan import (
    LogAppendInfo,
    check_leader_epoch,
    plain_appends_allowed,
)
from tierlog.log.fetch_info import FetchDataInfo
from tierlog.log.leader_epoch import LeaderEpochFileCache
from tierlog.log.loader import LogLoader, RecoveryReport
from tierlog.log.local_log import LocalLog
from tierlog.log.log_append import LogAppends
from tierlog.log.log_read import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP, MAX_TIMESTAMP, LogReads
from tierlog.log.log_removals import LogRemovals
from tierlog.log.segment import LogSegment
from tierlog.log.segment_appender import PlainAppenderType
from tierlog.log.segments import LogSegments
from tierlog.log.tier_reads import TierReads
from tierlog.manager.data_dir_lock import live_owner
from tierlog.plugin_manager import PluginHost, get_plugins
from tierlog.producer.append import DEFAULT_PRODUCER_ID_EXPIRATION_MS
from tierlog.producer.state import ProducerStateManager
from tierlog.records.builder import build_batch, build_control_batch
from tierlog.records.compression import NONE, codec_id
from tierlog.records.file_records import TimestampAndOffset
from tierlog.records.record import Record

log = logging.getLogger(__name__)

#: (topic_id, topic, partition, offset) -> the producer snapshot a remote tier holds there.
RemoteSnapshots = Callable[[str, str, int, int], "bytes | None"]

__all__ = ["EARLIEST_TIMESTAMP", "LATEST_TIMESTAMP", "MAX_TIMESTAMP", "Log", "LogAppendInfo"]


_new_tuple = tuple.__new__


class Log:
    """A partition's log: its local segments (``self.local``, a LocalLog) plus the offsets,
    producer state, leader epochs and remote tier that describe the whole partition.

    Thread-safe: appends, rolls, truncations and retention hold the log's lock (which also
    guards ``self.local``); reads take a consistent view of the segments and offsets under it
    and then read without it. Lifecycle events are posted under the lock and delivered to
    plugins after it is released (:meth:`_deliver_events`).
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
        read_only: bool = False,
    ) -> None:
        self.directory = directory
        #: Opened read-only (see :meth:`open`): no file of the partition is ever written.
        self.read_only = read_only
        #: Event counters (appends, flushes, rolls, cleanup, remote traffic) for exporters.
        self.stats = LogStats()
        host = plugins or get_plugins()
        #: Lifecycle events queued under the lock, delivered to plugins after it is released.
        self._events = EventQueue(host.events)
        #: Which type opens each index of this log's segments: the registry's, built-ins
        #: included, so a plugin may replace one.
        self._index_types = resolve_index_types(host.registries.index_types, config)
        self._leader_epoch: int | None = None
        self.leader_epoch = leader_epoch
        # The plain appender writes the built-in index maps itself and feeds no plugin index.
        self._fast_append = (not self._index_types.extras and not self._index_types.replaced
                             and plain_appends_allowed(config))
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
        self.remote: TierReads | None = None
        self._highest_offset_in_remote = -1
        #: Set by the manager while the local bytes not yet copied to the remote tier exceed
        #: remote.log.copy.lag.max.bytes: client appends raise it (one check per append).
        self._copy_lag_error: CopyLagExceededError | None = None
        self._scheduler = scheduler
        self.topic = topic
        self.partition = partition
        self._config = config
        self._time_ms = time_ms
        self._rng = rng
        self._lock = threading.RLock()
        #: The read side and the removals: collaborators working on this log's state.
        self._reads = LogReads(self)
        self._removals = LogRemovals(self)
        self._appends = LogAppends(self)
        self._closed = False
        self._auto_high_watermark = auto_high_watermark
        #: The segments, log end offset and recovery point (guarded by ``self._lock``).
        self.local = LocalLog(directory, config, time_ms=time_ms, rng=rng, scheduler=scheduler,
                              lock=self._lock, index_types=self._index_types,
                              read_only=read_only)
        self.leader_epoch_cache = LeaderEpochFileCache(
            LeaderEpochCheckpointFile(directory / filenames.LEADER_EPOCH_CHECKPOINT)
        )
        self.producer_state = ProducerStateManager(directory, producer_id_expiration_ms,
                                                   time_ms=time_ms, read_only=read_only)
        self.topic_id = self._load_topic_id(topic_id)
        loader = LogLoader(
            directory,
            self.local.open_segment,
            recovery_point=recovery_point,
            had_clean_shutdown=had_clean_shutdown,
            log_start_offset=log_start_offset,
            producer_state=self.producer_state,
            leader_epoch_cache=None if read_only else self.leader_epoch_cache,
            time_ms=time_ms,
            tiered=config["remote.storage.enable"],
            remote_snapshot=None if remote_snapshots is None else (
                lambda offset: remote_snapshots(self.topic_id, topic, partition, offset)),
            read_only=read_only,
            index_interval_bytes=config["index.interval.bytes"],
        )
        segments = loader.load()
        self.recovery: RecoveryReport = loader.report
        self._log_start_offset = self.recovery.log_start_offset
        self._high_watermark = self._log_start_offset
        self.local.loaded(segments, self.recovery.log_end_offset, self.recovery.recovery_point)
        if auto_high_watermark:
            self._set_high_watermark(self.local.next_offset)
        # Only a partition that lost bytes warns by itself; the LogManager sums the rest up
        # in one line (an unclean restart recovers every partition's active segment).
        level = (logging.WARNING if self.recovery.dropped_anything or self.recovery.damage
                 else logging.DEBUG)
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
        read_only: bool = False,
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

        DataDirLockedError when another live process owns the data dir (the parent
        directory's ``.lock``, see :mod:`tierlog.manager.data_dir_lock`): only its owner writes it.
        ``read_only`` opens an existing directory for reading beside a live owner (or after a
        crash) and never writes, creates or deletes a file: no recovery, no index rebuild (an
        index that cannot be trusted is replaced by a scan in memory), no snapshot; invalid
        bytes are reported in ``log.recovery.damage`` and a read reaching them raises
        LogDamagedError. Such a log only reads.
        """
        directory = Path(directory)
        topic, partition = filenames.parse_partition_dir(directory.name)
        if not isinstance(config, LogConfig):
            config = LogConfig(config)
        if not read_only:
            # The data dir's owner opens its partitions; another process must not write them.
            owner = live_owner(directory.parent)
            if owner is not None and owner != os.getpid():
                raise DataDirLockedError(directory.parent, owner or None)
            directory.mkdir(parents=True, exist_ok=True)
        return cls(
            directory, topic, partition, config,
            time_ms=time_ms or system_time_ms,
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
            read_only=read_only,
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
        if self.read_only:
            return topic_id or ZERO_TOPIC_ID  # a read-only open writes no new id
        topic_id = topic_id or new_topic_id()
        metadata.write(topic_id)
        return topic_id

    def open_segment(self, base_offset: int, suffix: str = "") -> LogSegment:
        """Open (creating) the segment files at ``base_offset`` with this log's settings, not
        yet part of the log (see :meth:`LocalLog.open_segment`)."""
        return self.local.open_segment(base_offset, suffix)

    # -- offsets ---------------------------------------------------------------------

    @property
    def config(self) -> LogConfig:
        return self._config

    @property
    def segments(self) -> LogSegments:
        """The local segments (hold :attr:`lock` to read or change them as one view)."""
        return self.local.segments

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
        return self.local.next_offset

    @property
    def high_watermark(self) -> int:
        return self._high_watermark

    @property
    def recovery_point(self) -> int:
        return self.local.recovery_point

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
            self._set_high_watermark(min(max(offset, self._log_start_offset),
                                         self.local.next_offset))
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
            check_leader_epoch(epoch)
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

    def attach_remote(self, reader: TierReads, highest_offset_in_remote: int) -> None:
        """Called by the RemoteLogManager: reads below the local log start offset go to
        ``reader`` from now on."""
        with self._lock:
            self.remote = reader
            self._highest_offset_in_remote = highest_offset_in_remote

    def set_copy_lag_error(self, error: CopyLagExceededError | None) -> None:
        """Refuse client appends with ``error`` (the copy lag is over its limit), or accept
        them again (None). Called by the manager, which measures the lag."""
        self._copy_lag_error = error

    @property
    def copy_lag_error(self) -> CopyLagExceededError | None:
        return self._copy_lag_error

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
            check_leader_epoch(leader_epoch)
        # acquire/release rather than `with`: half the cost (~75 ns) on a path run per batch.
        lock = self._lock
        lock.acquire()
        try:
            if self._closed:
                raise LogClosedError(f"{self.directory} is closed")
            if self._copy_lag_error is not None and origin == "client":
                raise self._copy_lag_error.with_traceback(None)  # no growing traceback
            appender = self._plain_appender
            if appender is not None and assign_offsets and origin == "client":
                # The producer hot path: one plain batch (no producer id, no control records)
                # while the active segment is armed, so no roll can be due. The header, CRC
                # and records get the general path's checks; None (nothing changed) sends
                # anything unusual down the general path, which reports the precise error.
                local = self.local
                first = local.next_offset
                written = appender.append(
                    data, first, self._leader_epoch if leader_epoch is None else leader_epoch)
                if written is not None:
                    # The Log's bookkeeping, inline (as LogAppends._after_append).
                    size, last, max_ts, count, epoch = written
                    stats = self.stats
                    stats.append_bytes += size
                    stats.append_messages += count
                    local.next_offset = next_offset = last + 1
                    self.producer_state.update_map_end_offset(next_offset)
                    if self._auto_high_watermark:
                        self._set_high_watermark(next_offset)
                    if epoch >= 0 and epoch != self._known_epoch:
                        self._assign_epoch(epoch, first)
                    if next_offset - local.recovery_point >= self._flush_messages:
                        self.flush()
                    # tuple.__new__ skips the Python frame of the generated __new__.
                    return _new_tuple(LogAppendInfo, (
                        first, last, max_ts, last, -1, self._log_start_offset, count, 1, size,
                        False))
            if self.read_only:  # (never armed: a read-only open arms no hot path)
                self._check_writable()
            info = self._appends.append_planned(data, assign_offsets, leader_epoch, origin,
                                        self._check_records)
        finally:
            lock.release()
        self._deliver_events()  # the general path may have rolled
        return info

    def _assign_epoch(self, epoch: int, start_offset: int) -> None:
        """Record a leader epoch that starts at ``start_offset`` if it is newer than any."""
        self.leader_epoch_cache.assign_if_newer(epoch, start_offset)
        self._known_epoch = epoch

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
            check_leader_epoch(leader_epoch)
        with self._lock:
            self._check_writable()
            info = self._appends.append_planned(data, True, leader_epoch, "client", False)
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

    def _roll(self, new_base: int) -> LogSegment:
        """Roll at ``new_base`` under the lock (see :meth:`LogAppends.roll`)."""
        return self._appends.roll(new_base)

    def roll(self) -> LogSegment:
        """Close the active segment and start a new one at the log end offset."""
        with self._lock:
            self._check_writable()
            segment = self._roll(self.local.next_offset)
        self._deliver_events()
        return segment

    def _deliver_events(self) -> None:
        """Hand the queued lifecycle events to plugins, outside the log's lock: a caller that
        still holds the lock (re-entrantly) leaves them for the outermost release."""
        if self._events.pending and not self._lock._is_owned():  # type: ignore[attr-defined]
            self._events.deliver()

    # -- reading (LogReads: local segments, or the remote tier below the local log start) --

    def read(self, offset: int, max_bytes: int = 1 << 20, *, isolation: str = "log_end",
             max_offset: int | None = None, min_one_message: bool = True) -> FetchDataInfo:
        """Read batches from ``offset`` (see :meth:`LogReads.read`)."""
        return self._reads.read(offset, max_bytes, isolation=isolation, max_offset=max_offset,
                                min_one_message=min_one_message)

    def offset_for_timestamp(self, timestamp: int) -> int | None:
        """The earliest offset whose record timestamp is >= ``timestamp`` (None if none)."""
        return self._reads.offset_for_timestamp(timestamp)

    def fetch_offset_by_timestamp(self, timestamp: int) -> TimestampAndOffset | None:
        """Kafka's ListOffsets for one partition (see :meth:`LogReads.fetch_offset_by_timestamp`)."""
        return self._reads.fetch_offset_by_timestamp(timestamp)

    def lookup_index(self, name: str, key: Any) -> Any:
        """Ask the plugin index type ``name`` for ``key`` (see :meth:`LogReads.lookup_index`)."""
        return self._reads.lookup_index(name, key)

    def lookup_key(self, key: bytes) -> int | None:
        """The latest offset of ``key`` through a plugin's ``key`` index, or None."""
        return self._reads.lookup_key(key)

    # -- removals (LogRemovals: truncation, the log start offset and retention) ------------

    def truncate_to(self, target_offset: int) -> bool:
        """Remove every batch holding an offset >= ``target_offset`` (a follower truncating to
        its leader); False when there was nothing to do (see :meth:`LogRemovals.truncate_to`)."""
        return self._removals.truncate_to(target_offset)

    def truncate_fully_and_start_at(self, new_offset: int) -> None:
        """Delete every segment and restart the log, empty, at ``new_offset``."""
        self._removals.truncate_fully_and_start_at(new_offset)

    def delete_records_before(self, offset: int) -> int:
        """Kafka's DeleteRecords: move the log start offset up to ``offset`` (at most the high
        watermark); returns the new log start offset."""
        return self._removals.delete_records_before(offset)

    def maybe_increment_log_start_offset(self, offset: int) -> bool:
        """Raise the log start offset (never lowers it); True when it moved."""
        return self._removals.maybe_increment_log_start_offset(offset)

    def delete_segments_later(self, doomed: Sequence[LogSegment]) -> None:
        """Close and delete segments already taken out of the log (their files renamed
        ``.deleted``) after ``file.delete.delay.ms`` (see
        :meth:`LocalLog.delete_segments_later`)."""
        self.local.delete_segments_later(doomed)

    def delete_old_segments(
        self, predicate: Callable[[LogSegment, LogSegment | None], bool], reason: str
    ) -> list[tuple[int, int]]:
        """Kafka's ``deleteOldSegments`` (see :meth:`LogRemovals.delete_old_segments`): returns
        (base offset, size) of each deleted segment."""
        return self._removals.delete_old_segments(predicate, reason)

    # -- flush and close -------------------------------------------------------------

    def flush(self, up_to_offset: int | None = None) -> None:
        """fsync every segment holding offsets below ``up_to_offset`` (default: the LEO) and
        move the recovery point there."""
        with self._lock:
            self._check_open()
            local, started = self.local, perf_ns()
            before = local.recovery_point
            local.flush(up_to_offset)
            if local.recovery_point != before:  # as Kafka, only a flush that moved it counts
                self.stats.record_flush(perf_ns() - started)

    @property
    def last_flush_ms(self) -> int:
        """When the log was last flushed (or opened)."""
        return self.local.last_flush_ms

    @property
    def min_snapshots_offset_to_retain(self) -> int:
        """The oldest producer snapshot worth keeping (Kafka's minSnapshotsOffsetToRetain):
        the lower of the base of the last segment starting below the recovery point (where
        recovery rebuilds from) and the base of the segment before the active one (where a
        truncation rebuilds from). Tiered, also the end of the last copied segment: the copy
        of each later segment ships the snapshot at its end to the tier."""
        with self._lock:
            segments, recovery_point = self.local.segments, self.local.recovery_point
            active = segments.active.base_offset
            before_active = segments.floor(active - 1)
            two_segments = before_active.base_offset if before_active else active
            before_rp = segments.floor(recovery_point - 1)
            recovery = before_rp.base_offset if before_rp else recovery_point
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
        if now_ms - self.local.last_flush_ms < self._config["flush.ms"]:
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
            self.producer_state.update_map_end_offset(self.local.next_offset)
            self.producer_state.take_snapshot()
            self.local.close()
            self._closed = True

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _check_open(self) -> None:
        if self._closed:
            raise LogClosedError(f"{self.directory} is closed")

    def _check_writable(self) -> None:
        """What every change checks: the log is open, and was not opened read-only."""
        self._check_open()
        if self.read_only:
            raise ReadOnlyLogError(f"{self.directory} was opened read-only: it cannot be changed")

    def __repr__(self) -> str:
        return (
            f"Log({self.directory.name}, start={self._log_start_offset}, "
            f"end={self.local.next_offset}, segments={len(self.local.segments)})"
        )

