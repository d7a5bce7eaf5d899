"""The scrub's checks of one committed segment's objects against its metadata
(``tierlog.remote.ops.scrub``): every object present with its recorded size, the ``.log``'s batches
whole and passing their CRC-32C inside the segment's offsets, the offset index's entries at
batch boundaries with matching offsets.

Without ``deep`` only the bytes that must be read are: sizes come from the partition's one
listing, then one ranged GET of the ``.log``'s head (its first batches), one of the offset
index's last entry and one of the ``.log`` from that entry to its end (the batches that end
the segment, which must end exactly at its size). With ``deep`` the whole ``.log`` and the
whole offset and time indexes are read and every batch and entry is checked, and so are the
segment's small objects, each by the engine's own parser (``tierlog.remote.ops.scrub_objects``:
producer snapshot, leader-epoch checkpoint, transaction index, ``_metadata`` object). Batches
are walked and checked by the record layer (``tierlog.records``, ``tierlog.remote.rlm.integrity``),
index entries decoded by ``tierlog.index.entries``: nothing here parses either format.

:func:`check_segment` checks one segment on its own (a restore checks what it relies on).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping

from tierlog.errors import CorruptIndexError, CorruptRecordError, RemoteResourceNotFoundError
from tierlog.index.entries import (
    OFFSET_ENTRY,
    TIME_ENTRY,
    check_offset_entries,
    check_time_entries,
)
from tierlog.records.batch import HEADER_SIZE, LOG_OVERHEAD, walk_headers
from tierlog.remote.api import IndexType, RemoteLogSegmentMetadata
from tierlog.remote.ops.scrub_objects import (
    epoch_checkpoint_problem,
    metadata_object_problem,
    snapshot_problem,
    txn_index_problem,
)
from tierlog.remote.ops.scrub_report import Finding, FindingKind
from tierlog.remote.rlm.integrity import check_batch_offsets, validate_fetched_batches
from tierlog.remote.tier.fsspec_storage import extra_index_suffixes
from tierlog.remote.tier.layout import (
    SEGMENT_OBJECT_SUFFIXES,
    SEGMENT_SUFFIX,
    metadata_object_key,
    partition_dir_name,
    segment_object_key,
    segment_object_name,
)
from tierlog.remote.tier.object_store import ObjectEntry, RemoteTier
from tierlog.remote.tier.tail_manifest import TailObject

#: Bytes of a ``.log``'s head read without ``deep``: its first batch header, and the first
#: batches whole when they are small.
HEAD_READ_BYTES = 16 << 10
#: The finding kind of a small object that fails its parser or its structure rule (the
#: leader-epoch checkpoint is the lineage's metadata, as the partition-wide check says).
_SMALL_OBJECT_KINDS = {IndexType.PRODUCER_SNAPSHOT.suffix: FindingKind.CORRUPT_INDEX,
                       IndexType.TRANSACTION.suffix: FindingKind.CORRUPT_INDEX,
                       IndexType.LEADER_EPOCH.suffix: FindingKind.CORRUPT_METADATA}


def required_suffixes(md: RemoteLogSegmentMetadata) -> tuple[str, ...]:
    """The objects a committed segment must have: the ``.log``, its indexes, producer
    snapshot and leader-epoch checkpoint, the ``.txnindex`` unless the metadata says it is
    empty, and the plugin indexes its copy recorded."""
    return tuple(s for s in (*SEGMENT_OBJECT_SUFFIXES, *extra_index_suffixes(md))
                 if s != IndexType.TRANSACTION.suffix or not md.txn_idx_empty)


def named_objects(md: RemoteLogSegmentMetadata) -> set[str]:
    """Every object name the segment's metadata accounts for (so none of them is an orphan)."""
    return {segment_object_name(md, s) for s in (*SEGMENT_OBJECT_SUFFIXES,
                                                  *extra_index_suffixes(md))}


def check_segment(tier: RemoteTier, md: RemoteLogSegmentMetadata, *, deep: bool = False
                  ) -> list[Finding]:
    """The findings of one committed segment's objects (empty when sound): one LIST of its
    partition directory, then the checks of :class:`SegmentScrubber`."""
    directory = tier.path(partition_dir_name(md.topic_id_partition))
    listing = {e.name: e for e in tier.list_entries(directory)}
    return SegmentScrubber(tier, listing, deep=deep).check(md)


