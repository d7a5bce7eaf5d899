"""The table part of a RemoteTopicReader read (issue 23): the offsets a topic's Iceberg table
covers are read from its Parquet files with ``pyarrow.dataset`` (columns pruned, a row filter on
partition, offsets, ``aborted`` and timestamp), the rest from the tier's segments.

Each partition's resolved ``[start, end)`` is split at the coverage of one snapshot
(``TablePlan.split``): its table part first, its tail (today's ReadSplits) last, so the rows and
their order are the segments' own. The filter stays even where whole files match: a file may
straddle the log start offset, and rows below it are not read. A table that cannot be opened,
planned or read (missing objects, damage) falls back to the segments with one warning, from the
first offset not yet returned, so the rows never differ; a topic with no table reads the
segments as before. A read starting or ending at a timestamp reads the segments: Kafka's
timestamp search counts control records, which are not rows of the table.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
import pyarrow.fs as pafs
from fsspec.implementations.local import LocalFileSystem
from pyiceberg.exceptions import NoSuchTableError
from pyiceberg.exceptions import ValidationError as IcebergValidationError

from tierlog.errors import TierlogError
from tierlog.reader._planner import PartitionPlanner, PartitionRequest
from tierlog.records.arrow.schema import TIMESTAMP_TYPE
from tierlog.remote.read.split import READ_COMMITTED
from tierlog.remote.table.catalogs import load_topic_table
from tierlog.remote.table.naming import DataFileName
from tierlog.remote.table.plan import TablePlan
from tierlog.remote.table.schema import (
    ABORTED,
    ARROW_SCHEMA,
    OFFSET,
    PARTITION,
    TIMESTAMP,
    table_identifier,
)
from tierlog.remote.tier.layout import table_key
from tierlog.remote.tier.object_store import RemoteTier

__all__ = ["RowFilter", "TableRead"]

log = logging.getLogger(__name__)

#: What a table that cannot be opened, planned or read raises (missing or damaged metadata,
#: manifests or data files): the read goes on from the segments.
FALLBACK_ERRORS: tuple[type[BaseException], ...] = (
    TierlogError, OSError, ValueError, KeyError, EOFError, pa.ArrowException,
    IcebergValidationError)
#: Reads the segments' records of a request (planned by the partition's planner), projected.
SegmentReader = Callable[[PartitionPlanner, PartitionRequest], Iterator[pa.RecordBatch]]

_FORMAT = ds.ParquetFileFormat()


class TableRead:
    """One read of one topic through its table (``plan``: one snapshot of it), or through its
    segments alone (``plan`` None: no table, or one that failed). Not thread-safe: one read's
    partitions run one after another."""

    def __init__(self, tier: RemoteTier, topic: str, topic_id: str, plan: TablePlan | None,
                 *, batch_rows: int) -> None:
        self.tier = tier
        self.topic = topic
        self.topic_id = topic_id
        self.plan = plan
        self.batch_rows = batch_rows
        self._name = ".".join(table_identifier(topic, topic_id))
        self._fs: pafs.FileSystem | None = None

    @classmethod
    def open(cls, tier: RemoteTier, topic: str, topic_id: str, *, batch_rows: int
             ) -> TableRead:
        """The read of ``topic`` (incarnation ``topic_id``) through the current snapshot of its
        table in ``tier`` (the tier's own catalog, or a user catalog's through its pointer); a read of the segments alone when it has no
        table, and, with a warning, when the table cannot be opened or planned."""
        read = cls(tier, topic, topic_id, None, batch_rows=batch_rows)
        try:
            table = load_topic_table(tier, topic, topic_id)
            if table is None:
                raise NoSuchTableError(read._name)
            read.plan = TablePlan.of(table)
        except NoSuchTableError:
            log.debug("%s: no table; reading the segments", read._name)
        except FALLBACK_ERRORS as e:
            read._give_up(e)
        return read

    def partition(self, planner: PartitionPlanner, request: PartitionRequest,
                  columns: pa.Schema, segments: SegmentReader) -> Iterator[pa.RecordBatch]:
        """The records of ``request`` (checked by the reader) of one partition, as batches of
        ``columns``: the table part, then the tail from ``segments``."""
        bounds = planner.bounds(request) if self.plan is not None else None
        if self.plan is None or bounds is None or bounds[2] is not None \
                or bounds[3] is not None:
            yield from segments(planner, request)
            return
        split = self.plan.split(planner.tip.partition, bounds[0], bounds[1])
        reached = split.table.start
        if split.table:
            try:
                for batch in self._rows(planner.tip.partition, split.table, request, columns):
                    reached = batch.column(OFFSET)[-1].as_py() + 1
                    yield batch.select(columns.names).cast(columns)
            except FALLBACK_ERRORS as e:
                self._give_up(e)
                yield from segments(planner, _between(request, reached, split.table.stop))
        if split.tail:
            yield from segments(planner, _between(request, split.tail.start, split.tail.stop))

    def _rows(self, partition: int, offsets: range, request: PartitionRequest,
              columns: pa.Schema) -> Iterator[pa.RecordBatch]:
        """The table's rows of ``offsets`` of ``partition`` passing the request's filters, in
        offset order, with ``columns`` and the filter's; none of its files is listed or HEADed
        (their sizes come from the manifests), and row groups the filter rules out by their
        statistics are not read."""
        assert self.plan is not None
        files = self.plan.files(partition, offsets.start, offsets.stop)
        if not files:
            return
        rows = RowFilter(partition, offsets.start, offsets.stop,
                         request.isolation_level == READ_COMMITTED, request.min_timestamp)
        where = rows.expression()
        key = table_key(self.topic, self.topic_id)
        fs = self._filesystem()
        fragments = [_FORMAT.make_fragment(self.tier.path(key, DataFileName.parse(f.path).key),
                                           filesystem=fs, file_size=f.size).subset(where)
                     for f in files]
        dataset = ds.FileSystemDataset(fragments, ARROW_SCHEMA, _FORMAT, fs)
        wanted = list(dict.fromkeys([*columns.names, *rows.columns]))
        # The filter is applied here, not by the scan: a batch whose every row passes (the
        # common case) is passed on as read instead of copied.
        for batch in dataset.to_batches(columns=wanted, batch_size=self.batch_rows):
            kept = rows.apply(batch)
            if kept.num_rows:
                yield kept

    def _filesystem(self) -> pafs.FileSystem:
        """The tier's filesystem for pyarrow: its own local one for a directory, else the
        fsspec filesystem (s3fs, ...) wrapped."""
        if self._fs is None:
            fs = self.tier.fs
            self._fs = (pafs.LocalFileSystem() if isinstance(fs, LocalFileSystem)
                        else pafs.PyFileSystem(pafs.FSSpecHandler(fs)))
        return self._fs

    def _give_up(self, error: BaseException) -> None:
        """Read the rest of this read from the segments, saying once why."""
        self.plan = None
        log.warning("table %s in the tier cannot be read (%s: %s); reading the segments "
                    "instead", self._name, type(error).__name__, str(error)[:300])


@dataclass(frozen=True, slots=True)
class RowFilter:
    """The rows of a table part: ``partition``, offsets ``[start, end)``, not aborted under
    read_committed, stamped at or after ``min_timestamp`` (epoch ms) when given."""

    partition: int
    start: int
    end: int
    committed: bool
    min_timestamp: int | None = None

    @property
    def columns(self) -> tuple[str, ...]:
        """The columns it reads."""
        return (PARTITION, OFFSET, *((ABORTED,) if self.committed else ()),
                *((TIMESTAMP,) if self.min_timestamp is not None else ()))

    def expression(self) -> pc.Expression:
        """As a dataset expression (prunes row groups by their statistics)."""
        where = ((pc.field(PARTITION) == self.partition) & (pc.field(OFFSET) >= self.start)
                 & (pc.field(OFFSET) < self.end))
        if self.committed:
            where &= ~pc.field(ABORTED)
        if self.min_timestamp is not None:
            where &= pc.field(TIMESTAMP) >= self._timestamp()
        return where

    def apply(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        """``batch``'s rows that pass: ``batch`` itself when all do."""
        offsets = batch.column(OFFSET)
        mask = pc.and_(pc.equal(batch.column(PARTITION), self.partition),
                       pc.and_(pc.greater_equal(offsets, self.start), pc.less(offsets, self.end)))
        if self.committed:
            mask = pc.and_(mask, pc.invert(batch.column(ABORTED)))
        if self.min_timestamp is not None:
            mask = pc.and_(mask, pc.greater_equal(batch.column(TIMESTAMP), self._timestamp()))
        return batch if pc.all(mask).as_py() else batch.filter(mask)

    def _timestamp(self) -> pa.Scalar:
        assert self.min_timestamp is not None
        return pa.scalar(self.min_timestamp * 1000, TIMESTAMP_TYPE)


def _between(request: PartitionRequest, start: int, end: int) -> PartitionRequest:
    """``request`` narrowed to the offsets ``[start, end)`` (its row filters kept)."""
    return PartitionRequest(start=start, end=end, min_offset=request.min_offset,
                            max_offset=request.max_offset, min_timestamp=request.min_timestamp,
                            isolation_level=request.isolation_level)
