"""RemoteLogManager: copies closed segments to the remote tier, serves old offsets back from it,
and enforces retention over the whole (local + remote) log, with Kafka's KIP-405 semantics.

A Log with tiered storage gets a ``remote`` reader attached; ``Log.read`` below the local log
start offset and ``offset_for_timestamp`` go through it transparently.
"""

from __future__ import annotations

import io
import logging
import struct
import tempfile
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tierlog.errors import CorruptRecordError, OffsetOutOfRangeError, RemoteStorageError
from tierlog.fetch import FetchDataInfo
from tierlog.index import AbortedTxn
from tierlog.producer_snapshot import write_snapshot
from tierlog.records.batch import HEADER_SIZE, LOG_OVERHEAD, iter_batches
from tierlog.records.file_records import MemoryRecords, TimestampAndOffset
from tierlog.remote.index_cache import RemoteIndexCache
from tierlog.remote.integrity import validate_fetched_batches
from tierlog.remote.metadata import RemoteLogMetadataManager
from tierlog.remote.storage import (
    LogSegmentData,
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemoteLogSegmentState,
    RemoteStorageManager,
    TopicIdPartition,
)

log = logging.getLogger(__name__)

_STARTED = RemoteLogSegmentState.COPY_SEGMENT_STARTED
_FINISHED = RemoteLogSegmentState.COPY_SEGMENT_FINISHED
_DELETE_STARTED = RemoteLogSegmentState.DELETE_SEGMENT_STARTED
_DELETE_FINISHED = RemoteLogSegmentState.DELETE_SEGMENT_FINISHED
#: progress(event, detail): called by a tiering run, e.g. ("copied", metadata).
Progress = Callable[[str, Any], None]
_OFFSET_AND_LENGTH = struct.Struct(">qi")
_LAST_OFFSET_DELTA = struct.Struct(">i")
#: Bytes read per request while scanning a remote segment for a timestamp.
_TIMESTAMP_SCAN_BYTES = 1 << 20


@dataclass(slots=True)
class TierResult:
    """What one tiering run did for one log."""

    copied: list[RemoteLogSegmentMetadata] = field(default_factory=list)
    deleted_remote: list[RemoteLogSegmentMetadata] = field(default_factory=list)
    orphans_removed: int = 0
    errors: list[str] = field(default_factory=list)


def topic_id_partition(log_: Any) -> TopicIdPartition:
    return TopicIdPartition(log_.topic_id, log_.topic, log_.partition)