class SegmentScrubber:
    """Checks the committed segments of one partition (see the module docstring), given the
    partition directory's listing (object name -> entry)."""

    def __init__(self, tier: RemoteTier, listing: Mapping[str, ObjectEntry], *,
                 deep: bool) -> None:
        self._tier = tier
        self._listing = listing
        self._deep = deep

    def check(self, md: RemoteLogSegmentMetadata) -> list[Finding]:
        """The segment's findings (empty when it is sound)."""
        return list(self._check(md))

    def _finding(self, md: RemoteLogSegmentMetadata, kind: FindingKind, suffix: str,
                 detail: str, offsets: tuple[int, int] | None = None) -> Finding:
        return Finding(kind, partition_dir_name(md.topic_id_partition), detail,
                       segment_id=md.segment_id,
                       object=self._tier.path(segment_object_key(md, suffix)),
                       offsets=offsets or (md.start_offset, md.end_offset))

    def _check(self, md: RemoteLogSegmentMetadata) -> Iterator[Finding]:
        missing = [s for s in required_suffixes(md)
                   if segment_object_name(md, s) not in self._listing]
        for suffix in missing:
            yield self._finding(md, FindingKind.MISSING_OBJECT, suffix,
                                f"the committed segment's {suffix} object is missing")
        if SEGMENT_SUFFIX in missing:
            return
        size = self._listing[segment_object_name(md, SEGMENT_SUFFIX)].size
        if size != md.segment_size_in_bytes:
            yield self._finding(md, FindingKind.SIZE_MISMATCH, SEGMENT_SUFFIX,
                                f"the .log holds {size} bytes, the metadata records "
                                f"{md.segment_size_in_bytes}")
            return
        index_ok = IndexType.OFFSET.suffix not in missing
        time_ok = IndexType.TIMESTAMP.suffix not in missing
        if self._deep:
            yield from self._check_deep(md, size, index_ok, time_ok)
        else:
            yield from self._check_bounds(md, size, index_ok, time_ok)

    # -- default: the head, the offset index's last entry and the batches after it --------

    def _check_bounds(self, md: RemoteLogSegmentMetadata, size: int, index_ok: bool,
                      time_ok: bool) -> Iterator[Finding]:
        log_path = self._tier.path(segment_object_key(md, SEGMENT_SUFFIX))
        head = self._get(log_path, 0, min(size, HEAD_READ_BYTES))
        yield from self._batches(md, head, 0, whole=size <= HEAD_READ_BYTES)
        if time_ok:
            time_size = self._listing[segment_object_name(md, IndexType.TIMESTAMP.suffix)].size
            if time_size % TIME_ENTRY.size:
                yield self._finding(md, FindingKind.CORRUPT_INDEX, IndexType.TIMESTAMP.suffix,
                                    f"the time index holds {time_size} bytes, not whole "
                                    f"{TIME_ENTRY.size}-byte entries")
        if not index_ok:
            return
        index_key = segment_object_key(md, IndexType.OFFSET.suffix)
        index_size = self._listing[segment_object_name(md, IndexType.OFFSET.suffix)].size
        entry_size = OFFSET_ENTRY.size
        if index_size % entry_size:
            yield self._finding(md, FindingKind.CORRUPT_INDEX, IndexType.OFFSET.suffix,
                                f"the offset index holds {index_size} bytes, not whole "
                                f"{entry_size}-byte entries")
            return
        if size <= HEAD_READ_BYTES:  # the head read the whole .log
            return
        position, anchor = 0, None
        if index_size:
            last = self._get(self._tier.path(index_key), index_size - entry_size, index_size)
            relative, position = OFFSET_ENTRY.entry.unpack(last)
            anchor = md.start_offset + relative
            if not 0 <= position < size or not md.start_offset <= anchor <= md.end_offset:
                yield self._finding(md, FindingKind.CORRUPT_INDEX, IndexType.OFFSET.suffix,
                                    f"the offset index's last entry (offset {anchor}, position "
                                    f"{position}) lies outside the segment")
                return
        tail = self._get(log_path, position, size)
        problem = _entry_problem(tail, anchor)
        if problem is not None:
            yield self._finding(md, FindingKind.CORRUPT_INDEX, IndexType.OFFSET.suffix,
                                f"the offset index's last entry (offset {anchor}, position "
                                f"{position}) does not name a batch of the .log: {problem}")
            return
        yield from self._batches(md, tail, position, whole=True, anchor=anchor)

    # -- deep: everything ------------------------------------------------------------------

    def _check_deep(self, md: RemoteLogSegmentMetadata, size: int, index_ok: bool,
                    time_ok: bool) -> Iterator[Finding]:
        data = self._get(self._tier.path(segment_object_key(md, SEGMENT_SUFFIX)))
        found = list(self._batches(md, data, 0, whole=True))
        yield from found
        yield from self._check_small_objects(md, data)
        if index_ok and not found:
            yield from self._check_offset_index(md, data)
        if time_ok:
            suffix = IndexType.TIMESTAMP.suffix
            path = self._tier.path(segment_object_key(md, suffix))
            index = self._get(path)
            try:
                TIME_ENTRY.check_length(len(index), path)
                count = len(index) // TIME_ENTRY.size
                check_time_entries(index, count, md.start_offset, path)
                for i in range(count):
                    relative = TIME_ENTRY.value(index, i * TIME_ENTRY.size + TIME_ENTRY.value_at)[0]
                    if md.start_offset + relative > md.end_offset:
                        raise CorruptIndexError(f"time index {path}: entry {i} names offset "
                                                f"{md.start_offset + relative}, past the "
                                                f"segment's end {md.end_offset}")
            except CorruptIndexError as exc:
                yield self._finding(md, FindingKind.CORRUPT_INDEX, suffix, str(exc))

    def _check_small_objects(self, md: RemoteLogSegmentMetadata, data: bytes
                             ) -> Iterator[Finding]:
        """The producer snapshot, leader-epoch checkpoint and transaction index present in
        the listing, and the ``_metadata`` object (see ``tierlog.remote.ops.scrub_objects``)."""
        for suffix, kind in _SMALL_OBJECT_KINDS.items():
            if segment_object_name(md, suffix) not in self._listing:
                continue  # reported missing already, or an empty .txnindex not copied
            path = self._tier.path(segment_object_key(md, suffix))
            content = self._get(path)
            if suffix == IndexType.PRODUCER_SNAPSHOT.suffix:
                problem = snapshot_problem(content, path)
            elif suffix == IndexType.LEADER_EPOCH.suffix:
                problem = epoch_checkpoint_problem(md, content, path)
            else:
                problem = txn_index_problem(md, content, path)
            if problem is not None:
                yield self._finding(md, kind, suffix, problem)
        path = self._tier.path(metadata_object_key(md))
        try:
            stored = self._tier.get_bytes(path)
        except RemoteResourceNotFoundError:
            return  # deleted since the listing: the next scrub no longer sees the segment
        first = next((header[0] for _, header in walk_headers(data)), None)
        problem = metadata_object_problem(md, stored, path, first)
        if problem is not None:
            yield Finding(FindingKind.CORRUPT_METADATA,
                          partition_dir_name(md.topic_id_partition), problem,
                          segment_id=md.segment_id, object=path,
                          offsets=(md.start_offset, md.end_offset))

    def _check_offset_index(self, md: RemoteLogSegmentMetadata, data: bytes
                            ) -> Iterator[Finding]:
        """Every entry names a batch boundary whose batch ends at the entry's offset."""
        suffix = IndexType.OFFSET.suffix
        path = self._tier.path(segment_object_key(md, suffix))
        index = self._get(path)
        last_offsets = {at: header[0] + header[6] for at, header in walk_headers(data)}
        try:
            OFFSET_ENTRY.check_length(len(index), path)
            count = len(index) // OFFSET_ENTRY.size
            check_offset_entries(index, count, md.start_offset, path)
            for i in range(count):
                relative, position = OFFSET_ENTRY.entry.unpack_from(index, i * OFFSET_ENTRY.size)
                offset = md.start_offset + relative
                if last_offsets.get(position) != offset:
                    raise CorruptIndexError(
                        f"offset index {path}: entry {i} (offset {offset}, position "
                        f"{position}) does not name the batch at that position "
                        f"(ending at offset {last_offsets.get(position)})")
        except CorruptIndexError as exc:
            yield self._finding(md, FindingKind.CORRUPT_INDEX, suffix, str(exc))

    # -- shared ----------------------------------------------------------------------------

    def _batches(self, md: RemoteLogSegmentMetadata, data: bytes, position: int, *,
                 whole: bool, anchor: int | None = None) -> Iterator[Finding]:
        """Findings of the batches in ``data`` (read from ``position``): offsets inside the
        segment's (the first ending at ``anchor``), and when ``whole`` (``data`` runs to the
        object's end) every batch passing its CRC and the last one ending the object and the
        segment's offsets. Without ``whole`` the whole batches in it are CRC-checked."""
        source = self._tier.path(segment_object_key(md, SEGMENT_SUFFIX))
        try:
            check_batch_offsets(data, source, first_offset=md.start_offset,
                                last_offset=md.end_offset, anchor=anchor, position=position)
        except CorruptRecordError as exc:
            yield self._finding(md, FindingKind.OFFSET_MISMATCH, SEGMENT_SUFFIX, str(exc))
            return
        end, last = 0, None
        for at, header in walk_headers(data):
            if at + header[1] + LOG_OVERHEAD > len(data):
                break
            end, last = at + header[1] + LOG_OVERHEAD, header[0] + header[6]
        try:
            validate_fetched_batches(memoryview(data)[:end])
        except CorruptRecordError as exc:
            yield self._finding(md, FindingKind.CORRUPT_DATA, SEGMENT_SUFFIX,
                                f"{source} (read from position {position}): {exc}")
            return
        if not whole:
            return
        if end != len(data):
            yield self._finding(md, FindingKind.CORRUPT_DATA, SEGMENT_SUFFIX,
                                f"{source}: the batches end at position {position + end}, not "
                                f"at the object's end {position + len(data)}")
        elif last is not None and last != md.end_offset:
            yield self._finding(md, FindingKind.OFFSET_MISMATCH, SEGMENT_SUFFIX,
                                f"{source}: the last batch ends at offset {last}, the metadata "
                                f"records the segment's end offset {md.end_offset}",
                                (min(last, md.end_offset), max(last, md.end_offset)))

    def _get(self, path: str, start: int | None = None, end: int | None = None) -> bytes:
        try:
            return self._tier.get_bytes(path, start, end)
        except RemoteResourceNotFoundError:
            return b""  # deleted since the listing: the next scrub reports it missing


