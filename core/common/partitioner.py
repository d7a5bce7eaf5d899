"""Kafka's default partitioner: ``murmur2(key) & 0x7fffffff % partitions`` for keyed records,
so a key lands where a Java producer would put it; keyless records rotate per batch.

The one home of the rule: the CLI's producer and demo and the tier backfill (Spark's
``df.write.format("tierlog")``) call it. Imports nothing of tierlog.
"""

from __future__ import annotations

_SEED = 0x9747B28C
_M = 0x5BD1E995
_MASK32 = 0xFFFFFFFF


def murmur2(data: bytes) -> int:
    """Kafka's ``Utils.murmur2`` (32-bit, seed 0x9747b28c) as an unsigned 32-bit int."""
    length = len(data)
    h = (_SEED ^ length) & _MASK32
    end = length - length % 4
    for i in range(0, end, 4):
        k = int.from_bytes(data[i:i + 4], "little")
        k = (k * _M) & _MASK32
        k ^= k >> 24
        k = (k * _M) & _MASK32
        h = ((h * _M) & _MASK32) ^ k
    extra = length % 4
    if extra == 3:
        h ^= data[end + 2] << 16
    if extra >= 2:
        h ^= data[end + 1] << 8
    if extra >= 1:
        h ^= data[end]
        h = (h * _M) & _MASK32
    h ^= h >> 13
    h = (h * _M) & _MASK32
    h ^= h >> 15
    return h


def partition_for_key(key: bytes, partitions: int) -> int:
    """The partition Kafka's default partitioner picks for a keyed record."""
    return (murmur2(key) & 0x7FFFFFFF) % partitions
