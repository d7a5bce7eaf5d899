"""The CLI's name for Kafka's default partitioner, whose home is :mod:`tierlog.partitioner`."""

from __future__ import annotations

from tierlog.partitioner import murmur2, partition_for_key

__all__ = ["murmur2", "partition_for_key"]
