"""Planning a Spark read of the tier: the ReadSplits of every chosen topic and partition from
the parsed options and pushed bounds, split further until there are ``minPartitions`` of
them (Spark's Kafka source splits large offset ranges the same way), and the columns a read
yields for a schema the user gives (``.schema(...)``). No pyspark import.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import TYPE_CHECKING

import pyarrow as pa

from tierlog.errors import ConfigError, UnknownTopicOrPartitionError
from tierlog.reader import ReadSplit, RemoteTopicReader, schema
from tierlog.spark.options import TierlogOptions

if TYPE_CHECKING:
    from tierlog.spark.pushdown import PushedBounds

log = logging.getLogger(__name__)

#: How many times a read is re-planned with halved split sizes to reach minPartitions.
_MAX_REPLANS = 6


def plan_read(options: TierlogOptions, bounds: PushedBounds | None = None) -> list[ReadSplit]:
    """The splits of the read ``options`` describe (narrowed by ``bounds``), at least
    ``options.min_partitions`` of them where the segments' offset indexes allow cuts that
    fine (a split never cuts a record batch). Errors as ``RemoteTopicReader.plan``."""
    splits = _plan(options, bounds, options.split_bytes)
    wanted = options.min_partitions
    if wanted is None or not splits or len(splits) >= wanted:
        return splits
    # Spark's KafkaOffsetRangeCalculator: large ranges split in proportion to their size. A
    # uniform, smaller split size does that for byte ranges of segments.
    split_bytes = max(1, sum(s.size_in_bytes for s in splits) // wanted)
    for _ in range(_MAX_REPLANS):
        finer = _plan(options, bounds, split_bytes)
        if len(finer) > len(splits):
            splits = finer
        if len(splits) >= wanted or split_bytes == 1:
            break
        split_bytes = max(1, split_bytes // 2)
    if len(splits) < wanted:
        log.info("%s: minPartitions=%d, but the offset indexes allow only %d splits",
                 options.url, wanted, len(splits))
    return splits


def read_columns(requested: pa.Schema, *, include_headers: bool) -> list[str] | None:
    """The columns, in order, a read yields for the schema ``requested`` (a user's
    ``.schema(...)``, as Arrow): None for the source's whole schema, else a selection of its
    columns by name, each of the source's type (Spark 4.3 never passes a Python source the
    columns a query uses, so a schema naming fewer columns is how a user ships fewer of them
    to the JVM). ConfigError names a column the source does not have or a wrong type."""
    full = schema(include_headers)
    if requested.names == full.names and all(
            r.type == f.type for r, f in zip(requested, full, strict=True)):
        return None
    if not requested.names:
        raise ConfigError("schema", "names no column; name some of the tierlog source's: "
                                    f"{', '.join(full.names)}")
    for field in requested:
        index = full.get_field_index(field.name)
        if index < 0:
            raise ConfigError("schema", f"names column {field.name!r}, which the tierlog "
                                        f"source does not have (its columns: "
                                        f"{', '.join(full.names)})")
        if full.field(index).type != field.type:
            raise ConfigError("schema", f"gives column {field.name!r} the type {field.type}; "
                                        f"the tierlog source reads it as "
                                        f"{full.field(index).type}")
    if len(set(requested.names)) != len(requested.names):
        raise ConfigError("schema", f"names a column twice: {', '.join(requested.names)}")
    return list(requested.names)


def select_columns(batches: Iterator[pa.RecordBatch], columns: list[str] | None
                   ) -> Iterator[pa.RecordBatch]:
    """``batches`` with only ``columns`` (``read_columns``'s answer; None: all of them),
    zero-copy (the selected columns share the batches' buffers)."""
    if columns is None:
        return batches
    return (batch.select(columns) for batch in batches)


def _plan(options: TierlogOptions, bounds: PushedBounds | None, split_bytes: int
          ) -> list[ReadSplit]:
    o = options
    reader = RemoteTopicReader(o.url, o.storage_options, split_bytes=split_bytes,
                               fail_on_data_loss=o.fail_on_data_loss)
    topics = o.topics(reader)
    if not topics:  # a pattern matching nothing reads nothing, but only from a real tier
        reader.existing_topics()
    _check_named_topics(o, topics)
    with reader.consistent():  # a backfill job is in every topic of the read or in none
        return _plan_topics(o, reader, topics, bounds)


def _plan_topics(o: TierlogOptions, reader: RemoteTopicReader, topics: list[str],
                 bounds: PushedBounds | None) -> list[ReadSplit]:
    splits: list[ReadSplit] = []
    for topic in topics:
        if bounds is not None and bounds.topics is not None and topic not in bounds.topics:
            continue
        topic_id = o.topic_id(topic)
        found = reader.list_partitions(topic, topic_id=topic_id)
        if found:
            _check_named_partitions(o, topic, found)
        partitions = found if o.assign is None else list(o.assign[topic])
        if found:
            _check_every_partition_named(o, topic, partitions)
        if bounds is not None:
            partitions = [p for p in partitions if bounds.allows_partition(p)]
        starting, starting_ts = o.starting_for(topic)
        ending, ending_ts = o.ending_for(topic)
        splits += reader.plan(
            topic, partitions,
            starting_offsets=starting, ending_offsets=ending, starting_timestamp=starting_ts,
            ending_timestamp=ending_ts,
            min_offset=None if bounds is None else bounds.min_offset,
            max_offset=None if bounds is None else bounds.max_offset,
            min_timestamp=None if bounds is None else bounds.min_timestamp,
            isolation_level=o.isolation_level, batch_rows=o.batch_rows, topic_id=topic_id,
            timestamp_strategy=o.timestamp_strategy, include_headers=o.include_headers)
    log.info("%s: %d splits, %d bytes of segments to read", o.url, len(splits),
             sum(s.size_in_bytes for s in splits))
    return splits


def _named(options: TierlogOptions) -> dict[str, object]:
    return {
        "startingOffsets": options.starting_offsets,
        "endingOffsets": options.ending_offsets,
        "startingOffsetsByTimestamp": options.starting_by_timestamp,
        "endingOffsetsByTimestamp": options.ending_by_timestamp,
    }


def _check_named_topics(options: TierlogOptions, topics: list[str]) -> None:
    """An offsets or timestamps JSON option names only topics the query reads."""
    for key, value in _named(options).items():
        if isinstance(value, dict):
            stray = sorted(set(value) - set(topics))
            if stray:
                raise ConfigError(key.lower(), f"names topic {', '.join(map(repr, stray))}, "
                                               f"which this query does not read (it reads "
                                               f"{', '.join(topics) or 'no topic'})")


def _check_every_partition_named(options: TierlogOptions, topic: str,
                                 partitions: list[int]) -> None:
    """Where a batch query's start or end is per-partition JSON, it names every partition the
    query reads of ``topic``: Spark's Kafka source refuses offsets that leave one out (a
    partition left out would otherwise be read from earliest or to latest, silently)."""
    for side in ("starting", "ending"):
        how, value = options.limit(side)
        if not isinstance(value, dict):
            continue
        key = f"{side}{how}"
        left_out = sorted(set(partitions) - set(value.get(topic, {})))
        if left_out:
            name = f"{side}Offsets" if how == "offsets" else f"{side}OffsetsByTimestamp"
            named = sorted(value.get(topic, {}))
            raise ConfigError(key, (
                f"leaves out partition{'s' if len(left_out) > 1 else ''} "
                f"{', '.join(map(str, left_out))} of topic {topic!r} (it names "
                f"{', '.join(map(str, named)) or 'none'}): a batch query's {name} must name "
                f"every partition it reads, as Spark's Kafka source requires"
                + (" (use -2 for earliest, -1 for latest)" if how == "offsets" else "")
                + "; or read fewer partitions with assign"))


def _check_named_partitions(options: TierlogOptions, topic: str, found: list[int]) -> None:
    """Every partition of ``topic`` an offsets or timestamps JSON option names exists (Spark
    fails on one it cannot assign)."""
    for key, value in _named(options).items():
        if not isinstance(value, dict) or topic not in value:
            continue
        missing = sorted(set(value[topic]) - set(found))
        if missing:
            raise UnknownTopicOrPartitionError(
                f"{key} names partition {', '.join(map(str, missing))} of topic {topic!r}, "
                f"which the tier at {options.url!r} does not hold; its partitions are "
                f"{', '.join(map(str, found))}")
