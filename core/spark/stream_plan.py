"""Planning a streaming read of the tier: a stream's starting offsets, each partition's
published end (``latestOffset``), and the splits of one micro-batch's offset range. No
pyspark import (``tierlog.spark.stream`` wraps these in Spark's streaming API).

Exactly once rests on :func:`plan_range` being deterministic: the same ``(start, end)``
planned again after a restart reads the same records. It never reads past ``end``, and it
plans from what the tier holds at that moment: the committed segments, then the published
tail. A tail object is deleted once a committed segment holds its offsets, so a split of a
tail object that is gone by the time a task reads it is planned again over the same offsets
(:func:`read_stream_split`), and finds them in the committed segment.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

import pyarrow as pa

from tierlog.errors import RemoteResourceNotFoundError
from tierlog.reader import EARLIEST, LATEST, ReadSplit, RemoteTopicReader, read_split
from tierlog.spark.options import TierlogOptions
from tierlog.spark.stream_offsets import Offsets

log = logging.getLogger(__name__)

#: Split size when a starting timestamp is resolved by reading its first record.
_TIMESTAMP_PROBE_BYTES = 1 << 20


@dataclass(frozen=True, slots=True)
class StreamSplit:
    """One Spark task of a micro-batch: a ReadSplit, and what planning its offsets again
    needs (the storage options travel in the split)."""

    split: ReadSplit
    topic_id: str | None
    fail_on_data_loss: bool


def open_reader(options: TierlogOptions) -> RemoteTopicReader:
    """A reader of the tier the options name (it lists the tier afresh on every call)."""
    return RemoteTopicReader(options.url, options.storage_options,
                             split_bytes=options.split_bytes,
                             fail_on_data_loss=options.fail_on_data_loss)


def stream_partitions(options: TierlogOptions, reader: RemoteTopicReader
                      ) -> dict[str, list[int]]:
    """The partitions the stream reads now, per topic: every partition of the subscribed
    topics or of the topics matching ``subscribePattern`` (new ones appear here as they
    reach the tier), or the assigned ones the tier holds. A subscribed topic not in the tier
    yet has none (the stream waits for it, as Spark's Kafka source waits for a topic)."""
    out: dict[str, list[int]] = {}
    for topic in options.topics(reader):
        found = reader.list_partitions(topic, topic_id=options.topic_id(topic))
        if options.assign is not None:
            found = [p for p in found if p in options.assign[topic]]
        if found:
            out[topic] = found
    return out


def latest_offsets(options: TierlogOptions, reader: RemoteTopicReader) -> Offsets:
    """Each partition's published end for the isolation level (the tail's high watermark or
    last stable offset with tail publishing, else the committed segments' end)."""
    out: Offsets = {}
    with reader.consistent():  # a backfill job's rows are in every topic's ends or in none
        for topic, partitions in stream_partitions(options, reader).items():
            ends = reader.latest_offsets(topic, isolation_level=options.isolation_level,
                                         topic_id=options.topic_id(topic))
            out.update({(topic, p): ends[p] for p in partitions if p in ends})
    return out


def earliest_offset(options: TierlogOptions, reader: RemoteTopicReader, topic: str,
                    partition: int) -> int:
    """The partition's first offset in the tier (its log start offset)."""
    return reader.offset_range(topic, partition, isolation_level=options.isolation_level,
                               topic_id=options.topic_id(topic))[0]


def initial_offsets(options: TierlogOptions, reader: RemoteTopicReader) -> Offsets:
    """Where a new query starts: ``startingTimestamp`` / ``startingOffsetsByTimestamp``
    (the first offset stamped at or after it), else ``startingOffsets`` (``latest`` by
    default; JSON offsets, -2 earliest, -1 latest, partitions left out at earliest)."""
    out: Offsets = {}
    latest = latest_offsets(options, reader)
    for topic, partitions in stream_partitions(options, reader).items():
        offsets, timestamps = options.starting_for(topic)
        for p in partitions:
            end = latest.get((topic, p), 0)
            ts = timestamps if isinstance(timestamps, int) or timestamps is None \
                else timestamps.get(p)
            if ts is not None:
                out[(topic, p)] = _offset_for_timestamp(options, topic, p, ts, end)
                continue
            given = offsets if isinstance(offsets, str) else offsets.get(p, EARLIEST)
            if given in ("latest", LATEST):
                out[(topic, p)] = end
            elif given in ("earliest", EARLIEST):
                out[(topic, p)] = earliest_offset(options, reader, topic, p)
            else:
                assert isinstance(given, int)
                out[(topic, p)] = given  # checked against the tier when the batch is planned
    return out


def _offset_for_timestamp(options: TierlogOptions, topic: str, partition: int,
                          timestamp: int, end: int) -> int:
    """The first offset of ``topic-partition`` stamped at or after ``timestamp``, found by
    reading from where the time index points; ``end`` when no record is (strategy
    ``latest``; ``error`` raises OffsetOutOfRangeError, as Spark does)."""
    probe = RemoteTopicReader(options.url, options.storage_options,
                              split_bytes=_TIMESTAMP_PROBE_BYTES,
                              fail_on_data_loss=options.fail_on_data_loss)
    splits = probe.plan(topic, [partition], starting_timestamp=timestamp,
                        ending_offsets={partition: end}, isolation_level=options.isolation_level,
                        topic_id=options.topic_id(topic),
                        timestamp_strategy=options.timestamp_strategy, include_headers=False)
    for split in splits:
        for batch in read_split(split):
            if batch.num_rows:
                first: int = batch.column("offset")[0].as_py()
                return first
    return end


def plan_range(options: TierlogOptions, reader: RemoteTopicReader, start: Mapping[
        tuple[str, int], int], end: Mapping[tuple[str, int], int]) -> list[StreamSplit]:
    """The splits reading each partition of ``end`` from its offset in ``start`` (a
    partition new since then: from its earliest, as Spark's Kafka source reads one) up to
    its offset in ``end`` (exclusive), in topic, partition and offset order. Offsets below
    the partition's earliest (deleted by retention or DeleteRecords before the stream read
    them) are data loss, which the reader's start check reports (``RemoteTopicReader``:
    OffsetOutOfRangeError naming them, or with ``failOnDataLoss=false`` a warning naming
    the offsets of the range that are skipped)."""
    by_topic: dict[str, tuple[dict[int, int], dict[int, int]]] = {}
    for (topic, partition), until in sorted(end.items()):
        begin = start.get((topic, partition), EARLIEST)
        if begin == EARLIEST:
            log.info("%s-%d: a new partition, read from its earliest offset", topic, partition)
        elif begin >= until:
            continue
        starts, ends = by_topic.setdefault(topic, ({}, {}))
        starts[partition], ends[partition] = begin, until
    splits: list[StreamSplit] = []
    for topic, (starts, ends) in by_topic.items():
        topic_id = options.topic_id(topic)
        planned = reader.plan(topic, sorted(starts), starting_offsets=starts,
                              ending_offsets=ends, isolation_level=options.isolation_level,
                              batch_rows=options.batch_rows, topic_id=topic_id,
                              include_headers=options.include_headers)
        splits += [StreamSplit(s, topic_id, options.fail_on_data_loss) for s in planned]
    return splits


def read_stream_split(part: StreamSplit) -> Iterator[pa.RecordBatch]:
    """The records of one micro-batch split. An object deleted since planning (a tail object
    whose offsets a committed segment now holds, or a segment retention removed) is planned
    again over the same offsets: the committed segment has them, or they are data loss."""
    split = part.split
    try:
        batches = read_split(split)
        first = next(batches, None)  # the split's one GET happens here
    except RemoteResourceNotFoundError as missing:
        log.info("%s: %s is gone since planning; planning offsets [%d, %d) again",
                 split.topic, split.log_path, split.start_offset, split.end_offset)
        yield from _replanned(part, missing)
        return
    if first is not None:
        yield first
        yield from batches


def _replanned(part: StreamSplit, missing: RemoteResourceNotFoundError
               ) -> Iterator[pa.RecordBatch]:
    split = part.split
    reader = RemoteTopicReader(split.url, split.storage_options,
                               fail_on_data_loss=part.fail_on_data_loss)
    p = split.partition
    again = reader.plan(split.topic, [p], starting_offsets={p: split.start_offset},
                        ending_offsets={p: split.end_offset},
                        isolation_level=split.isolation_level, batch_rows=split.batch_rows,
                        topic_id=part.topic_id, include_headers=split.include_headers)
    if any(s.log_path == split.log_path for s in again):
        raise missing  # still named by the tier, yet missing: not a race, a broken tier
    for s in again:
        yield from read_split(s)
