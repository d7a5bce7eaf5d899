"""RemoteTopicReader: lists and reads topics straight from a remote tier into Arrow, with
nothing but the tier's URL and storage options (no Log, no broker, no local state).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import replace
from typing import Any, TypedDict, Unpack

import pyarrow as pa

from tierlog.errors import OffsetOutOfRangeError, TierNotFoundError, UnknownTopicOrPartitionError
from tierlog.reader._planner import (
    DEFAULT_SPLIT_BYTES,
    EARLIEST,
    LATEST,
    PartitionPlanner,
    PartitionRequest,
)
from tierlog.records.arrow.schema import SCHEMA, schema
from tierlog.records.timestamps import format_timestamp_ms
from tierlog.remote import RemoteLogSegmentMetadata, TopicIdPartition
from tierlog.remote.ops.backfill_visibility import JobVisibility
from tierlog.remote.read.readable import (
    ChainLink,
    ReadStats,
    open_tier,
    published_tail,
    remote_partitions,
    segment_chain,
    topic_partitions,
)
from tierlog.remote.read.split import DEFAULT_BATCH_ROWS, READ_UNCOMMITTED, ReadSplit, read_split

log = logging.getLogger(__name__)

#: A per-partition value (offset or timestamp), or one value for every partition.
PerPartition = int | Mapping[int, int]
_OFFSET_WORDS = {"earliest": EARLIEST, "latest": LATEST}
#: What a starting timestamp later than every record of a partition means (Spark's
#: ``startingOffsetsByTimestampStrategy``): ``error``, or ``latest`` (start at the end).
TIMESTAMP_STRATEGIES = ("error", "latest")


class ReadOptions(TypedDict, total=False):
    """The keyword options of :meth:`RemoteTopicReader.read` (its defaults apply), which
    ``read_table`` passes on."""

    starting_offsets: str | PerPartition
    ending_offsets: str | PerPartition
    starting_timestamp: PerPartition | None
    ending_timestamp: PerPartition | None
    min_offset: int | None
    max_offset: int | None
    min_timestamp: int | None
    isolation_level: str
    batch_rows: int
    topic_id: str | None
    timestamp_strategy: str
    include_headers: bool
    columns: Sequence[str] | None
    use_table: bool


def _timestamp_for(value: PerPartition | None, partition: int, what: str) -> int | None:
    if value is None:
        return None
    if isinstance(value, Mapping):
        return value.get(partition)
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{what} must be an int or a mapping of partition to int, got {value!r}")
    return value


def projection(columns: Sequence[str] | None, include_headers: bool = True) -> pa.Schema:
    """The schema of a read returning ``columns`` (any of ``SCHEMA``'s, in the caller's
    order; None: ``schema(include_headers)``); ValueError naming an unknown or repeated one,
    or ``headers`` asked for with ``include_headers=False``."""
    if columns is None:
        return schema(include_headers)
    if isinstance(columns, str):
        raise TypeError(f"columns must be a sequence of column names, got {columns!r}")
    seen: set[str] = set()
    for name in columns:
        if name not in SCHEMA.names:
            raise ValueError(f"no column {name!r}: a read returns {', '.join(SCHEMA.names)}")
        if name in seen:
            raise ValueError(f"column {name!r} is asked for twice")
        if name == "headers" and not include_headers:
            raise ValueError("column 'headers' is asked for with include_headers=False")
        seen.add(name)
    return pa.schema([SCHEMA.field(name) for name in columns])


def _offset_for(value: str | PerPartition, partition: int, default: int, what: str) -> int:
    if isinstance(value, str):
        if value.lower() not in _OFFSET_WORDS:
            raise ValueError(f"{what} must be 'earliest', 'latest', an offset or a mapping of "
                             f"partition to offset, got {value!r}")
        return _OFFSET_WORDS[value.lower()]
    found = _timestamp_for(value, partition, what)
    return default if found is None else found


class RemoteTopicReader:
    """Reads Kafka topics from a tierlog remote tier as Spark's Kafka source would read them
    from the brokers: every codec decompressed, control records skipped, read_committed
    honoured from the tier's transaction indexes and producer snapshots.

    ``url`` is the tier's root (``s3://bucket/prefix``, ``file:///srv/tier``, a path, any
    fsspec URL); ``storage_options`` are the filesystem's (e.g. s3fs ``endpoint_url``,
    ``key``, ``secret``). ``stats`` counts the requests and bytes of this reader. Thread-safe
    as far as the filesystem is; each call lists the tier afresh.
    """

    def __init__(
        self,
        url: str,
        storage_options: Mapping[str, Any] | None = None,
        *,
        split_bytes: int = DEFAULT_SPLIT_BYTES,
        verify_manifest: bool = True,
        verify_crc: bool = True,
        fail_on_data_loss: bool = True,
    ) -> None:
        if split_bytes <= 0:
            raise ValueError(f"split_bytes must be positive, got {split_bytes}")
        self.url = url
        self.storage_options = dict(storage_options or {})
        self.split_bytes = split_bytes
        self.verify_manifest = verify_manifest
        self.verify_crc = verify_crc
        self.fail_on_data_loss = fail_on_data_loss
        self.stats = ReadStats()
        self._tier = open_tier(url, self.storage_options, self.stats)
        self._pinned = threading.local()

    def __repr__(self) -> str:
        return f"RemoteTopicReader({self.url!r})"

    @contextmanager
    def consistent(self) -> Iterator[None]:
        """Calls of this thread inside the block see the backfill jobs of one moment: a job
        committing meanwhile is in all of their partitions and topics, or in none
        (tierlog.remote.ops.backfill_visibility). Each call is consistent on its own."""
        if getattr(self._pinned, "jobs", None) is not None:
            yield
            return
        self._pinned.jobs = JobVisibility.read(self._tier)
        try:
            yield
        finally:
            self._pinned.jobs = None

    # -- listing --------------------------------------------------------------------------

    def list_topics(self) -> list[str]:
        """Every topic with a partition directory in the tier, sorted."""
        return sorted({p.topic for p in remote_partitions(self._tier)})

    def existing_topics(self) -> list[str]:
        """``list_topics``, but TierNotFoundError when there is none: a URL holding no
        partition directory at all is no tier (a typo in it must not read as empty topics)."""
        topics = self.list_topics()
        if not topics:
            raise TierNotFoundError(
                f"no tierlog remote tier at {self.url!r}: it holds no topic partition "
                f"directories (<topic>-<partition>-<topicId>/); check the path and the "
                f"storage options")
        return topics

    def list_partitions(self, topic: str, *, topic_id: str | None = None) -> list[int]:
        return sorted(topic_partitions(self._tier, topic, topic_id))

    def list_segments(self, topic: str, partition: int, *, topic_id: str | None = None
                      ) -> list[RemoteLogSegmentMetadata]:
        """The committed segments a read of the partition uses, in offset order, each with
        its offset range, max timestamp and size (from the tier's manifest and metadata)."""
        tip = self._tip(topic, partition, topic_id)
        return [] if tip is None else [link.segment for link in self._chain(tip)]

    def offset_range(self, topic: str, partition: int, *,
                     isolation_level: str = READ_UNCOMMITTED,
                     topic_id: str | None = None) -> tuple[int, int]:
        """``(earliest, latest)``: the first offset in the tier and the end (exclusive) of
        what ``isolation_level`` may read."""
        tip = self._tip(topic, partition, topic_id)
        if tip is None:
            return 0, 0
        planner = self._planner(tip, DEFAULT_BATCH_ROWS)
        return planner.earliest, planner.latest(isolation_level)

    def latest_offsets(self, topic: str, *, isolation_level: str = READ_UNCOMMITTED,
                       topic_id: str | None = None) -> dict[int, int]:
        """Each partition's published end (exclusive) for ``isolation_level``: with tail
        publishing, one GET of the partition's ``_tail.json`` (its high watermark, or last
        stable offset under read_committed); without, the committed segments' end as
        ``offset_range`` says. A stream's ``latestOffset``."""
        PartitionRequest(isolation_level=isolation_level)  # checks the level
        with self.consistent():
            return self._latest_offsets(topic, isolation_level, topic_id)

    def _latest_offsets(self, topic: str, isolation_level: str, topic_id: str | None
                        ) -> dict[int, int]:
        out: dict[int, int] = {}
        for p, tip in sorted(topic_partitions(self._tier, topic, topic_id).items()):
            tail = published_tail(self._tier, tip)
            if tail is not None:
                out[p] = tail.published_end(isolation_level != READ_UNCOMMITTED)
            else:
                out[p] = self.offset_range(topic, p, isolation_level=isolation_level,
                                           topic_id=tip.topic_id)[1]
        return out

    # -- reading --------------------------------------------------------------------------

    def plan(
        self,
        topic: str,
        partitions: Iterable[int] | None = None,
        *,
        starting_offsets: str | PerPartition = "earliest",
        ending_offsets: str | PerPartition = "latest",
        starting_timestamp: PerPartition | None = None,
        ending_timestamp: PerPartition | None = None,
        min_offset: int | None = None,
        max_offset: int | None = None,
        min_timestamp: int | None = None,
        isolation_level: str = READ_UNCOMMITTED,
        batch_rows: int = DEFAULT_BATCH_ROWS,
        topic_id: str | None = None,
        timestamp_strategy: str = "latest",
        include_headers: bool = True,
    ) -> list[ReadSplit]:
        """The ReadSplits of a read (see ``read``), in partition then offset order: one per
        remote segment, more for segments larger than ``split_bytes``. Fetches the metadata
        and the few index objects the bounds need; reads no ``.log`` bytes."""
        with self.consistent():
            splits = [split for planner, request in self._requests(
                topic, partitions, starting_offsets, ending_offsets, starting_timestamp,
                ending_timestamp, min_offset, max_offset, min_timestamp, isolation_level,
                batch_rows, topic_id, timestamp_strategy) for split in planner.plan(request)]
        if not include_headers:
            splits = [replace(s, include_headers=False) for s in splits]
        return splits

    def _requests(self, topic: str, partitions: Iterable[int] | None,
                  starting_offsets: str | PerPartition, ending_offsets: str | PerPartition,
                  starting_timestamp: PerPartition | None,
                  ending_timestamp: PerPartition | None, min_offset: int | None,
                  max_offset: int | None, min_timestamp: int | None, isolation_level: str,
                  batch_rows: int, topic_id: str | None, timestamp_strategy: str
                  ) -> list[tuple[PartitionPlanner, PartitionRequest]]:
        """Each partition's planner and checked request, in partition order (those with
        nothing to read left out)."""
        if timestamp_strategy not in TIMESTAMP_STRATEGIES:
            raise ValueError(f"timestamp_strategy must be one of "
                             f"{', '.join(TIMESTAMP_STRATEGIES)}, got {timestamp_strategy!r}")
        found = self._partitions_of(topic, topic_id, partitions)
        wanted = sorted(found) if partitions is None else sorted(set(partitions))
        requests: list[tuple[PartitionPlanner, PartitionRequest]] = []
        for p in wanted:
            request = PartitionRequest(
                start=_offset_for(starting_offsets, p, EARLIEST, "starting_offsets"),
                end=_offset_for(ending_offsets, p, LATEST, "ending_offsets"),
                start_timestamp=_timestamp_for(starting_timestamp, p, "starting_timestamp"),
                end_timestamp=_timestamp_for(ending_timestamp, p, "ending_timestamp"),
                min_offset=min_offset, max_offset=max_offset, min_timestamp=min_timestamp,
                isolation_level=isolation_level,
            )
            planner = self._planner(found[p], batch_rows)
            checked = self._checked(planner, request, timestamp_strategy)
            if checked is not None:
                requests.append((planner, checked))
        return requests

    def read(
        self,
        topic: str,
        partitions: Iterable[int] | None = None,
        *,
        starting_offsets: str | PerPartition = "earliest",
        ending_offsets: str | PerPartition = "latest",
        starting_timestamp: PerPartition | None = None,
        ending_timestamp: PerPartition | None = None,
        min_offset: int | None = None,
        max_offset: int | None = None,
        min_timestamp: int | None = None,
        isolation_level: str = READ_UNCOMMITTED,
        batch_rows: int = DEFAULT_BATCH_ROWS,
        topic_id: str | None = None,
        timestamp_strategy: str = "latest",
        include_headers: bool = True,
        columns: Sequence[str] | None = None,
        use_table: bool = True,
    ) -> Iterator[pa.RecordBatch]:
        """The records of ``topic`` as RecordBatches of ``SCHEMA``, partition by partition
        (``SCHEMA_NO_HEADERS``, Spark's seven columns, with ``include_headers=False``).

        ``starting_offsets``: 'earliest' (default), 'latest', an offset, or a mapping of
        partition to offset (-2 earliest, -1 latest; partitions left out start at earliest).
        ``ending_offsets``: 'latest' (default) or offsets (exclusive; -1 latest). A
        ``starting_timestamp``/``ending_timestamp`` (epoch ms, or per partition) replaces
        them with the first offset stamped at or after it. ``min_offset``/``max_offset``
        (inclusive) and ``min_timestamp`` are row filters that also prune what is fetched.
        'latest' is the tier's end, or under read_committed its last stable offset.

        Errors, as Spark's Kafka source fails: TierNotFoundError when ``url`` holds no tier
        at all; UnknownTopicOrPartitionError for a topic or partition not in it (naming what
        is); OffsetOutOfRangeError for a start past the end, for a start below the earliest
        offset (deleted by retention) unless ``fail_on_data_loss`` is False (then a warning,
        and the read starts at the earliest), and for a ``starting_timestamp`` later than
        every record when ``timestamp_strategy`` is ``error`` (``latest``, the default here:
        nothing is read).

        ``columns``: the columns to return, any of ``SCHEMA``'s in any order (ValueError
        naming an unknown one). ``use_table``: read the offsets the topic's table covers from
        its Parquet files (tierlog.reader._table; the same rows, faster), the rest from the
        segments; False reads the segments alone.
        """
        out = projection(columns, include_headers)
        headers = "headers" in out.names
        if not use_table:
            for split in self.plan(
                    topic, partitions, starting_offsets=starting_offsets,
                    ending_offsets=ending_offsets, starting_timestamp=starting_timestamp,
                    ending_timestamp=ending_timestamp, min_offset=min_offset,
                    max_offset=max_offset, min_timestamp=min_timestamp,
                    isolation_level=isolation_level, batch_rows=batch_rows, topic_id=topic_id,
                    timestamp_strategy=timestamp_strategy, include_headers=headers):
                yield from _project(read_split(split, stats=self.stats), out)
            return
        # Imported here: tierlog.remote.ops is not needed by reads that use no table.
        from tierlog.remote.tier.topics import has_table

        with self.consistent():
            requests = self._requests(
                topic, partitions, starting_offsets, ending_offsets, starting_timestamp,
                ending_timestamp, min_offset, max_offset, min_timestamp, isolation_level,
                batch_rows, topic_id, timestamp_strategy)
        if not requests:
            return

        def segments(planner: PartitionPlanner, request: PartitionRequest
                     ) -> Iterator[pa.RecordBatch]:
            for split in planner.plan(request):
                yield from _project(read_split(replace(split, include_headers=headers),
                                               stats=self.stats), out)

        tip = requests[0][0].tip
        if not has_table(self._tier, tip.topic, tip.topic_id):
            # One LIST; pyiceberg (0.4-0.7 s to import) loads only for a topic with a table.
            for planner, request in requests:
                yield from segments(planner, request)
            return
        # Imported here: pyiceberg loads only for reads that may use a table.
        from tierlog.reader._table import TableRead

        table = TableRead.open(self._tier, tip.topic, tip.topic_id, batch_rows=batch_rows)
        for planner, request in requests:
            yield from table.partition(planner, request, out, segments)

    def read_table(self, topic: str, partitions: Iterable[int] | None = None,
                   **options: Unpack[ReadOptions]) -> pa.Table:
        """``read`` gathered into one Table (options as for ``read``)."""
        out = projection(options.get("columns"), options.get("include_headers", True))
        return pa.Table.from_batches(list(self.read(topic, partitions, **options)), schema=out)

    # -- internals ----------------------------------------------------------------------

    def _partitions_of(self, topic: str, topic_id: str | None,
                       partitions: Iterable[int] | None) -> dict[int, TopicIdPartition]:
        """``topic``'s partitions, every one of ``partitions`` among them: else the error
        names what the tier holds (and a URL holding no tier at all is said to be so)."""
        found = topic_partitions(self._tier, topic, topic_id)
        if not found:
            topics = self.existing_topics()
            what = f"topic {topic!r}" + ("" if topic_id is None else f" with id {topic_id}")
            raise UnknownTopicOrPartitionError(
                f"{what} is not in the tier at {self.url!r}; it holds {', '.join(topics)}")
        missing = sorted(set(partitions or ()) - set(found))
        if missing:
            raise UnknownTopicOrPartitionError(
                f"topic {topic!r} has no partition {', '.join(map(str, missing))} in the tier "
                f"at {self.url!r}; its partitions are {', '.join(map(str, sorted(found)))}")
        return found

    def _checked(self, planner: PartitionPlanner, request: PartitionRequest,
                 timestamp_strategy: str) -> PartitionRequest | None:
        """``request`` with an explicit start checked against the partition's offsets, as
        Spark's Kafka source checks them: None when there is nothing to read."""
        tip = planner.tip
        name = f"{tip.topic}-{tip.partition}"
        ts = request.start_timestamp
        if ts is not None:
            if planner.reaches_timestamp(ts):
                return request
            if timestamp_strategy == "error":
                raise OffsetOutOfRangeError(
                    f"{name}: no offset matches starting timestamp {format_timestamp_ms(ts)}: "
                    f"every record in the "
                    f"tier is older (strategy 'error'; startingOffsetsByTimestampStrategy="
                    f"latest reads nothing instead)")
            return None
        if request.start < 0:
            return request
        earliest = planner.earliest
        if request.start < earliest and planner.has_data:
            # The offsets of this read that are gone (a stream's batch ending below the
            # earliest names only its own, so each lost offset is reported once).
            last = earliest if request.end == LATEST or request.end <= request.start \
                else min(request.end, earliest)
            message = (f"{name}: starting offset {request.start} is below the earliest offset "
                       f"in the tier, {earliest}: offsets {request.start} to {last - 1} "
                       f"were deleted (retention or DeleteRecords)")
            if self.fail_on_data_loss:
                raise OffsetOutOfRangeError(
                    f"{message}; set fail_on_data_loss=False (Spark: failOnDataLoss=false) "
                    f"to read from {earliest}")
            log.warning("%s; reading from %d (fail_on_data_loss is off)", message, earliest)
            return replace(request, start=earliest)
        latest = planner.latest(request.isolation_level)
        end = latest if request.end == LATEST else min(request.end, latest)
        if request.start > end:
            raise OffsetOutOfRangeError(
                f"{name}: starting offset {request.start} is past the end of the read, {end} "
                f"(the tier holds offsets {earliest} to {planner.tier_end - 1}; "
                f"{request.isolation_level} reads up to {latest})")
        return request

    def _tip(self, topic: str, partition: int, topic_id: str | None) -> TopicIdPartition | None:
        return topic_partitions(self._tier, topic, topic_id).get(partition)

    def _chain(self, tip: TopicIdPartition) -> list[ChainLink]:
        return segment_chain(self._tier, tip, verify=self.verify_manifest,
                             jobs=getattr(self._pinned, "jobs", None))

    def _planner(self, tip: TopicIdPartition, batch_rows: int) -> PartitionPlanner:
        tail = published_tail(self._tier, tip)  # before the chain (see published_tail)
        return PartitionPlanner(
            self._tier, self.url, self.storage_options, tip, self._chain(tip),
            split_bytes=self.split_bytes, batch_rows=batch_rows, verify_crc=self.verify_crc,
            tail=tail)


def _project(batches: Iterator[pa.RecordBatch], out: pa.Schema) -> Iterator[pa.RecordBatch]:
    """``batches`` with the columns of ``out``, in its order."""
    for batch in batches:
        yield batch if batch.schema.names == out.names else batch.select(out.names)
