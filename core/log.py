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
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tierlog import filenames
from tierlog.appender import AppendPlan, plan_append
from tierlog.atomic import fsync_dir
from tierlog.config import LogConfig
from tierlog.errors import (
    LogClosedError,
    OffsetOutOfRangeError,
    RecordBatchTooLargeError,
)
from tierlog.fetch import FetchDataInfo, check_isolation
from tierlog.index import AbortedTxn
from tierlog.checkpoint import LeaderEpochCheckpointFile
from tierlog.leader_epoch import LeaderEpochFileCache
from tierlog.loader import LogLoader, RecoveryReport, apply_batch, rebuild_producer_state
from tierlog.partition_metadata import PartitionMetadataFile, new_topic_id
from tierlog.producer_state import (
    DEFAULT_PRODUCER_ID_EXPIRATION_MS,
    CompletedTxn,
    ProducerAppendInfo,
    ProducerStateManager,
)
from tierlog.records.builder import build_batch, build_control_batch
from tierlog.records.compression import codec_id
from tierlog.records.file_records import TimestampAndOffset
from tierlog.records.record import Record
from tierlog.segment import LogSegment, RollParams
from tierlog.scheduler import Scheduler
from tierlog.segments import LogSegments

log = logging.getLogger(__name__)

#: Kafka's special timestamps for offset lookups (ListOffsets).
EARLIEST_TIMESTAMP = -2
LATEST_TIMESTAMP = -1
MAX_TIMESTAMP = -3


def _now_ms() -> int:
    return int(time.time() * 1000)


@dataclass(frozen=True, slots=True)
class LogAppendInfo:
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


