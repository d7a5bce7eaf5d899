"""Reads of a tiered log below its local log start offset: the remote segment holding an offset
is found through the tier's metadata, its offset index (cached on disk) gives a position, and one
ranged GET of the ``.log`` object brings the batches back, CRC-checked.
"""

from __future__ import annotations

import io
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Protocol, TypeVar

from tierlog.errors import (
    CorruptRecordError,
    OffsetOutOfRangeError,
    RemoteFetchQuotaExceededError,
    TruncatedBatchError,
)
from tierlog.index import AbortedTxn
from tierlog.index.aborted_txns import AbortedTxnSource, collect_aborted_txns
from tierlog.log.fetch_info import FetchDataInfo
from tierlog.records.batch import (
    HEADER_SIZE,
    LOG_OVERHEAD,
    BatchOrigin,
    declared_size,
    iter_batches,
    walk_headers,
)
from tierlog.records.file_records import (
    MemoryRecords,
    TimestampAndOffset,
    first_record_at_or_after,
)
from tierlog.records.timestamps import format_timestamp_ms
from tierlog.remote.api import (
    RemoteLogSegmentMetadata,
    RemoteLogSegmentState,
    RemoteStorageManager,
    TopicIdPartition,
)
from tierlog.remote.log_protocol import TieredLog
from tierlog.remote.rlm.integrity import check_batch_offsets, validate_fetched_batches
from tierlog.remote.tier.layout import SEGMENT_SUFFIX, segment_object_key
from tierlog.remote.tier.object_store import cut_short_error

if TYPE_CHECKING:
    from tierlog.index.index_types import SegmentIndexType
    from tierlog.log.segment import LogSegment
    from tierlog.remote.metadata_api import RemoteLogMetadataStore
    from tierlog.remote.rlm.index_cache import RemoteIndexCache
    from tierlog.remote.rlm.quota import RateQuota

_T = TypeVar("_T")
_FINISHED = RemoteLogSegmentState.COPY_SEGMENT_FINISHED
#: Bytes read per request while scanning a remote segment for a timestamp.
_TIMESTAMP_SCAN_BYTES = 1 << 20


def topic_id_partition(log_: TieredLog) -> TopicIdPartition:
    """The remote tier's name of a log's partition."""
    return TopicIdPartition(log_.topic_id, log_.topic, log_.partition)


class _ReadLimits(Protocol):
    @property
    def list_offsets_timeout_ms(self) -> int: ...


class ReadServices(Protocol):
    """What a reader uses of the RemoteLogManager that builds it (which satisfies this
    structurally), so the reader does not import the manager: the tier, its metadata and
    index cache, the fetch quota, and the bounded reader pool."""

    @property
    def rsm(self) -> RemoteStorageManager: ...

    @property
    def rlmm(self) -> RemoteLogMetadataStore: ...

    @property
    def index_cache(self) -> RemoteIndexCache: ...

    @property
    def fetch_quota(self) -> RateQuota: ...

    @property
    def limits(self) -> _ReadLimits: ...

    def submit_read(self, fn: Callable[[], _T], what: str = ...,
                    timeout_ms: int | None = None) -> _T: ...


