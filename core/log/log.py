"""Log: one partition directory (``<topic>-<partition>``): append, read, roll, offsets.

The composition root of the local engine (Kafka's ``UnifiedLog``): it owns its parts and
drives them under its lock, each the one owner of its state: the segments, log end offset and
recovery point are its :class:`~tierlog.log.local_log.LocalLog`'s (``log.local``); the log
start offset, high watermark and highest tiered offset its
:class:`~tierlog.log.offsets.LogOffsets`'; the producer state, the leader-epoch cache and
the lifecycle events their own. Appends, rolls and flushes go through
:class:`~tierlog.log.log_append.LogAppends` (settings read once from the config), removals
through :class:`~tierlog.log.log_removals.LogRemovals`, reads through a frozen
:class:`~tierlog.log.log_read.LogView` taken under the lock.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import random
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, Self

from tierlog.checkpoint.checkpoint_file import EpochEntry, LeaderEpochCheckpointFile
from tierlog.checkpoint.partition_metadata import ZERO_TOPIC_ID, PartitionMetadataFile, new_topic_id
from tierlog.common import filenames
from tierlog.common.clock import system_time_ms
from tierlog.common.data_dir_lock import live_owner
from tierlog.common.scheduler import Scheduler
from tierlog.common.stats import LogStats
from tierlog.config import LogConfig
from tierlog.errors import (
    CopyLagExceededError,
    DataDirLockedError,
    LogClosedError,
    NotLeaderOrFollowerError,
    ReadOnlyLogError,
)
from tierlog.index.index_types import resolve_index_types
from tierlog.log import log_read
from tierlog.log.append_plan import LogAppendInfo, check_leader_epoch
from tierlog.log.fetch_info import FetchDataInfo, check_isolation
from tierlog.log.leader_epoch import LeaderEpochFileCache
from tierlog.log.loader import LogLoader, RecoveryReport
from tierlog.log.local_log import LocalLog
from tierlog.log.log_append import AppendSettings, LogAppends
from tierlog.log.log_events import PartitionEvents
from tierlog.log.log_read import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP, MAX_TIMESTAMP, LogView
from tierlog.log.log_removals import LogRemovals
from tierlog.log.offsets import LogOffsets
from tierlog.log.segment import LogSegment
from tierlog.log.segment_appender import PlainAppenderType
from tierlog.log.segments import LogSegments
from tierlog.log.tier_reads import TierReads
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
    plugins after it is released (:class:`~tierlog.log.log_events.PartitionEvents`).
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
        stats = LogStats()
        host = plugins or get_plugins()
        #: Which type opens each index of this log's segments: the registry's, built-ins
        #: included, so a plugin may replace one.
        self._index_types = resolve_index_types(host.registries.index_types, config)
        self._leader_epoch: int | None = None
        self.leader_epoch = leader_epoch
        #: The remote tier's reader once a RemoteLogManager attached one (see attach_remote).
        self.remote: TierReads | None = None
        #: Set by the manager while the local bytes not yet copied to the remote tier exceed
        #: remote.log.copy.lag.max.bytes: client appends raise it (one check per append).
        self._copy_lag_error: CopyLagExceededError | None = None
        self.topic = topic
        self.partition = partition
        self._config = config
        self._time_ms = time_ms
        self._lock = threading.RLock()
        self._closed = False
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
        #: Lifecycle events queued under the lock, delivered to plugins after it is released.
        self._events = PartitionEvents(host.events, self._lock, topic, partition, self.topic_id)
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
        self.local.loaded(segments, self.recovery.log_end_offset, self.recovery.recovery_point)
        #: The log start offset, high watermark and highest tiered offset, and their invariant.
        self._offsets = LogOffsets(self.recovery.log_start_offset, self.local.next_offset,
                                   self.producer_state, self.leader_epoch_cache)
        #: Appends, rolls and flushes; removals. Each holds the parts it drives, not the Log.
        self._appends = LogAppends(
            AppendSettings.from_config(config, self._index_types, auto_high_watermark),
            self.local, self._offsets, self.producer_state, self.leader_epoch_cache,
            self._events, stats, time_ms)
        self._removals = LogRemovals(self.local, self._offsets, self.producer_state,
                                     self._events, self._appends.roll, time_ms)
        if auto_high_watermark:
            self._offsets.set_high_watermark(self.local.next_offset, self.local.next_offset)
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
        directory's ``.lock``, see :mod:`tierlog.common.data_dir_lock`): only its owner writes it.
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
        config: LogConfig | Mapping[str, Any] | None = None,
        **kwargs: Any,  # noqa: ANN401 - forwarded to open(), whose signature types each
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
        return self._offsets.log_start_offset

    @property
    def local_log_start_offset(self) -> int:
        first = self.segments.first
        return max(self._offsets.log_start_offset, first.base_offset if first else 0)

    @property
    def log_end_offset(self) -> int:
        """LEO: the offset the next appended record will get."""
        return self.local.next_offset

    @property
    def high_watermark(self) -> int:
        return self._offsets.high_watermark

    @property
    def recovery_point(self) -> int:
        return self.local.recovery_point

    @property
    def last_stable_offset(self) -> int:
        """The first offset of the earliest open transaction, else the high watermark."""
        return self._offsets.last_stable_offset

    def update_high_watermark(self, offset: int) -> int:
        """Set the high watermark (clamped to [log start, LEO]); returns the value set."""
        with self._lock:
            return self._offsets.update_high_watermark(offset, self.local.next_offset)

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

    @property
    def stats(self) -> LogStats:
        """Event counters (appends, flushes, rolls, cleanup, remote traffic) for exporters."""
        return self._appends.stats

    @stats.setter
    def stats(self, stats: LogStats) -> None:
        """Count into ``stats`` from now on (a reopened log carries its partition's counters
        on: a reset reads as a gap on a dashboard)."""
        with self._lock:
            self._appends.count_into(stats)

    @property
    def append_settings(self) -> AppendSettings:
        """What appends read of the config, read once when the log opened."""
        return self._appends.settings

    @property
    def _fast_append(self) -> bool:
        """Whether the producer hot path is armed after a general append (the append
        benchmark turns it off on its own instance to measure the general path alone)."""
        return self._appends.settings.fast_append

    @_fast_append.setter
    def _fast_append(self, value: bool) -> None:
        self._appends.settings = dataclasses.replace(self._appends.settings, fast_append=value)

    @property
    def _plain_appender(self) -> PlainAppenderType | None:
        """The active segment's armed hot-path appender (the LocalLog's), for tests."""
        return self.local.plain_appender

    # -- tiered storage ----------------------------------------------------------------

    @property
    def remote_storage_enabled(self) -> bool:
        return bool(self._config["remote.storage.enable"])

    @property
    def highest_offset_in_remote(self) -> int:
        """The last offset the remote tier holds (-1: none); local segments at or below it
        may be deleted by local retention."""
        return self._offsets.highest_offset_in_remote

    def attach_remote(self, reader: TierReads, highest_offset_in_remote: int) -> None:
        """Called by the RemoteLogManager: reads below the local log start offset go to
        ``reader`` from now on."""
        with self._lock:
            self.remote = reader
            self._offsets.set_highest_offset_in_remote(highest_offset_in_remote)

    def set_copy_lag_error(self, error: CopyLagExceededError | None) -> None:
        """Refuse client appends with ``error`` (the copy lag is over its limit), or accept
        them again (None). Called by the manager, which measures the lag."""
        self._copy_lag_error = error

    @property
    def copy_lag_error(self) -> CopyLagExceededError | None:
        return self._copy_lag_error

    def update_highest_offset_in_remote(self, offset: int) -> None:
        with self._lock:
            self._offsets.tiered_up_to(offset)

    # -- appending -------------------------------------------------------------------

    def append(
        self,
        data: bytes | bytearray | memoryview,
        *,
        assign_offsets: bool = True,
        leader_epoch: int | None = None,
        origin: str = "client",
        as_leader_at: int | None = None,
    ) -> LogAppendInfo:
        """Append producer-built v2 batches (bytes): validate, assign offsets, write.

        ``assign_offsets=False`` appends batches that already carry their offsets (a follower,
        a remote fetch, compaction output): they must start at or after the log end and
        increase. Any invalid batch rejects the whole append and leaves the log unchanged.
        ``as_leader_at``: the leader epoch a replicated partition's leader decided to append
        at; NotLeaderOrFollowerError (nothing written) when the log is no longer led at it
        (its leadership moved between the decision and the append, which stamps that epoch).
        """
        if leader_epoch is not None:
            check_leader_epoch(leader_epoch)
        # acquire/release rather than `with`: half the cost (~75 ns) on a path run per batch.
        lock = self._lock
        lock.acquire()
        try:
            if self._closed:
                raise LogClosedError(f"{self.directory} is closed")
            if as_leader_at is not None:
                if self._leader_epoch != as_leader_at:
                    raise NotLeaderOrFollowerError(
                        f"{self.directory.name}: no longer led at leader epoch {as_leader_at} "
                        f"(now {self._leader_epoch})")
                leader_epoch = as_leader_at
            if self._copy_lag_error is not None and origin == "client":
                raise self._copy_lag_error.with_traceback(None)  # no growing traceback
            if assign_offsets and origin == "client":
                # The producer hot path: one plain batch (no producer id, no control records)
                # while the active segment is armed, so no roll can be due. One C call writes
                # it at the log end, moves the end and counts it; the header, CRC and records
                # get the general path's checks; None (nothing written: none armed, or
                # anything unusual) sends it down the general path, which reports the
                # precise error.
                local = self.local
                first = local.next_offset
                written = local.append_plain(
                    data, self._leader_epoch if leader_epoch is None else leader_epoch)
                if written is not None:
                    size, last, max_ts, count, epoch = written
                    appends = self._appends
                    # The bookkeeping, when any can be due (the cache's is_news, inline).
                    if (appends.settings.book_every_append
                            or epoch > self.leader_epoch_cache.newest_epoch):
                        appends.appended(first, last + 1, epoch)
                    # tuple.__new__ skips the Python frame of the generated __new__.
                    return _new_tuple(LogAppendInfo, (
                        first, last, max_ts, last, -1, self._offsets.log_start_offset, count,
                        1, size, False))
            if self.read_only:  # (never armed: a read-only open arms no hot path)
                self._check_writable()
            if leader_epoch is None and origin != "replication":
                leader_epoch = self._leader_epoch
            info = self._appends.append(data, assign_offsets, leader_epoch, origin,
                                        self._appends.settings.check_records)
        finally:
            lock.release()
        self._events.deliver()  # the general path may have rolled
        return info

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
            info = self._appends.append(
                data, True, self._leader_epoch if leader_epoch is None else leader_epoch,
                "client", False)
        self._events.deliver()
        return info

    def append_marker(
        self, producer_id: int, producer_epoch: int, *, commit: bool, coordinator_epoch: int = 0,
        leader_epoch: int | None = None, as_leader_at: int | None = None,
    ) -> LogAppendInfo:
        """Write a COMMIT or ABORT control batch that ends the producer's open transaction."""
        data = build_control_batch(
            1 if commit else 0, producer_id=producer_id, producer_epoch=producer_epoch,
            coordinator_epoch=coordinator_epoch, timestamp=self._time_ms(),
        )
        return self.append(data, leader_epoch=leader_epoch, origin="coordinator",
                           as_leader_at=as_leader_at)

    # -- rolling ---------------------------------------------------------------------

    def roll(self) -> LogSegment:
        """Close the active segment and start a new one at the log end offset."""
        with self._lock:
            self._check_writable()
            segment = self._appends.roll(self.local.next_offset)
        self._events.deliver()
        return segment

    # -- reading (a LogView: local segments, or the remote tier below the local start) ------

    def view(self, from_offset: int | None = None) -> LogView:
        """One consistent view of the segments (from the one holding ``from_offset``, when
        given) and the offsets, taken under the lock: what reads work on."""
        with self._lock:
            self._check_open()
            offsets, local = self._offsets, self.local
            return LogView(
                self.directory.name, local.segments.values(from_offset),
                offsets.log_start_offset, self.local_log_start_offset, local.next_offset,
                offsets.high_watermark, offsets.last_stable_offset, self.remote)

    def read(self, offset: int, max_bytes: int = 1 << 20, *, isolation: str = "log_end",
             max_offset: int | None = None, min_one_message: bool = True) -> FetchDataInfo:
        """Read batches from ``offset`` (see :func:`tierlog.log.log_read.read`)."""
        check_isolation(isolation)
        return log_read.read(self.view(offset), offset, max_bytes, isolation=isolation,
                             max_offset=max_offset, min_one_message=min_one_message)

    def offset_for_timestamp(self, timestamp: int) -> int | None:
        """The earliest offset whose record timestamp is >= ``timestamp`` (None if none)."""
        found = self.fetch_offset_by_timestamp(timestamp)
        return None if found is None else found.offset

    def fetch_offset_by_timestamp(self, timestamp: int) -> TimestampAndOffset | None:
        """Kafka's ListOffsets for one partition (see
        :func:`tierlog.log.log_read.fetch_offset_by_timestamp`)."""
        return log_read.fetch_offset_by_timestamp(self.view(), timestamp)

    def lookup_index(self, name: str, key: Any) -> Any:  # noqa: ANN401 - a plugin index's key and answer are its own types
        """Ask the plugin index type ``name`` for ``key`` (see
        :func:`tierlog.log.log_read.lookup_index`)."""
        return log_read.lookup_index(self.view(), self._index_types.extras, name, key)

    def lookup_key(self, key: bytes) -> int | None:
        """The latest offset of ``key`` (through a plugin's ``key`` index, e.g. the
        tierlog-key-index plugin on compacted topics), or None; never below the log start."""
        found = self.lookup_index("key", key)
        return found if found is not None and found >= self.log_start_offset else None

    # -- removals (LogRemovals: truncation, the log start offset and retention) ------------

    def truncate_to(self, target_offset: int) -> bool:
        """Remove every batch holding an offset >= ``target_offset`` (a follower truncating to
        its leader); False when there was nothing to do (see :meth:`LogRemovals.truncate_to`)."""
        if target_offset < 0:
            raise ValueError(
                f"cannot truncate {self.directory.name} to negative offset {target_offset}")
        try:
            with self._lock:
                self._check_writable()
                return self._removals.truncate_to(target_offset)
        finally:
            self._events.deliver()

    def truncate_fully_and_start_at(self, new_offset: int) -> None:
        """Delete every segment and restart the log, empty, at ``new_offset``."""
        if new_offset < 0:
            raise ValueError(
                f"cannot restart {self.directory.name} at negative offset {new_offset}")
        with self._lock:
            self._check_writable()
            self._removals.truncate_fully(new_offset)
        self._events.deliver()

    def start_from_tier(self, next_offset: int, log_start_offset: int,
                        epochs: Sequence[EpochEntry], producer_snapshot: bytes | None,
                        source: str) -> None:
        """A follower's log restarted from the remote tier (Kafka's TierStateMachine): every
        segment deleted, the log empty at ``next_offset`` (the end of what the tier holds),
        its log start at ``log_start_offset`` (the tier's: older offsets are read from it),
        the leader epochs of the tier's checkpoint below ``next_offset`` and the producer
        state of its snapshot there (``source`` names it in errors)."""
        if not 0 <= log_start_offset <= next_offset:
            raise ValueError(f"cannot restart {self.directory.name} at {next_offset} with log "
                             f"start offset {log_start_offset}")
        with self._lock:
            self._check_writable()
            self._removals.truncate_fully(next_offset)
            for entry in epochs:
                if entry.start_offset < next_offset:
                    self.leader_epoch_cache.assign(entry.epoch, entry.start_offset)
            if producer_snapshot is not None:
                self.producer_state.restore_snapshot(next_offset, producer_snapshot, source)
                self.producer_state.reload_from_snapshots(next_offset, self._time_ms())
            self._offsets.log_start_offset = log_start_offset
            self._offsets.tiered_up_to(next_offset - 1)
        self._events.deliver()

    def delete_records_before(self, offset: int) -> int:
        """Kafka's DeleteRecords: move the log start offset up to ``offset`` (at most the high
        watermark); returns the new log start offset."""
        with self._lock:
            self._check_writable()
            return self._removals.delete_records_before(offset)

    def maybe_increment_log_start_offset(self, offset: int) -> bool:
        """Raise the log start offset (never lowers it); True when it moved."""
        with self._lock:
            if offset <= self._offsets.log_start_offset:
                return False
            self._check_writable()
            return self._removals.increment_log_start_offset(offset)

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
        try:
            with self._lock:
                self._check_writable()
                return self._removals.delete_old_segments(predicate, reason,
                                                          self.remote_storage_enabled)
        finally:
            self._events.deliver()

    # -- flush and close -------------------------------------------------------------

    def flush(self, up_to_offset: int | None = None) -> None:
        """fsync every segment holding offsets below ``up_to_offset`` (default: the LEO) and
        move the recovery point there."""
        with self._lock:
            self._check_open()
            self._appends.flush(up_to_offset)

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
                keep = min(keep, self._offsets.highest_offset_in_remote + 1)
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
            f"Log({self.directory.name}, start={self._offsets.log_start_offset}, "
            f"end={self.local.next_offset}, segments={len(self.local.segments)})"
        )

