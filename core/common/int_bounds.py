"""Java's int and long bounds: the ranges of Kafka's int32 and int64 fields and config types.

One home for them: offsets relative to a segment base, sequences, partitions, epochs and
checkpoint fields are all bounded by these.
"""

from __future__ import annotations

__all__ = ["INT32_MAX", "INT32_MIN", "INT64_MAX", "INT64_MIN"]

INT32_MIN = -(1 << 31)
INT32_MAX = (1 << 31) - 1
INT64_MIN = -(1 << 63)
INT64_MAX = (1 << 63) - 1