class RemoteLogManager:
    """Tiering for every log with ``remote.storage.enable``. Thread-safe.

    Copies run per partition in order (a partition is copied by one thread at a time) on a
    pool of ``copy_threads``; remote reads run on a pool of ``reader_threads`` so their number
    is bounded. ``hook`` is the plugin hook relay for lifecycle events (or None).
    """

    def __init__(
        self,
        rsm: RemoteStorageManager,
        rlmm: RemoteLogMetadataManager,
        index_cache: RemoteIndexCache,
        *,
        time_ms: Callable[[], int],
        copy_threads: int = 2,
        reader_threads: int = 2,
        hook: Any = None,
    ) -> None:
        self.rsm = rsm
        self.rlmm = rlmm
        self.index_cache = index_cache
        self._time_ms = time_ms
        self._hook = hook
        self._copy_pool = ThreadPoolExecutor(copy_threads, thread_name_prefix="tierlog-copy")
        self._reader_pool = ThreadPoolExecutor(reader_threads, thread_name_prefix="tierlog-fetch")
        self._partition_locks: dict[TopicIdPartition, threading.Lock] = {}
        self._locks_lock = threading.Lock()

    # -- attaching logs ------------------------------------------------------------------

    def attach(self, log_: Any) -> None:
        """Give a tiered log its remote reader and what the tier already holds of it."""
        tip = topic_id_partition(log_)
        copied = [m for m in self.rlmm.list_remote_log_segments(tip) if m.state is _FINISHED]
        highest = max((m.end_offset for m in copied), default=-1)
        log_.attach_remote(_RemoteReader(self, log_), highest)
        log.info("%s: tiered storage attached (remote holds offsets up to %d)",
                 log_.directory.name, highest)

    def _lock_for(self, tip: TopicIdPartition) -> threading.Lock:
        with self._locks_lock:
            return self._partition_locks.setdefault(tip, threading.Lock())

    # -- tiering -------------------------------------------------------------------------

    def tier(self, logs: Sequence[Any], progress: Progress | None = None) -> dict[str, TierResult]:
        """Copy eligible segments of every log (in parallel across partitions) and enforce
        remote retention. Returns each log's result by directory name."""
        futures = {lg.directory.name: self._copy_pool.submit(self.tier_log, lg, progress)
                   for lg in logs}
        return {name: f.result() for name, f in futures.items()}

    def tier_log(self, log_: Any, progress: Progress | None = None) -> TierResult:
        """One tiering run for one log: clean up failed copies, copy, remote retention."""
        result = TierResult()
        tip = topic_id_partition(log_)
        with self._lock_for(tip):
            try:
                result.orphans_removed = self._remove_unfinished(log_, tip)
                self._copy_segments(log_, tip, result, progress)
                self._remote_retention(log_, tip, result)
            except (RemoteStorageError, OSError) as exc:
                result.errors.append(str(exc))
                log.warning("%s: tiering stopped: %s", log_.directory.name, exc)
        return result

    def copy_candidates(self, log_: Any) -> list[tuple[Any, int]]:
        """(segment, next segment's base offset) for every closed segment not yet copied whose
        data is all below the last stable offset (Kafka: next base offset <= LSO)."""
        segments = log_.segments.values()
        lso = log_.last_stable_offset
        highest = log_.highest_offset_in_remote
        out = []
        for segment, nxt in zip(segments, segments[1:]):
            if nxt.base_offset > lso:
                break
            if nxt.base_offset - 1 > highest and segment.size > 0:
                out.append((segment, nxt.base_offset))
        return out

    def _copy_segments(self, log_: Any, tip: TopicIdPartition, result: TierResult,
                       progress: Progress | None) -> None:
        for segment, next_base in self.copy_candidates(log_):
            metadata = self._copy_segment(log_, tip, segment, next_base)
            result.copied.append(metadata)
            if progress is not None:
                progress("copied", metadata)

    def _copy_segment(self, log_: Any, tip: TopicIdPartition, segment: Any,
                      next_base: int) -> RemoteLogSegmentMetadata:
        epochs = _segment_epochs(log_, segment.base_offset, next_base)
        metadata = RemoteLogSegmentMetadata(
            remote_log_segment_id=RemoteLogSegmentId.generate(tip),
            start_offset=segment.base_offset,
            end_offset=next_base - 1,
            max_timestamp_ms=segment.max_timestamp_so_far,
            event_timestamp_ms=self._time_ms(),
            segment_size_in_bytes=segment.size,
            segment_leader_epochs=epochs,
            txn_idx_empty=segment.txn_index.is_empty(),
            state=_STARTED,
        )
        self.rlmm.add_remote_log_segment_metadata(metadata)
        with tempfile.TemporaryDirectory(prefix="tierlog-copy-") as scratch:
            snapshot = log_.producer_state.fetch_snapshot(next_base)
            if snapshot is None:
                snapshot = Path(scratch) / f"{next_base:020d}.snapshot"
                write_snapshot(snapshot, ())
            data = LogSegmentData(
                log_segment=segment.log.path,
                offset_index=segment.offset_index.path,
                time_index=segment.time_index.path,
                transaction_index=None if segment.txn_index.is_empty() else segment.txn_index.path,
                producer_snapshot_index=snapshot,
                leader_epoch_index=_epoch_checkpoint_bytes(log_, next_base),
            )
            custom = self.rsm.copy_log_segment_data(metadata, data)
        self.rlmm.update_remote_log_segment_metadata(RemoteLogSegmentMetadataUpdate(
            remote_log_segment_id=metadata.remote_log_segment_id,
            event_timestamp_ms=self._time_ms(), state=_FINISHED, custom_metadata=custom,
        ))
        log_.update_highest_offset_in_remote(metadata.end_offset)
        log.info("%s: copied segment %d-%d (%d bytes) to the remote tier",
                 log_.directory.name, metadata.start_offset, metadata.end_offset,
                 metadata.segment_size_in_bytes)
        if self._hook is not None:
            self._hook.tierlog_segment_copied_to_remote(log=log_, metadata=metadata)
        return metadata

    def _remove_unfinished(self, log_: Any, tip: TopicIdPartition) -> int:
        """Delete what failed or crashed copies (COPY_STARTED) and deletes (DELETE_STARTED)
        left in the tier; their metadata was never committed for readers."""
        removed = 0
        for metadata in self.rlmm.list_remote_log_segments(tip):
            if metadata.state is _STARTED:
                self._update(metadata, _DELETE_STARTED)
            if metadata.state in (_STARTED, _DELETE_STARTED):
                self._delete_data(log_, metadata)
                removed += 1
        return removed

    # -- remote retention ----------------------------------------------------------------

    def _remote_retention(self, log_: Any, tip: TopicIdPartition, result: TierResult) -> None:
        """Kafka's remote retention: segments below the log start offset, then retention.bytes
        over local-only + remote size, then retention.ms by each segment's max timestamp;
        oldest first, stopping at the first segment that stays."""
        config = log_.config
        now = self._time_ms()
        segments = [m for m in self.rlmm.list_remote_log_segments(tip) if m.state is _FINISHED]
        lineage = _epoch_lineage(log_)
        retention_ms, retention_bytes = config["retention.ms"], config["retention.bytes"]
        local_only = sum(s.size for s in log_.segments.values()
                         if s.base_offset > log_.highest_offset_in_remote)
        excess = local_only + sum(m.segment_size_in_bytes for m in segments) - retention_bytes
        doomed: list[RemoteLogSegmentMetadata] = []
        for metadata in segments:
            if metadata.end_offset < log_.log_start_offset:
                doomed.append(metadata)
            elif lineage is not None and not set(metadata.segment_leader_epochs) & lineage:
                doomed.append(metadata)
            elif retention_bytes >= 0 and excess - metadata.segment_size_in_bytes >= 0:
                doomed.append(metadata)
                excess -= metadata.segment_size_in_bytes
            elif retention_ms >= 0 and now - metadata.max_timestamp_ms > retention_ms:
                doomed.append(metadata)
            else:
                break
        for metadata in doomed:
            self._update(metadata, _DELETE_STARTED)
            self._delete_data(log_, metadata)
            result.deleted_remote.append(metadata)
        if doomed:
            new_start = max(m.end_offset for m in doomed) + 1
            log_.maybe_increment_log_start_offset(min(new_start, log_.log_end_offset))
            log.info("%s: deleted %d remote segments; log start offset is now %d",
                     log_.directory.name, len(doomed), log_.log_start_offset)

    def _update(self, metadata: RemoteLogSegmentMetadata, state: RemoteLogSegmentState) -> None:
        self.rlmm.update_remote_log_segment_metadata(RemoteLogSegmentMetadataUpdate(
            remote_log_segment_id=metadata.remote_log_segment_id,
            event_timestamp_ms=self._time_ms(), state=state,
        ))

    def _delete_data(self, log_: Any, metadata: RemoteLogSegmentMetadata) -> None:
        self.rsm.delete_log_segment_data(metadata)
        self.index_cache.remove(metadata)
        self._update(metadata, _DELETE_FINISHED)
        if self._hook is not None:
            self._hook.tierlog_remote_segment_deleted(log=log_, metadata=metadata)

    def delete_partition(self, log_: Any) -> int:
        """Delete every remote segment of a log (its topic is being deleted)."""
        tip = topic_id_partition(log_)
        count = 0
        with self._lock_for(tip):
            for metadata in self.rlmm.list_remote_log_segments(tip):
                if metadata.state in (_STARTED, _FINISHED):
                    self._update(metadata, _DELETE_STARTED)
                self._delete_data(log_, metadata)
                count += 1
        return count

    # -- reads ---------------------------------------------------------------------------

    def submit_read(self, fn: Callable[[], Any]) -> Any:
        """Run a remote read on the bounded reader pool and wait for it."""
        return self._reader_pool.submit(fn).result()

    def close(self) -> None:
        self._copy_pool.shutdown(wait=True)
        self._reader_pool.shutdown(wait=True)
        self.index_cache.close()
        self.rsm.close()
        self.rlmm.close()


