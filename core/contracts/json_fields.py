"""The valid range of every int read from the tier's JSON objects (segment metadata, partition
and tail manifests), checked in one place: a value outside it (an ``endOffset`` of 2^63-1,
whose exclusive end no int64 holds) is refused where it is read, naming the field, instead of
failing later as a bare OverflowError in a reader.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tierlog.common.int_bounds import INT32_MAX, INT64_MAX, INT64_MIN

#: Inclusive ``(low, high)`` of each kind of int.
RANGES: Mapping[str, tuple[int, int]] = {
    # An offset a record can have: one past it (an exclusive end) must still fit int64.
    "offset": (0, INT64_MAX - 1),
    # An exclusive end offset (a high watermark, a tail object's end).
    "end offset": (0, INT64_MAX),
    # Bytes and byte positions in an object.
    "size": (0, INT64_MAX - 1),
    "timestamp": (INT64_MIN, INT64_MAX),
    "partition": (0, INT32_MAX),
    "leader epoch": (-1, INT32_MAX),
    "broker id": (-1, INT32_MAX),
    "producer id": (-1, INT64_MAX),
    "generation": (0, INT64_MAX),
    "crc": (0, (1 << 32) - 1),
}

#: The kind of each int field of a segment's metadata object (RemoteLogSegmentMetadata).
SEGMENT_METADATA_KINDS: Mapping[str, str] = {
    "partition": "partition",
    "startOffset": "offset",
    "endOffset": "offset",
    "maxTimestampMs": "timestamp",
    "brokerId": "broker id",
    "eventTimestampMs": "timestamp",
    "segmentSizeInBytes": "size",
}


def check_json_int(value: object, kind: str, what: str) -> int:
    """``value`` when it is an int (not a bool) inside the range of ``kind``; TypeError or
    ValueError naming ``what`` (the field) otherwise, which the parsers turn into a
    CorruptRemoteMetadataError naming the object."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{what} must be an int, got {value!r:.60}")
    low, high = RANGES[kind]
    if not low <= value <= high:
        raise ValueError(f"{what} {value} is outside the {kind} range, {low}..{high}")
    return value


def json_int(data: Mapping[str, Any], key: str, kind: str) -> int:
    """Field ``key`` of a JSON object, checked by :func:`check_json_int` (KeyError when it
    is missing)."""
    return check_json_int(data[key], kind, f"field {key!r}")