def _entry_problem(data: bytes, anchor: int | None) -> str | None:
    """Why ``data`` (read from an offset index entry's position) does not start with the
    batch the entry names (ending at ``anchor``), or None when it does."""
    if anchor is None:
        return None
    try:
        for _, header in walk_headers(data):
            last = header[0] + header[6]
            return None if last == anchor else f"the batch there ends at offset {last}"
    except CorruptRecordError as exc:
        return str(exc)
    return "no batch header there"


def tail_object_problems(tier: RemoteTier, obj: TailObject, path: str, *, deep: bool
                         ) -> list[tuple[FindingKind, str]]:
    """What is wrong with a tail object whose size is right: its batches must start at its
    first offset and end, at its end, with the last batch the tail manifest recorded
    (leader epoch and CRC). Without ``deep`` its first batch header and its last batch are
    read (two ranged GETs); with ``deep`` all of it, every batch CRC-checked."""
    last_at = obj.last_batch[0] - obj.position
    if deep:
        data, start = tier.get_bytes(path), 0
    else:
        head = tier.get_bytes(path, 0, min(obj.size, HEADER_SIZE))
        first = next((h for _, h in walk_headers(head)), None)
        if first is None or first[0] != obj.first_offset:
            return [(FindingKind.OFFSET_MISMATCH, (f"{path}: its first batch does not start "
                                                  f"at offset {obj.first_offset}"))]
        if not 0 <= last_at < obj.size:
            return [(FindingKind.INCONSISTENT_TAIL, (f"{path}: the recorded last batch lies "
                                                    f"outside the object"))]
        data, start = tier.get_bytes(path, last_at, obj.size), last_at
    try:
        validate_fetched_batches(data)
        check_batch_offsets(data, path, first_offset=obj.first_offset,
                            last_offset=obj.end_offset - 1, position=start)
    except CorruptRecordError as exc:
        return [(FindingKind.CORRUPT_DATA, str(exc))]
    headers = list(walk_headers(data))
    if not headers or (deep and headers[0][1][0] != obj.first_offset):
        return [(FindingKind.OFFSET_MISMATCH, (f"{path}: its first batch does not start at "
                                              f"offset {obj.first_offset}"))]
    at, last = headers[-1]
    if (last[0] + last[6] != obj.end_offset - 1 or start + at != last_at
            or (last[2], last[4]) != (obj.last_batch[1], obj.last_batch[2])):
        return [(FindingKind.INCONSISTENT_TAIL,
                 (f"{path}: its last batch (offsets {last[0]}..{last[0] + last[6]}, epoch "
                 f"{last[2]}, crc {last[4]}) is not the one the tail manifest records "
                 f"(ending at {obj.end_offset - 1}, epoch {obj.last_batch[1]}, crc "
                 f"{obj.last_batch[2]})"))]
    return []