class _RemoteReader:
    """What a Log calls for offsets below its local log start offset."""

    def __init__(self, rlm: RemoteLogManager, log_: Any) -> None:
        self._rlm = rlm
        self._log = log_
        self._tip = topic_id_partition(log_)

    def segment_for(self, offset: int) -> RemoteLogSegmentMetadata | None:
        epoch = self._log.leader_epoch_cache.epoch_for_offset(offset)
        metadata = self._rlm.rlmm.remote_log_segment_metadata(self._tip, offset, epoch)
        if metadata is None and epoch is not None:
            metadata = self._rlm.rlmm.remote_log_segment_metadata(self._tip, offset)
        return metadata

    def read(self, offset: int, max_bytes: int, isolation: str, upper: int,
             min_one_message: bool) -> FetchDataInfo:
        return self._rlm.submit_read(
            lambda: self._read(offset, max_bytes, isolation, upper, min_one_message))

    def _read(self, offset: int, max_bytes: int, isolation: str, upper: int,
              min_one_message: bool) -> FetchDataInfo:
        metadata = self.segment_for(offset)
        if metadata is None:
            raise OffsetOutOfRangeError(
                f"{self._log.directory.name}: offset {offset} is below the local log start "
                f"offset {self._log.local_log_start_offset} and no remote segment holds it"
            )
        rsm, cache = self._rlm.rsm, self._rlm.index_cache
        position = cache.offset_index(metadata).lookup(offset).position
        size = metadata.segment_size_in_bytes
        # The index is sparse: the batch holding `offset` starts up to an index interval
        # after `position`, so one read covers that gap as well as max_bytes.
        gap = self._log.config["index.interval.bytes"] + HEADER_SIZE
        data = _read_range(rsm, metadata, position, min(size, position + max_bytes + gap) - 1)
        found, at, length = _locate(data, offset)
        if not found:
            # Rare (the index points further back than one interval): read on from the batch
            # boundary where the walk stopped to the end of the segment.
            position += at
            data = _read_range(rsm, metadata, position, size - 1)
            found, at, length = _locate(data, offset)
        elif at + length > len(data) and min_one_message:
            # The first batch is larger than the read: fetch it whole (a second request).
            position += at
            data = _read_range(rsm, metadata, position,
                               min(size, position + max(length, max_bytes)) - 1)
            found, at, length = _locate(data, offset)
        view = memoryview(data)[:0]
        if found:
            view = memoryview(data)[at:_batches_end(data, at, max_bytes, upper, min_one_message)]
        try:
            validate_fetched_batches(view)
        except CorruptRecordError as exc:
            raise CorruptRecordError(
                f"{self._log.directory.name}: remote segment {metadata.remote_log_segment_id} "
                f"returned corrupt data near position {position}: {exc}"
            ) from exc
        aborted = None
        if isolation == "read_committed":
            aborted = self._aborted(metadata, offset, upper)
        return FetchDataInfo(offset, upper, MemoryRecords(view), isolation, False, aborted,
                             from_remote=True)

    def _aborted(self, metadata: RemoteLogSegmentMetadata, offset: int,
                 upper: int) -> tuple[AbortedTxn, ...]:
        index = self._rlm.index_cache.transaction_index(metadata)
        if index is None:
            return ()
        return tuple(index.collect_aborted_txns(offset, upper).aborted)

    def fetch_offset_by_timestamp(self, timestamp: int, start_offset: int) -> TimestampAndOffset | None:
        return self._rlm.submit_read(lambda: self._find_timestamp(timestamp, start_offset))

    def _find_timestamp(self, timestamp: int, start_offset: int) -> TimestampAndOffset | None:
        rlmm, cache = self._rlm.rlmm, self._rlm.index_cache
        for metadata in rlmm.list_remote_log_segments(self._tip):
            if metadata.state is not _FINISHED or metadata.max_timestamp_ms < timestamp:
                continue
            if metadata.end_offset < start_offset:
                continue
            hint = cache.time_index(metadata).lookup(timestamp)
            position = cache.offset_index(metadata).lookup(max(hint.offset, start_offset)).position
            found = self._scan_for_timestamp(metadata, position, timestamp, start_offset)
            if found is not None:
                return found
        return None

    def _scan_for_timestamp(self, metadata: RemoteLogSegmentMetadata, position: int,
                            timestamp: int, start_offset: int) -> TimestampAndOffset | None:
        size = metadata.segment_size_in_bytes
        while position < size:
            data = _read_range(self._rlm.rsm, metadata, position,
                               min(size, position + _TIMESTAMP_SCAN_BYTES) - 1)
            consumed = 0
            for batch in iter_batches(data):
                consumed = batch.position + batch.size_in_bytes
                if batch.max_timestamp < timestamp:
                    continue
                for record in batch.records():
                    if record.timestamp >= timestamp and record.offset >= start_offset:
                        return TimestampAndOffset(record.timestamp, record.offset)
            if consumed == 0:
                length = int.from_bytes(data[8:12], "big", signed=True) + LOG_OVERHEAD
                data = _read_range(self._rlm.rsm, metadata, position, position + length - 1)
                consumed = length
                for record in next(iter_batches(data)).records():
                    if record.timestamp >= timestamp and record.offset >= start_offset:
                        return TimestampAndOffset(record.timestamp, record.offset)
            position += consumed
        return None


