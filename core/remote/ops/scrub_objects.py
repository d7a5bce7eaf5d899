"""The deep scrub's checks of a committed segment's small objects (``tierlog.remote.ops.scrub``):
its producer snapshot, leader-epoch checkpoint, transaction index and ``_metadata`` object,
each parsed by the engine's own reader and checked against the segment's metadata.

- ``.snapshot``: :func:`tierlog.producer.snapshot.decode_snapshot` (version, CRC-32C, length);
- ``.leader_epoch_checkpoint``:
:func:`tierlog.checkpoint.checkpoint_file.decode_leader_epoch_checkpoint`,
  then epochs and start offsets strictly increasing, none past the segment's end, and every
  epoch of the segment in it (:func:`within_lineage`);
- ``.txnindex``: :func:`tierlog.index.transaction_index.decode_aborted_txns`, then every
  aborted transaction's marker inside the segment, after its first offset;
- ``_metadata/<segment>.json``: :meth:`RemoteLogSegmentMetadata.from_json` (JSON, typed
  fields), the same segment as the manifest says, starting at the ``.log``'s first batch.

Each check returns its findings' ``(suffix, detail)``; nothing here writes.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from itertools import pairwise

from tierlog.checkpoint.checkpoint_file import EpochEntry, decode_leader_epoch_checkpoint
from tierlog.errors import (
    CorruptCheckpointError,
    CorruptIndexError,
    CorruptRemoteMetadataError,
    CorruptSnapshotError,
)
from tierlog.index.transaction_index import decode_aborted_txns
from tierlog.producer.snapshot import decode_snapshot
from tierlog.remote.api import RemoteLogSegmentMetadata

#: Epoch -> [its start offset, the next epoch's start offset or None).
Lineage = Mapping[int, tuple[int, int | None]]


def lineage_of(entries: Sequence[EpochEntry]) -> dict[int, tuple[int, int | None]]:
    """The epochs of a leader-epoch checkpoint's entries with the offsets each spans."""
    return {e.epoch: (e.start_offset, entries[i + 1].start_offset
                      if i + 1 < len(entries) else None)
            for i, e in enumerate(entries)}


def within_lineage(md: RemoteLogSegmentMetadata, lineage: Lineage) -> bool:
    """Whether every epoch of the segment is in the lineage and starts inside that epoch's
    offsets there (Kafka's ``isRemoteSegmentWithinLeaderEpochs``, less its log-end part)."""
    for epoch, start in md.segment_leader_epochs.items():
        span = lineage.get(epoch)
        if span is None:
            return False
        first, end = span
        if start < first or (end is not None and start >= end):
            return False
    return True


def snapshot_problem(data: bytes, path: str) -> str | None:
    """Why the producer snapshot bytes do not parse (None when they do)."""
    try:
        decode_snapshot(data, path)
    except CorruptSnapshotError as exc:
        return str(exc)
    return None


def epoch_checkpoint_problem(md: RemoteLogSegmentMetadata, data: bytes, path: str
                             ) -> str | None:
    """Why the leader-epoch checkpoint copied with ``md`` is not its epoch history up to
    its end (None when it is)."""
    try:
        entries = decode_leader_epoch_checkpoint(data, path)
    except CorruptCheckpointError as exc:
        return str(exc)
    for prev, nxt in pairwise(entries):
        if nxt.epoch <= prev.epoch or nxt.start_offset <= prev.start_offset:
            return (f"leader-epoch checkpoint {path}: entry (epoch {nxt.epoch}, offset "
                    f"{nxt.start_offset}) does not follow (epoch {prev.epoch}, offset "
                    f"{prev.start_offset}): epochs and offsets must increase")
    for e in entries:
        if not 0 <= e.start_offset <= md.end_offset:
            return (f"leader-epoch checkpoint {path}: epoch {e.epoch} starts at offset "
                    f"{e.start_offset}, outside 0..{md.end_offset} (the segment's end)")
    if not within_lineage(md, lineage_of(entries)):
        return (f"leader-epoch checkpoint {path}: the segment's leader epochs "
                f"{dict(md.segment_leader_epochs)} are not in it "
                f"({[(e.epoch, e.start_offset) for e in entries]})")
    return None


def txn_index_problem(md: RemoteLogSegmentMetadata, data: bytes, path: str) -> str | None:
    """Why the transaction index bytes are not whole entries of aborted transactions whose
    markers lie in the segment (None when they are)."""
    try:
        aborted = decode_aborted_txns(data, path)
    except CorruptIndexError as exc:
        return str(exc)
    for i, txn in enumerate(aborted):
        if not (txn.first_offset <= txn.last_offset
                and md.start_offset <= txn.last_offset <= md.end_offset):
            return (f"transaction index {path}: entry {i} (producer {txn.producer_id}, "
                    f"offsets {txn.first_offset}..{txn.last_offset}) does not end inside "
                    f"the segment's offsets {md.start_offset}..{md.end_offset}")
    return None


def metadata_object_problem(md: RemoteLogSegmentMetadata, data: bytes, path: str,
                            first_batch_offset: int | None) -> str | None:
    """Why the segment's ``_metadata`` object does not describe the segment the manifest
    names, starting at ``first_batch_offset`` (the ``.log``'s first batch's base offset,
    None when unknown: then the manifest's start offset), or None when it does."""
    try:
        stored = RemoteLogSegmentMetadata.from_json(data, path)
    except CorruptRemoteMetadataError as exc:
        return str(exc)
    start = md.start_offset if first_batch_offset is None else first_batch_offset
    where = "the .log's first batch" if first_batch_offset is not None else "the manifest"
    if stored.remote_log_segment_id != md.remote_log_segment_id:
        return (f"{path} describes segment {stored.remote_log_segment_id}, not "
                f"{md.remote_log_segment_id}")
    if stored.start_offset != start:
        return (f"{path}: its start offset {stored.start_offset} is not {start}, where "
                f"{where} starts")
    if (stored.end_offset, stored.segment_size_in_bytes) != (md.end_offset,
                                                              md.segment_size_in_bytes):
        return (f"{path}: its end offset {stored.end_offset} and size "
                f"{stored.segment_size_in_bytes} are not the manifest's {md.end_offset} and "
                f"{md.segment_size_in_bytes}")
    return None
