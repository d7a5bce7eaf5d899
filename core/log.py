"""Log: one partition directory (``<topic>-<partition>``): append, read, roll, offsets.

The composition root of the local engine (Kafka's ``UnifiedLog``): validates producer batches
as bytes, assigns offsets by patching headers and writes them with one vectored write; owns
the log start offset, high watermark, LSO, producer state, leader epochs, the remote tier and
lifecycle events. The segments, the log end offset and the recovery point are its
:class:`~tierlog.local_log.LocalLog`'s (``log.local``), which it drives under its lock.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, Self

from tierlog import filenames
from tierlog.append_plan import (
    AppendPlan,
    LogAppendInfo,
    check_leader_epoch,
    plain_appends_allowed,
    plan_append,
)
from tierlog.checkpoint import LeaderEpochCheckpointFile
from tierlog.config import LogConfig
from tierlog.errors import (
    LogClosedError,
    OffsetOutOfRangeError,
    PluginError,
    RecordBatchTooLargeError,
)
from tierlog.events import EventQueue, SegmentDeleted, SegmentRolled
from tierlog.fetch import FetchDataInfo, check_isolation
from tierlog.index.plugin import resolve_index_types
from tierlog.leader_epoch import LeaderEpochFileCache
from tierlog.loader import LogLoader, RecoveryReport, rebuild_producer_state
from tierlog.local_log import LocalLog
from tierlog.partition_metadata import PartitionMetadataFile, new_topic_id
from tierlog.segment_appender import PlainAppenderType
from tierlog.plugin_manager import PluginHost, get_plugins
from tierlog.producer_state import (
    DEFAULT_PRODUCER_ID_EXPIRATION_MS,
    ProducerBatchRun,
    ProducerStateManager,
)
from tierlog.records.builder import build_batch, build_control_batch
from tierlog.records.compression import NONE, codec_id
from tierlog.records.file_records import TimestampAndOffset
from tierlog.records.record import Record
from tierlog.scheduler import Scheduler
from tierlog.segment import LogSegment
from tierlog.segments import LogSegments
from tierlog.tier_reads import TierReads

log = logging.getLogger(__name__)

#: (topic_id, topic, partition, offset) -> the producer snapshot a remote tier holds there.
RemoteSnapshots = Callable[[str, str, int, int], "bytes | None"]

#: Kafka's special timestamps for offset lookups (ListOffsets).
EARLIEST_TIMESTAMP = -2
LATEST_TIMESTAMP = -1
MAX_TIMESTAMP = -3

__all__ = ["EARLIEST_TIMESTAMP", "LATEST_TIMESTAMP", "MAX_TIMESTAMP", "Log", "LogAppendInfo"]


def _now_ms() -> int:
    return int(time.time() * 1000)


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
    ) -> None:
        self.directory = directory
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
        self._scheduler = scheduler
        self.topic = topic
        self.partition = partition
        self._config = config
        self._time_ms = time_ms
        self._rng = rng
        self._lock = threading.RLock()
        self._closed = False
        self._auto_high_watermark = auto_high_watermark
        #: The segments, log end offset and recovery point (guarded by ``self._lock``).
        self.local = LocalLog(directory, config, time_ms=time_ms, rng=rng, scheduler=scheduler,
                              lock=self._lock, index_types=self._index_types)
        self.leader_epoch_cache = LeaderEpochFileCache(
            LeaderEpochCheckpointFile(directory / filenames.LEADER_EPOCH_CHECKPOINT)
        )
        self.producer_state = ProducerStateManager(directory, producer_id_expiration_ms,
                                                   time_ms=time_ms)
        self.topic_id = self._load_topic_id(topic_id)
        loader = LogLoader(
            directory,
            self.local.open_segment,
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
        segments = loader.load()
        self.recovery: RecoveryReport = loader.report
        self._log_start_offset = self.recovery.log_start_offset
        self._high_watermark = self._log_start_offset
        self.local.loaded(segments, self.recovery.log_end_offset, self.recovery.recovery_point)
        if auto_high_watermark:
            self._set_high_watermark(self.local.next_offset)
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
        yet part of the log (see :meth:`LocalLog.open_segment`)."""
        return self.local.open_segment(base_offset, suffix)

    def _rebuild_producer_state(self) -> None:
        """Load the newest valid snapshot, then replay the batches after it (Kafka's rebuild)."""
        rebuild_producer_state(self.producer_state, self.local.segments, self._log_start_offset,
                               self.local.next_offset, self._time_ms())

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
                    # The Log's bookkeeping, inline (as _append_planned's _after_append).
                    size, last, max_ts, count, epoch = written
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
            data, config=self._config, next_offset=self.local.next_offset, now_ms=now,
            assign_offsets=assign_offsets, leader_epoch=leader_epoch, origin=origin,
            check_records=check_records,
        )
        duplicate = self._producer_checks(plan, origin)
        if duplicate is not None:
            return duplicate
        segment = self._maybe_roll(plan, now)
        segment.append(plan.pieces, plan.batches, plan.views)
        self.local.next_offset = plan.last_offset + 1
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
        local = self.local
        if plan.producer_run is not None:
            plan.producer_run.apply(segment.append_aborted_txn)
        self.producer_state.update_map_end_offset(local.next_offset)
        if self._auto_high_watermark:
            self._set_high_watermark(local.next_offset)
        for epoch, start in plan.epoch_starts:
            self._assign_epoch(epoch, start)
        if local.next_offset - local.recovery_point >= self._flush_messages:
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
            check_leader_epoch(leader_epoch)
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
        segment = self.local.segments.active
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
            segment = self._roll(self.local.next_offset)
        self._deliver_events()
        return segment

    def _roll(self, new_base: int) -> LogSegment:
        """Roll the local log (the producer state is snapshotted at the new base before the
        new segment joins) and post SegmentRolled."""
        active = self.local.segments.active
        segment = self.local.roll(new_base, self._snapshot_producer_state_at)
        if segment is not active:
            self._events.post("tierlog_segment_rolled", SegmentRolled(
                self.topic, self.partition, self.topic_id, active.base_offset,
                segment.base_offset, active.size, active.max_timestamp_so_far))
        return segment

    def _snapshot_producer_state_at(self, offset: int) -> None:
        self.producer_state.update_map_end_offset(offset)
        self.producer_state.take_snapshot()

    def _deliver_events(self) -> None:
        """Hand the queued lifecycle events to plugins, outside the log's lock: a caller that
        still holds the lock (re-entrantly) leaves them for the outermost release."""
        if self._events.pending and not self._lock._is_owned():  # type: ignore[attr-defined]
            self._events.deliver()

    # -- reading (local segments, or the remote tier below the local log start) ---------

    def read(
        self,
        offset: int,
        max_bytes: int = 1 << 20,
        *,
        isolation: str = "log_end",
        max_offset: int | None = None,
        min_one_message: bool = True,
    ) -> FetchDataInfo:
        """Read batches from ``offset``: at most ``max_bytes`` (but at least one whole batch
        when ``min_one_message``), capped by the isolation level: ``log_end`` (everything
        appended), ``read_uncommitted`` (the high watermark) or ``read_committed`` (the last
        stable offset, with the aborted transactions of the range). Offsets below the local
        log start offset are read from the remote tier when the log is tiered."""
        check_isolation(isolation)
        with self._lock:
            self._check_open()
            start, leo = self._log_start_offset, self.local.next_offset
            if isolation == "log_end":
                upper = leo
            elif isolation == "read_uncommitted":
                upper = self._high_watermark
            else:
                upper = self.last_stable_offset
            if max_offset is not None:
                upper = min(upper, max_offset)
            segments = self.local.segments.values(offset)
            local_start = self.local_log_start_offset
        if offset < start or offset > leo:
            raise OffsetOutOfRangeError(
                f"{self.directory.name}: offset {offset} is out of range "
                f"[{start}, {leo}] (log start offset, log end offset)"
            )
        if offset >= upper:
            return FetchDataInfo.empty(offset, upper, isolation)
        if self.remote is not None and offset < local_start:
            # The local segments go along: markers of remote transactions may be in them.
            return self.remote.read(offset, max_bytes, isolation, upper, min_one_message,
                                    segments)
        return LocalLog.read(segments, leo, offset, max_bytes, isolation, upper,
                             min_one_message)

    def offset_for_timestamp(self, timestamp: int) -> int | None:
        """The earliest offset whose record timestamp is >= ``timestamp`` (None if none)."""
        found = self.fetch_offset_by_timestamp(timestamp)
        return None if found is None else found.offset

    def fetch_offset_by_timestamp(self, timestamp: int) -> TimestampAndOffset | None:
        """Kafka's ListOffsets for one partition, including -2 (earliest), -1 (latest) and
        -3 (the record with the max timestamp)."""
        with self._lock:
            self._check_open()
            segments = self.local.segments.values()
            start = self._log_start_offset
            leo = self.local.next_offset
        if timestamp == EARLIEST_TIMESTAMP:
            return TimestampAndOffset(-1, start)
        if timestamp == LATEST_TIMESTAMP:
            return TimestampAndOffset(-1, leo)
        if timestamp == MAX_TIMESTAMP:
            return LocalLog.max_timestamp(segments)
        if self.remote is not None:
            found = self.remote.fetch_offset_by_timestamp(timestamp, start)
            if found is not None:
                return found
        return LocalLog.find_offset_by_timestamp(segments, timestamp, start)

    def lookup_index(self, name: str, key: Any) -> Any:
        """Ask the plugin index type ``name`` of each segment, newest first, for ``key``;
        the first answer that is not None wins (None if no segment knows the key). On a
        tiered log, an index type that is ``uploaded_to_remote`` is then asked through the
        tier's copies of the segments no longer held locally."""
        with self._lock:
            self._check_open()
            segments = self.local.segments.values()
            remote, local_start = self.remote, self.local_log_start_offset
        index_type = next((t for t in self._index_types.extras if t.name == name), None)
        if index_type is None:
            raise PluginError(
                f"{self.directory.name} has no {name!r} index (index types of this log: "
                f"{', '.join(t.name for t in self._index_types.extras) or 'none from plugins'})"
            )
        for segment in reversed(segments):
            found = segment.extra_indexes[name].lookup(key)
            if found is not None:
                return found
        if remote is not None and index_type.uploaded_to_remote:
            return remote.lookup_index(index_type, key, local_start)
        return None

    def lookup_key(self, key: bytes) -> int | None:
        """The latest offset of ``key`` (through a plugin's ``key`` index, e.g. the
        tierlog-key-index plugin on compacted topics), or None; never below the log start."""
        found = self.lookup_index("key", key)
        return found if found is not None and found >= self._log_start_offset else None

    # -- truncation, the log start offset and retention ------------------------------------

    def truncate_to(self, target_offset: int) -> bool:
        """Remove every batch holding an offset >= ``target_offset`` (a follower truncating to
        its leader). Segments, indexes, producer state, the epoch cache, the high watermark
        and the recovery point stay consistent. Returns False when there was nothing to do."""
        if target_offset < 0:
            raise ValueError(f"cannot truncate {self.directory.name} to negative offset {target_offset}")
        try:
            return self._truncate_to(target_offset)
        finally:
            self._deliver_events()

    def _truncate_to(self, target_offset: int) -> bool:
        with self._lock:
            self._check_open()
            local = self.local
            if target_offset >= local.next_offset:
                # A leader may have assigned an epoch at the log end and written nothing in it.
                self.leader_epoch_cache.truncate_from_end(local.next_offset)
                return False
            first = local.segments.first
            if first is None or target_offset < first.base_offset:
                self._truncate_fully(target_offset)
                return True
            removed = local.truncate_to(target_offset, self._on_segments_removed)
            leo = local.next_offset
            self._known_epoch = None
            # Kafka: truncating below the log start offset moves the log start down with it.
            self._log_start_offset = min(self._log_start_offset, leo)
            self.leader_epoch_cache.truncate_from_end(leo)
            self._rebuild_producer_state()
            if self._high_watermark > leo:
                self._set_high_watermark(leo)
            log.info("%s: truncated to offset %d (%d bytes from the active segment)",
                     self.directory.name, leo, removed)
            return True

    def truncate_fully_and_start_at(self, new_offset: int) -> None:
        """Delete every segment and restart the log, empty, at ``new_offset``."""
        if new_offset < 0:
            raise ValueError(f"cannot restart {self.directory.name} at negative offset {new_offset}")
        with self._lock:
            self._check_open()
            self._truncate_fully(new_offset)
        self._deliver_events()

    def _truncate_fully(self, new_offset: int) -> None:
        self.local.truncate_fully(new_offset, self._on_segments_removed)
        self._log_start_offset = new_offset
        self.producer_state.truncate_fully_and_start_at(new_offset)
        self.leader_epoch_cache.clear_and_flush()
        self._known_epoch = None
        self._set_high_watermark(new_offset)
        log.info("%s: truncated fully; the log now starts at offset %d",
                 self.directory.name, new_offset)

    def delete_records_before(self, offset: int) -> int:
        """Kafka's DeleteRecords: move the log start offset up to ``offset`` (at most the high
        watermark). Reads below it then raise OffsetOutOfRangeError; retention deletes the
        segments that fall wholly below it. Returns the new log start offset."""
        with self._lock:
            self._check_open()
            if offset > self._high_watermark:
                raise OffsetOutOfRangeError(
                    f"{self.directory.name}: cannot delete records before offset {offset}: it is "
                    f"above the high watermark {self._high_watermark}"
                )
            self.maybe_increment_log_start_offset(offset)
            return self._log_start_offset

    def maybe_increment_log_start_offset(self, offset: int) -> bool:
        """Raise the log start offset (never lowers it); updates the epoch cache and producer
        state. Returns True when it moved."""
        with self._lock:
            if offset <= self._log_start_offset:
                return False
            self._log_start_offset = offset
            self.leader_epoch_cache.truncate_from_start(offset)
            self.producer_state.on_log_start_offset_incremented(offset)
            if self._high_watermark < offset:
                self._set_high_watermark(offset)
            log.info("%s: log start offset is now %d", self.directory.name, offset)
            return True

    def _on_segments_removed(self, doomed: Sequence[LogSegment], reason: str) -> None:
        """What the Log drops when the local log removes segments (before their files go):
        it posts SegmentDeleted for each, and deletes the producer snapshots below the first
        remaining segment but the one a replay from it starts from (Kafka deletes the
        snapshots of deleted segments; below the first segment nothing can be replayed
        locally, and a tiered log's older data is only in the tier). Those above the log end
        go when producer state is rebuilt."""
        for segment in doomed:
            self._events.post("tierlog_segment_deleted", SegmentDeleted(
                self.topic, self.partition, self.topic_id, segment.base_offset, segment.size,
                reason))
        first = self.local.segments.first
        if first is not None:
            self.producer_state.delete_snapshots_before(first.base_offset, keep_floor=True)

    def delete_segments_later(self, doomed: Sequence[LogSegment]) -> None:
        """Close and delete segments already taken out of the log (their files renamed
        ``.deleted``) after ``file.delete.delay.ms`` (see :meth:`LocalLog.delete_segments_later`)."""
        self.local.delete_segments_later(doomed)

    def delete_old_segments(
        self, predicate: Callable[[LogSegment, LogSegment | None], bool], reason: str
    ) -> list[tuple[int, int]]:
        """Kafka's ``deleteOldSegments``: from the oldest segment on, delete while
        ``predicate(segment, next_segment)`` holds and the segment is wholly below the high
        watermark (and, when tiered, already copied to the remote tier). An empty active
        segment stays; if every segment goes, the log rolls first so one remains. Untiered,
        the log start offset moves to the first remaining segment; tiered, only the local log
        start offset moves. Returns (base offset, size) of each deleted segment."""
        try:
            return self._delete_old_segments(predicate, reason)
        finally:
            self._deliver_events()

    def _delete_old_segments(
        self, predicate: Callable[[LogSegment, LogSegment | None], bool], reason: str
    ) -> list[tuple[int, int]]:
        with self._lock:
            self._check_open()
            local = self.local
            tiered = self.remote_storage_enabled
            deletable = local.deletable_segments(
                predicate, self._high_watermark,
                self._highest_offset_in_remote if tiered else None)
            if not deletable:
                return []
            if len(deletable) == len(local.segments):
                new_segment = self._roll(local.next_offset)
                if deletable[-1] is new_segment:
                    deletable.pop()
            deleted = [(s.base_offset, s.size) for s in deletable]
            local.remove_segments(deletable, reason, self._on_segments_removed)
            first = local.segments.first
            if not tiered and first is not None:  # a roll above keeps one segment
                self.maybe_increment_log_start_offset(first.base_offset)
            return deleted

    # -- flush and close -------------------------------------------------------------

    def flush(self, up_to_offset: int | None = None) -> None:
        """fsync every segment holding offsets below ``up_to_offset`` (default: the LEO) and
        move the recovery point there."""
        with self._lock:
            self._check_open()
            self.local.flush(up_to_offset)

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

    def __repr__(self) -> str:
        return (
            f"Log({self.directory.name}, start={self._log_start_offset}, "
            f"end={self.local.next_offset}, segments={len(self.local.segments)})"
        )

