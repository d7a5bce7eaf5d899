"""A table data file's Parquet footer read from the tier with two ranged GETs (the trailer,
then the footer), never the whole file: scrub checks a file's key-value metadata this way, and
an unmerge reads a run file's link list (``tierlog.links``) the same way.
"""

from __future__ import annotations

import struct

import pyarrow as pa
import pyarrow.parquet as pq

from tierlog.errors import CorruptRecordError
from tierlog.remote.tier.object_store import RemoteTier

#: A Parquet file ends with its footer's length (4 bytes, little-endian) and ``PAR1``.
_TRAILER = 8
_MAGIC = b"PAR1"


def read_footer(tier: RemoteTier, path: str, size: int) -> pq.FileMetaData:
    """The Parquet footer of the object of ``size`` bytes at ``path`` (two ranged GETs: the
    trailer, then the footer). CorruptRecordError naming it when it is not a Parquet file."""
    if size < len(_MAGIC) + _TRAILER:
        raise CorruptRecordError(f"{path}: {size} bytes is too short for a Parquet file")
    trailer = tier.get_bytes(path, size - _TRAILER, size)
    (length,) = struct.unpack("<I", trailer[:4])
    if trailer[4:] != _MAGIC or length + _TRAILER + len(_MAGIC) > size:
        raise CorruptRecordError(f"{path}: no Parquet footer at its end")
    footer = tier.get_bytes(path, size - _TRAILER - length, size)
    return pq.read_metadata(pa.BufferReader(_MAGIC + footer))


def key_values(metadata: pq.FileMetaData) -> dict[str, str]:
    """The footer's key-value metadata as text (undecodable bytes replaced)."""
    return {k.decode(errors="replace"): v.decode(errors="replace")
            for k, v in (metadata.metadata or {}).items()}


__all__ = ["key_values", "read_footer"]
