"""Records as Arrow columns, for encoding a batch's records section in bulk
(``encode_columns`` of tierlog.records._codec): the buffers of Arrow arrays, as
``pyarrow.Array.buffers()`` gives them, and each array's offset in elements.

Binary columns are Arrow ``binary`` (int32 offsets): a validity bitmap (None: all valid),
offsets and data. Headers are a ``list<struct<key, value>>``: the list's validity and
offsets (a null list is no headers) index the key and value columns. This module imports
no pyarrow: the front doors (tierlog.remote.ops.backfill) hand over the buffers.
"""

from __future__ import annotations

from typing import Any, NamedTuple

Buffer = Any
"""A bytes-like object (``pyarrow.Buffer``, bytes, memoryview) or None."""


class RecordColumns(NamedTuple):
    """The columns of rows to encode (the C accelerator reads this tuple positionally)."""

    key_valid: Buffer
    key_offsets: Buffer
    """None: every key is null."""
    key_data: Buffer
    key_offset: int
    value_valid: Buffer
    value_offsets: Buffer
    value_data: Buffer
    value_offset: int
    timestamps: Buffer
    """int64 milliseconds, none null."""
    timestamp_offset: int
    header_valid: Buffer
    header_offsets: Buffer
    """None: no row has headers."""
    header_offset: int
    header_key_valid: Buffer
    header_key_offsets: Buffer
    header_key_data: Buffer
    header_key_offset: int
    header_value_valid: Buffer
    header_value_offsets: Buffer
    header_value_data: Buffer
    header_value_offset: int


__all__ = ["RecordColumns"]