def _read_range(rsm: RemoteStorageManager, metadata: RemoteLogSegmentMetadata, start: int,
                end: int) -> bytes:
    with rsm.fetch_log_segment(metadata, start, end) as stream:
        return stream.read() if not isinstance(stream, io.BytesIO) else stream.getvalue()


def _locate(data: bytes, offset: int) -> tuple[bool, int, int]:
    """Walk the 61-byte batch headers of ``data`` to the first batch whose last offset >=
    ``offset``: (True, its position, its size); or (False, the batch boundary where ``data``
    ran out, 0)."""
    position = 0
    while position + HEADER_SIZE <= len(data):
        base, length = _OFFSET_AND_LENGTH.unpack_from(data, position)
        (delta,) = _LAST_OFFSET_DELTA.unpack_from(data, position + 23)
        size = length + LOG_OVERHEAD
        if size < HEADER_SIZE:
            raise CorruptRecordError(f"batch at position {position} declares {size} bytes")
        if base + delta >= offset:
            return True, position, size
        position += size
    return False, position, 0


def _batches_end(data: bytes, start: int, max_bytes: int, upper: int,
                 min_one_message: bool) -> int:
    """End of the whole batches from ``start`` within ``max_bytes`` (at least one when
    ``min_one_message``) that start below ``upper``."""
    stop = start
    for batch in iter_batches(data, start):
        if batch.base_offset >= upper:
            break
        end = batch.position + batch.size_in_bytes
        if end - start > max_bytes and not (min_one_message and stop == start):
            break
        stop = end
    return stop