class RemoteLogReader:
    """What a Log calls for offsets below its local log start offset."""

    def __init__(self, rlm: ReadServices, log_: TieredLog) -> None:

        self._rlm = rlm
        self._log = log_
        self._tip = topic_id_partition(log_)

    @property
    def services(self) -> ReadServices:
        """The RemoteLogManager this reader reads through."""
        return self._rlm

    def segment_for(self, offset: int) -> RemoteLogSegmentMetadata | None:
        epoch = self._log.leader_epoch_cache.epoch_for_offset(offset)
        metadata = self._rlm.rlmm.remote_log_segment_metadata(self._tip, offset, epoch)
        if metadata is None and epoch is not None:
            metadata = self._rlm.rlmm.remote_log_segment_metadata(self._tip, offset)
        return metadata

    def read(self, offset: int, max_bytes: int, isolation: str, upper: int,
             min_one_message: bool, local_segments: Sequence[LogSegment] = ()
             ) -> FetchDataInfo:
        """Kafka's remote fetch of ``offset``: batches of the one remote segment holding it,
        capped at ``upper``; under read_committed with the aborted transactions collected
        from it, the later remote segments and ``local_segments`` (the log's segments)."""
        quota = self._rlm.fetch_quota
        throttle = quota.throttle_time_ms()
        if throttle > 0:  # Kafka: the remote fetch is skipped while over the fetch quota
            raise RemoteFetchQuotaExceededError(
                f"{self._log.directory.name}: read of offset {offset} from the remote tier "
                f"refused: over remote.log.manager.fetch.max.bytes.per.second; retry in "
                f"{throttle:.0f} ms", round(throttle))
        with self._log.stats.remote_fetch():
            info = self._rlm.submit_read(lambda: self._read(
                offset, max_bytes, isolation, upper, min_one_message, local_segments),
                f"{self._log.directory.name}: read of offset {offset} from the remote tier")
        quota.record(info.size_in_bytes)
        return info

    def _read(self, offset: int, max_bytes: int, isolation: str, upper: int,
              min_one_message: bool, local_segments: Sequence[LogSegment]) -> FetchDataInfo:
        metadata = self.segment_for(offset)
        if metadata is None:
            raise OffsetOutOfRangeError(
                f"{self._log.directory.name}: offset {offset} is below the local log start "
                f"offset {self._log.local_log_start_offset} and no remote segment holds it"
            )
        entry = self._rlm.index_cache.offset_index(metadata).lookup(offset)
        position = entry.position
        size = metadata.segment_size_in_bytes
        obj = self._origin(metadata)
        # The index is sparse: the batch holding `offset` starts up to an index interval
        # after `position`, so one read covers that gap as well as max_bytes.
        gap = self._log.config["index.interval.bytes"] + HEADER_SIZE
        data = self._fetch(metadata, obj, position, min(size, position + max_bytes + gap),
                           entry.offset if position else None)
        found, at, length = _locate(data, offset)
        if not found:
            # Rare (the index points further back than one interval): read on from the batch
            # boundary where the walk stopped to the end of the segment.
            position += at
            data = self._fetch(metadata, obj, position, size, None)
            found, at, length = _locate(data, offset)
        elif at + length > len(data) and min_one_message:
            # The first batch is larger than the read: fetch it whole (a second request).
            position += at
            data = self._fetch(metadata, obj, position,
                               min(size, position + max(length, max_bytes)), None)
            found, at, length = _locate(data, offset)
        if not found:
            raise obj.locate(CorruptRecordError(
                f"offset {offset} is not in the object, which ends at position "
                f"{position + at}, though its metadata says it holds offsets "
                f"{metadata.start_offset}..{metadata.end_offset} in {size} bytes",
                check="size"))
        if position + len(data) >= size:  # the read reached the object's end: whole batches
            cut = _cut_batch(data, at)
            if cut is not None:
                raise self._beyond_size(metadata, obj, position + cut[0], cut[1])
        view = memoryview(data)[at:_batches_end(data, at, max_bytes, upper, min_one_message)]
        origin = obj._replace(shift=position + at)
        validate_fetched_batches(view, origin)
        aborted = None
        if isolation == "read_committed":
            aborted = self._aborted(metadata, offset, upper, local_segments)
        return FetchDataInfo(offset, upper, MemoryRecords(view, origin), isolation, False,
                             aborted, from_remote=True)

    def _origin(self, metadata: RemoteLogSegmentMetadata) -> BatchOrigin:
        """What errors about the segment's ``.log`` object name: its key and partition."""
        return BatchOrigin(segment_object_key(metadata, SEGMENT_SUFFIX), 0, self._log.topic,
                           self._log.partition)

    def _beyond_size(self, metadata: RemoteLogSegmentMetadata, obj: BatchOrigin,
                     position: int, length: int) -> CorruptRecordError:
        """The error of a batch running past the object's size in its metadata (``length``:
        what its header declares, or the header's own size when the object ends inside it)."""
        size = metadata.segment_size_in_bytes
        return obj.locate(CorruptRecordError(
            f"the batch ({length} bytes by its header) runs past the object's end: expected "
            f"{size} bytes (its metadata), found a batch reaching byte {position + length}",
            position=position, check="size"))

    def _fetch(self, metadata: RemoteLogSegmentMetadata, obj: BatchOrigin, start: int,
               end: int, anchor: int | None) -> bytes:
        """Bytes ``[start, end)`` of the segment, their batch offsets checked against its
        metadata and (``anchor``) the index entry for ``start``: damage to a base offset lies
        outside the CRC and would renumber or drop records silently. Fewer bytes than asked
        for (within the size the metadata promises, a read starting past the object's real
        end included) is a cut object: CorruptRecordError naming the object, the expected
        and the found size (the tier's RSM counts it; another RSM's short answer gives the
        bytes it reached)."""
        try:
            data = _read_range(self._rlm.rsm, metadata, start, end - 1)
        except CorruptRecordError as e:
            raise obj.locate(e) from e
        self._log.stats.remote_fetched(len(data))
        if len(data) < end - start:
            raise obj.locate(cut_short_error(start, end, len(data),
                                             metadata.segment_size_in_bytes, start + len(data)))
        check_batch_offsets(data, obj, first_offset=metadata.start_offset,
                            last_offset=metadata.end_offset, anchor=anchor, position=start)
        return data

    def _aborted(self, metadata: RemoteLogSegmentMetadata, offset: int, upper: int,
                 local_segments: Sequence[LogSegment]) -> tuple[AbortedTxn, ...]:
        """As Kafka's RemoteLogManager: the transaction indexes of the fetched remote segment
        and of the following remote segments, then of the local segments after them, until
        one answers complete (the marker of a transaction may be in any of them)."""
        return tuple(collect_aborted_txns(
            self._txn_indexes_from(metadata, local_segments), offset, upper))

    def _txn_indexes_from(self, metadata: RemoteLogSegmentMetadata,
                          local_segments: Sequence[LogSegment]
                          ) -> Iterator[AbortedTxnSource | None]:
        """The transaction indexes of the segments from ``metadata`` on, in offset order,
        each fetched only when asked for."""
        cache = self._rlm.index_cache
        current: RemoteLogSegmentMetadata | None = metadata
        end = metadata.end_offset
        while current is not None:
            end = current.end_offset
            yield cache.transaction_index(current)
            current = self.segment_for(end + 1)
        for i, segment in enumerate(local_segments):
            next_base = (local_segments[i + 1].base_offset if i + 1 < len(local_segments)
                         else None)
            if next_base is None or next_base > end + 1:  # holds offsets after the remote ones
                yield segment

    def lookup_index(self, index_type: SegmentIndexType, key: object, below: int) -> object:
        """Ask the tier's copies of the plugin index ``index_type`` (one that is
        ``uploaded_to_remote``) of the segments starting below ``below`` (the local log
        start), newest first, for ``key``: the first answer that is not None, or None."""
        return self._rlm.submit_read(lambda: self._lookup_index(index_type, key, below),
                                     f"{self._log.directory.name}: remote index lookup")

    def _lookup_index(self, index_type: SegmentIndexType, key: object, below: int) -> object:
        cache, config = self._rlm.index_cache, self._log.config
        segments = [m for m in self._rlm.rlmm.list_remote_log_segments(self._tip)
                    if m.state is _FINISHED and m.start_offset < below]
        for metadata in reversed(segments):
            index = cache.extra_index(metadata, index_type, config)
            found = None if index is None else index.lookup(key)
            if found is not None:
                return found
        return None

    def fetch_offset_by_timestamp(self, timestamp: int, start_offset: int) -> TimestampAndOffset | None:
        return self._rlm.submit_read(
            lambda: self._find_timestamp(timestamp, start_offset),
            f"{self._log.directory.name}: remote lookup of timestamp "
            f"{format_timestamp_ms(timestamp)}",
            self._rlm.limits.list_offsets_timeout_ms)

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
        obj = self._origin(metadata)
        while position < size:
            data = self._fetch(metadata, obj, position,
                               min(size, position + _TIMESTAMP_SCAN_BYTES), None)
            consumed = 0
            for batch in iter_batches(data, origin=obj._replace(shift=position)):
                consumed = batch.position + batch.size_in_bytes
                if batch.max_timestamp < timestamp:
                    continue
                found = first_record_at_or_after(batch, timestamp, start_offset)
                if found is not None:
                    return found
            if consumed == 0:
                # A batch bigger than one read: read it whole.
                length = declared_size(data)
                if length is None:
                    raise obj.locate(TruncatedBatchError(
                        f"the object's size in its metadata, {size}, ends {len(data)} bytes "
                        f"after the position, inside a batch header", position=position,
                        check="size"))
                if position + length > size:
                    raise self._beyond_size(metadata, obj, position, length)
                data = self._fetch(metadata, obj, position, position + length, None)
                consumed = length
                found = first_record_at_or_after(
                    next(iter_batches(data, origin=obj._replace(shift=position))), timestamp,
                    start_offset)
                if found is not None:
                    return found
            position += consumed
        return None


