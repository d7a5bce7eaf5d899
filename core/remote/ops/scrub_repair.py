"""Rebuilding a committed segment's offset and time indexes from its ``.log`` in the tier
(``tierlog scrub --repair``, :func:`rebuilt_indexes`).

The entries are placed by the engine's own recovery scan
(:func:`tierlog.log.segment_recovery.scan_segment`, the rule Kafka's ``LogSegment.recover``
follows), over the ``.log``'s bytes: with the writer's ``index.interval.bytes`` the rebuilt
index is the one the writer uploaded. Nothing is rebuilt from a ``.log`` that is not sound:
every batch must pass its CRC and the batches must span exactly the segment's offsets.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from tierlog.errors import CorruptRecordError
from tierlog.index.entries import OFFSET_ENTRY, TIME_ENTRY
from tierlog.log.segment_recovery import scan_segment
from tierlog.records.file_records import FileRecords
from tierlog.remote.api import IndexType, RemoteLogSegmentMetadata
from tierlog.remote.tier.layout import SEGMENT_SUFFIX, segment_object_name

#: The objects :func:`rebuilt_indexes` rebuilds.
REBUILDABLE_SUFFIXES = (IndexType.OFFSET.suffix, IndexType.TIMESTAMP.suffix)


def rebuilt_indexes(md: RemoteLogSegmentMetadata, data: bytes, *, index_interval_bytes: int,
                    source: str) -> dict[str, tuple[bytes, int]]:
    """The offset and time index of the segment ``md`` whose ``.log`` (read from
    ``source``) holds ``data``: suffix -> (the index's bytes, its entry count).
    CorruptRecordError naming ``source`` when the ``.log`` is not whole valid batches
    from the segment's start offset to its end offset."""
    with tempfile.TemporaryDirectory(prefix="tierlog-scrub-") as tmp:
        path = Path(tmp) / segment_object_name(md, SEGMENT_SUFFIX)
        path.write_bytes(data)
        records = FileRecords.open(path, mutable=False)
        try:
            scan = scan_segment(records, md.start_offset, index_interval_bytes)
        finally:
            records.close()
    result = scan.result
    if result.error is not None:
        raise CorruptRecordError(f"{source}: its indexes cannot be rebuilt: {result.error}")
    if result.batches == 0 or result.next_offset != md.end_offset + 1:
        raise CorruptRecordError(
            f"{source}: its indexes cannot be rebuilt: its batches end at offset "
            f"{result.next_offset - 1}, the metadata records the segment's end offset "
            f"{md.end_offset}")
    return {IndexType.OFFSET.suffix: (OFFSET_ENTRY.pack(scan.offset_entries),
                                      len(scan.offset_entries) // 2),
            IndexType.TIMESTAMP.suffix: (TIME_ENTRY.pack(scan.time_entries),
                                         len(scan.time_entries) // 2)}