class Log:
    """A partition's log: segments on disk plus the offsets that describe them.

    Thread-safe: appends, rolls and truncations hold the log's lock; reads take a consistent
    view of the segments and offsets under it and then read without it.
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
    ) -> None:
        self.directory = directory
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
            self._open_segment,
            recovery_point=recovery_point,
            had_clean_shutdown=had_clean_shutdown,
            log_start_offset=log_start_offset,
            producer_state=self.producer_state,
            leader_epoch_cache=self.leader_epoch_cache,
            time_ms=time_ms,
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
        if self.recovery.changed_anything:
            log.warning("%s: %s", directory, self.recovery.summary())
        else:
            log.debug("%s: %s", directory, self.recovery.summary())

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
    ) -> Log:
        """Open (creating if needed) the partition directory ``<topic>-<partition>``.

        Without ``had_clean_shutdown`` every segment from the one holding ``recovery_point``
        on is re-validated, as after a crash; what recovery did is in ``log.recovery``.
        After a crash the recovery point stays where it was until the next flush (Kafka).
        ``auto_high_watermark`` advances the high watermark to the log end on every append
        (a partition with one replica); otherwise the caller advances it. With a
        ``scheduler``, deleted segments are removed after ``file.delete.delay.ms``.
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

    def _open_segment(self, base_offset: int, suffix: str) -> LogSegment:
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
        with self._lock:
            self._check_open()
            now = self._time_ms()
            plan = plan_append(
                data, config=self._config, next_offset=self._next_offset, now_ms=now,
                assign_offsets=assign_offsets, leader_epoch=leader_epoch, origin=origin,
            )
            duplicate = self._producer_checks(plan, origin)
            if duplicate is not None:
                return duplicate
            segment = self._maybe_roll(plan, now)
            segment.append(plan.pieces, plan.batches)
            self._next_offset = plan.last_offset + 1
            self._after_append(plan, segment)
            return LogAppendInfo(
                plan.first_offset, plan.last_offset, plan.max_timestamp,
                plan.offset_of_max_timestamp, plan.log_append_time, self._log_start_offset,
                plan.record_count, len(plan.batches), plan.size,
            )

    def _producer_checks(self, plan: AppendPlan, origin: str) -> LogAppendInfo | None:
        """Validate producer sequences/epochs; a duplicate batch returns its original offsets."""
        psm = self.producer_state
        infos: dict[int, ProducerAppendInfo] = {}
        completed: list[CompletedTxn] = []
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
            info = infos.get(pid)
            if info is None:
                info = infos[pid] = psm.prepare_update(pid, origin)
            txn = apply_batch(info, batch, plan.base_offsets[batch.position])
            if txn is not None:
                completed.append(txn)
        plan.producer_infos = list(infos.values())
        plan.completed_txns = completed
        return None

    def _after_append(self, plan: AppendPlan, segment: LogSegment) -> None:
        psm = self.producer_state
        for info in plan.producer_infos:
            psm.update(info)
        for txn in plan.completed_txns:
            if txn.is_aborted:
                lso = psm.last_stable_offset(txn)
                segment.append_aborted_txn(
                    AbortedTxn(txn.producer_id, txn.first_offset, txn.last_offset, lso)
                )
            psm.complete_txn(txn)
        psm.update_map_end_offset(self._next_offset)
        if self._auto_high_watermark:
            self._set_high_watermark(self._next_offset)
        for epoch, start in plan.epoch_starts:
            latest = self.leader_epoch_cache.latest_epoch
            if latest is None or epoch > latest:
                self.leader_epoch_cache.assign(epoch, start)
        if self._next_offset - self._recovery_point >= self._config["flush.messages"]:
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
        data = build_batch(
            records, compression=codec_id(compression), producer_id=producer_id,
            producer_epoch=producer_epoch, base_sequence=base_sequence,
            is_transactional=transactional, now_ms=self._time_ms(),
        )
        return self.append(data, leader_epoch=leader_epoch)

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
        params = RollParams(
            self._config["segment.ms"], max_bytes, plan.max_timestamp, plan.last_offset,
            plan.size, now,
        )
        if segment.should_roll(params):
            return self._roll(plan.first_offset)
        return segment

    def roll(self) -> LogSegment:
        """Close the active segment and start a new one at the log end offset."""
        with self._lock:
            self._check_open()
            return self._roll(self._next_offset)

    def _roll(self, new_base: int) -> LogSegment:
        active = self.segments.active
        if active.size == 0 and active.base_offset == new_base:
            return active  # nothing to roll: an empty segment at the same offset
        new_base = max(new_base, self._next_offset)
        if new_base in self.segments:
            raise RecordBatchTooLargeError(
                f"{self.directory.name}: cannot roll to offset {new_base}: segment exists"
            )
        active.on_becoming_inactive()
        self.producer_state.update_map_end_offset(new_base)
        self.producer_state.take_snapshot()
        segment = self._open_segment(new_base, "")
        self.segments.add(segment)
        log.info("%s: rolled new segment at offset %d", self.directory.name, new_base)
        return segment

    # -- reading ---------------------------------------------------------------------

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
        stable offset, with the aborted transactions of the range)."""
        check_isolation(isolation)
        with self._lock:
            self._check_open()
            start, leo = self._log_start_offset, self._next_offset
            if isolation == "log_end":
                upper = leo
            elif isolation == "read_uncommitted":
                upper = self._high_watermark
            else:
                upper = self.last_stable_offset
            if max_offset is not None:
                upper = min(upper, max_offset)
            segments = self.segments.values(offset)
        if offset < start or offset > leo:
            raise OffsetOutOfRangeError(
                f"{self.directory.name}: offset {offset} is out of range "
                f"[{start}, {leo}] (log start offset, log end offset)"
            )
        if offset >= upper:
            return FetchDataInfo.empty(offset, upper, isolation)
        for i, segment in enumerate(segments):
            if segment.base_offset >= upper:
                break
            next_base = segments[i + 1].base_offset if i + 1 < len(segments) else leo
            max_position = None
            if upper < next_base:
                max_position = self._position_of_upper_bound(segment, upper)
            result = segment.read(offset, max_bytes, max_position, min_one_message)
            if result is None:
                continue
            start_pos, data, incomplete = result
            aborted = None
            if isolation == "read_committed":
                aborted = self._collect_aborted(segments[i:], offset, upper)
            return FetchDataInfo(offset, upper, data, isolation, incomplete, aborted)
        return FetchDataInfo.empty(offset, upper, isolation)

    @staticmethod
    def _position_of_upper_bound(segment: LogSegment, upper: int) -> int | None:
        """The file position a read capped at ``upper`` stops at: the start of the batch holding
        ``upper``, or its end when that batch also holds offsets below ``upper`` (a cap chosen
        by the caller; the high watermark and LSO always fall on batch boundaries)."""
        cap = segment.translate_offset(upper)
        if cap is None:
            return None
        header = segment.log.read_header(cap.position)
        if header is not None and header.base_offset < upper:
            return cap.position + cap.size
        return cap.position

    def _collect_aborted(
        self, segments: Sequence[LogSegment], start: int, upper: int
    ) -> tuple[AbortedTxn, ...]:
        # A transaction starting below ``upper`` may be aborted by a marker in any later
        # segment: scan on (as Kafka does) until an entry's last stable offset reaches
        # ``upper``, past which no marker can belong to a transaction of the range.
        aborted: list[AbortedTxn] = []
        for segment in segments:
            result = segment.collect_aborted_txns(start, upper)
            aborted.extend(result.aborted)
            if result.is_complete:
                break
        return tuple(aborted)

    def offset_for_timestamp(self, timestamp: int) -> int | None:
        """The earliest offset whose record timestamp is >= ``timestamp`` (None if none)."""
        found = self.fetch_offset_by_timestamp(timestamp)
        return None if found is None else found.offset

    def fetch_offset_by_timestamp(self, timestamp: int) -> TimestampAndOffset | None:
        """Kafka's ListOffsets for one partition, including -2 (earliest), -1 (latest) and
        -3 (the record with the max timestamp)."""
        with self._lock:
            self._check_open()
            segments = self.segments.values()
            start = self._log_start_offset
            leo = self._next_offset
        if timestamp == EARLIEST_TIMESTAMP:
            return TimestampAndOffset(-1, start)
        if timestamp == LATEST_TIMESTAMP:
            return TimestampAndOffset(-1, leo)
        if timestamp == MAX_TIMESTAMP:
            best = max(segments, key=lambda s: s.max_timestamp_so_far)
            if best.max_timestamp_so_far < 0:
                return None
            return TimestampAndOffset(best.max_timestamp_so_far, best.offset_of_max_timestamp_so_far)
        for segment in segments:
            if segment.max_timestamp_so_far < timestamp:
                continue
            found = segment.find_offset_by_timestamp(timestamp, start)
            if found is not None:
                return found
        return None

    # -- truncation and the log start offset -------------------------------------------

    def truncate_to(self, target_offset: int) -> bool:
        """Remove every batch holding an offset >= ``target_offset`` (a follower truncating to
        its leader). Segments, indexes, producer state, the epoch cache, the high watermark
        and the recovery point stay consistent. Returns False when there was nothing to do."""
        if target_offset < 0:
            raise ValueError(f"cannot truncate {self.directory.name} to negative offset {target_offset}")
        with self._lock:
            self._check_open()
            if target_offset >= self._next_offset:
                # A leader may have assigned an epoch at the log end and written nothing in it.
                self.leader_epoch_cache.truncate_from_end(self._next_offset)
                return False
            first = self.segments.first
            if first is None or target_offset < first.base_offset:
                self._truncate_fully(target_offset)
                return True
            doomed = [s for s in self.segments if s.base_offset >= target_offset]
            if doomed and doomed[0] is self.segments.first:
                doomed = doomed[1:]
            self._remove_segments(doomed, "truncation")
            active = self.segments.active
            removed = active.truncate_to(target_offset)
            active.offset_index.resize(self._config["segment.index.bytes"])
            active.time_index.resize(self._config["segment.index.bytes"])
            self._next_offset = active.read_next_offset()
            self._after_truncation()
            log.info("%s: truncated to offset %d (%d bytes from the active segment)",
                     self.directory.name, self._next_offset, removed)
            return True

    def truncate_fully_and_start_at(self, new_offset: int) -> None:
        """Delete every segment and restart the log, empty, at ``new_offset``."""
        if new_offset < 0:
            raise ValueError(f"cannot restart {self.directory.name} at negative offset {new_offset}")
        with self._lock:
            self._check_open()
            self._truncate_fully(new_offset)

    def _truncate_fully(self, new_offset: int) -> None:
        self._remove_segments(self.segments.values(), "full truncation")
        self.segments.add(self._open_segment(new_offset, ""))
        self._next_offset = new_offset
        self._log_start_offset = new_offset
        self.producer_state.truncate_fully_and_start_at(new_offset)
        self.leader_epoch_cache.clear_and_flush()
        self._recovery_point = new_offset
        self._set_high_watermark(new_offset)
        log.info("%s: truncated fully; the log now starts at offset %d",
                 self.directory.name, new_offset)

    def _after_truncation(self) -> None:
        leo = self._next_offset
        # Kafka: truncating below the log start offset moves the log start down with it.
        self._log_start_offset = min(self._log_start_offset, leo)
        self.leader_epoch_cache.truncate_from_end(leo)
        self._rebuild_producer_state()
        self._recovery_point = min(self._recovery_point, leo)
        if self._high_watermark > leo:
            self._set_high_watermark(leo)

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

    def _remove_segments(self, doomed: Sequence[LogSegment], reason: str) -> None:
        """Take segments out of the log, rename their files to ``.deleted`` and remove them
        after ``file.delete.delay.ms`` (at once without a scheduler), so readers holding a
        slice of them finish first."""
        if not doomed:
            return
        for segment in doomed:
            self.segments.remove(segment.base_offset)
            segment.change_file_suffixes("", filenames.DELETED_SUFFIX)
            log.info("%s: scheduled segment %d for deletion (%s)", self.directory.name,
                     segment.base_offset, reason)
        first = self.segments.first
        if first is not None:
            # Kafka deletes the snapshots of deleted segments; below the first segment none
            # can serve a rebuild (those above the log end go when producer state is rebuilt).
            self.producer_state.delete_snapshots_before(first.base_offset)
        delay = self._config["file.delete.delay.ms"]
        if self._scheduler is None:
            for segment in doomed:
                segment.close()
                segment.delete()
        else:
            self._pending_deletes.extend(doomed)
            self._scheduler.schedule(
                f"delete-segments-{self.directory.name}",
                lambda: self._delete_now(doomed), delay_ms=delay,
            )

    def _delete_now(self, doomed: Sequence[LogSegment]) -> None:
        with self._lock:
            for segment in doomed:
                if segment in self._pending_deletes:
                    self._pending_deletes.remove(segment)
                segment.close()
                segment.delete()

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
        truncation rebuilds from)."""
        with self._lock:
            active = self.segments.active.base_offset
            before_active = self.segments.floor(active - 1)
            two_segments = before_active.base_offset if before_active else active
            before_rp = self.segments.floor(self._recovery_point - 1)
            recovery = before_rp.base_offset if before_rp else self._recovery_point
            return min(recovery, two_segments)

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

