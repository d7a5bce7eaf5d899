"""The producer-state snapshot file ``<offset, 20 digits>.snapshot``: encode, decode, write, read.

Pure format code; the ProducerStateManager decides when snapshots are taken and loaded.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable
from pathlib import Path
from typing import NamedTuple

import crc32c

from tierlog.common.atomic import atomic_write_bytes
from tierlog.errors import CorruptSnapshotError

SNAPSHOT_VERSION = 1

_HEADER = struct.Struct(">hIi")  # version, crc, entry count
_ENTRY = struct.Struct(">qhiqiqiq")
_CRC_START = 6  # the CRC covers everything after the version and the CRC itself
HEADER_SIZE = _HEADER.size
ENTRY_SIZE = _ENTRY.size


class SnapshotEntry(NamedTuple):
    """One producer as a snapshot stores it (-1 marks an absent offset or transaction)."""

    producer_id: int
    producer_epoch: int
    last_sequence: int
    last_offset: int
    offset_delta: int
    timestamp: int
    coordinator_epoch: int
    current_txn_first_offset: int


def encode_snapshot(entries: Iterable[SnapshotEntry]) -> bytes:
    """The snapshot bytes: ``version int16 | crc uint32 | count int32 | entries``, each entry
    ``producerId int64 | producerEpoch int16 | lastSequence int32 | lastOffset int64 |
    offsetDelta int32 | timestamp int64 | coordinatorEpoch int32 | currentTxnFirstOffset int64``;
    the CRC-32C covers bytes 6 to the end."""
    body = [_ENTRY.pack(*entry) for entry in entries]
    buf = bytearray(_HEADER.pack(SNAPSHOT_VERSION, 0, len(body)))
    for chunk in body:
        buf += chunk
    struct.pack_into(">I", buf, 2, crc32c.crc32c(memoryview(buf)[_CRC_START:]))
    return bytes(buf)


def decode_snapshot(data: bytes, source: str = "<bytes>") -> list[SnapshotEntry]:
    """Parse snapshot bytes; CorruptSnapshotError (naming ``source``) for an unknown version,
    a bad CRC or a length that does not match the entry count."""
    if len(data) < HEADER_SIZE:
        raise CorruptSnapshotError(
            f"producer snapshot {source} is {len(data)} bytes, shorter than its "
            f"{HEADER_SIZE}-byte header"
        )
    version, stored_crc, count = _HEADER.unpack_from(data)
    if version != SNAPSHOT_VERSION:
        raise CorruptSnapshotError(
            f"producer snapshot {source} has unknown version {version} "
            f"(expected {SNAPSHOT_VERSION})"
        )
    computed = crc32c.crc32c(memoryview(data)[_CRC_START:])
    if stored_crc != computed:
        raise CorruptSnapshotError(
            f"producer snapshot {source} is corrupt: stored CRC {stored_crc:#010x}, "
            f"computed {computed:#010x}"
        )
    if count < 0 or len(data) != HEADER_SIZE + count * ENTRY_SIZE:
        raise CorruptSnapshotError(
            f"producer snapshot {source} announces {count} entries but holds "
            f"{len(data) - HEADER_SIZE} bytes of entries ({ENTRY_SIZE} bytes each)"
        )
    return [
        SnapshotEntry(*_ENTRY.unpack_from(data, HEADER_SIZE + i * ENTRY_SIZE))
        for i in range(count)
    ]


def write_snapshot(path: Path, entries: Iterable[SnapshotEntry]) -> None:
    """Atomically write a snapshot file (``.tmp``, fsync, rename, fsync the directory)."""
    atomic_write_bytes(path, encode_snapshot(entries))


def read_snapshot(path: Path) -> list[SnapshotEntry]:
    """Read and validate a snapshot file (FileNotFoundError if it is gone)."""
    return decode_snapshot(Path(path).read_bytes(), str(path))