def _segment_epochs(log_: Any, start: int, next_base: int) -> dict[int, int]:
    """Leader epoch -> first offset of that epoch within [start, next_base) (Kafka)."""
    entries = log_.leader_epoch_cache.entries()
    epochs: dict[int, int] = {}
    for i, entry in enumerate(entries):
        entry_end = entries[i + 1].start_offset if i + 1 < len(entries) else None
        if entry.start_offset >= next_base or (entry_end is not None and entry_end <= start):
            continue
        epochs[entry.epoch] = max(entry.start_offset, start)
    if not epochs:
        raise RemoteStorageError(
            f"{log_.directory.name}: segment {start}-{next_base - 1} has no leader epoch; "
            f"tiered storage needs batches written with a leader epoch"
        )
    return epochs


def _epoch_checkpoint_bytes(log_: Any, end: int) -> bytes:
    """The leader-epoch checkpoint as it stood at ``end`` (Kafka's text format)."""
    entries = [e for e in log_.leader_epoch_cache.entries() if e.start_offset < end]
    return ("0\n" + f"{len(entries)}\n" + "".join(
        f"{e.epoch} {e.start_offset}\n" for e in entries)).encode()


def _epoch_lineage(log_: Any) -> set[int] | None:
    """The epochs of the log's current lineage (None when the log has no epochs yet)."""
    entries = log_.leader_epoch_cache.entries()
    return {e.epoch for e in entries} if entries else None