def _read_range(rsm: RemoteStorageManager, metadata: RemoteLogSegmentMetadata, start: int,
                end: int | None) -> bytes:
    with rsm.fetch_log_segment(metadata, start, end) as stream:
        return stream.read() if not isinstance(stream, io.BytesIO) else stream.getvalue()


def _locate(data: bytes, offset: int) -> tuple[bool, int, int]:
    """Walk the 61-byte batch headers of ``data`` to the first batch whose last offset >=
    ``offset``: (True, its position, its size); or (False, the batch boundary where ``data``
    ran out, 0)."""
    boundary = 0
    for position, header in walk_headers(data):
        size = header[1] + LOG_OVERHEAD
        if header[0] + header[6] >= offset:
            return True, position, size
        boundary = position + size
    return False, boundary, 0


def _cut_batch(data: bytes, start: int) -> tuple[int, int] | None:
    """``(position, declared size)`` of a batch from ``start`` that ``data`` ends inside (a
    header's 61 bytes when it ends inside one), or None when the batches fill it exactly."""
    boundary = start
    for position, header in walk_headers(data, start):
        boundary = position + header[1] + LOG_OVERHEAD
        if boundary > len(data):
            return position, boundary - position
    return None if boundary == len(data) else (boundary, HEADER_SIZE)


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
