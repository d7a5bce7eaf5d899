"""Converting one link of a partition's committed chain (a segment) into its topic table's data
file: the link's records as rows with their ``aborted`` flag, written to a local Parquet file,
published with the tier's own put, and its Iceberg ``DataFile`` built from the writer's footer.

Rows are the data records of the link's offsets ``[first, last]``: control records are not
rows, and records below the log start offset are left out. ``aborted`` is Kafka's
read_committed rule applied batch by batch (``ReadSplit.mark_aborted``: the link is read as the
reader reads a split, so both judge the same bytes the same way), so a table row that is not
aborted is one a read_committed reader returns. A link with no data rows still gets a file
(of no rows): each committed link has exactly one. Nothing here commits; the file is an orphan
until ``tierlog.remote.table.commit`` adds its DataFile to a snapshot.
"""

from __future__ import annotations

import contextlib
import logging
import os
import tempfile
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.parquet as pq
from pyiceberg.io.pyarrow import (
    compute_statistics_plan,
    data_file_statistics_from_parquet_metadata,
    parquet_path_to_id_mapping,
)
from pyiceberg.manifest import DataFile, DataFileContent, FileFormat
from pyiceberg.table import Table
from pyiceberg.typedef import Record

from tierlog.errors import ConfigError
from tierlog.remote import TopicIdPartition
from tierlog.remote.read.readable import ChainLink
from tierlog.remote.read.split import READ_UNCOMMITTED, ReadSplit, read_split
from tierlog.remote.read.transactions import AbortedRange
from tierlog.remote.table.naming import DataFileName
from tierlog.remote.table.schema import ARROW_SCHEMA, PARTITION_SPEC
from tierlog.remote.tier.layout import SEGMENT_SUFFIX, segment_object_key, table_key
from tierlog.remote.tier.object_store import RemoteTier

log = logging.getLogger(__name__)

#: The uncompressed bytes of one row group: a 1 GiB segment becomes about eight Spark tasks,
#: and each group's offset statistics stay tight (rows are in offset order).
ROW_GROUP_BYTES = 128 << 20
#: The version of the files' layout, in their key-value metadata.
FILE_FORMAT_VERSION = "1"
#: The Parquet key-value metadata every data file carries (scrub checks a file against its link).
KV_VERSION = "tierlog.version"
KV_SEGMENT_ID = "tierlog.segmentId"
KV_FIRST_OFFSET = "tierlog.firstOffset"
KV_LAST_OFFSET = "tierlog.lastOffset"
KV_RECORDS = "tierlog.records"


@dataclass(frozen=True, slots=True)
class TableFile:
    """A link's published data file, not yet committed."""

    partition: int
    first_offset: int
    """The link's first offset: the file covers ``[first_offset, last_offset]`` of the chain
    (rows below the log start offset are not in it)."""
    last_offset: int
    segment_id: str
    path: str
    """The file's location, as the table names it."""
    records: int
    """Rows in the file."""
    data_file: DataFile


def convert_link(tier: RemoteTier, table: Table, tip: TopicIdPartition, link: ChainLink, *,
                 aborted_txns: Iterable[AbortedRange], log_start_offset: int = 0,
                 row_group_bytes: int = ROW_GROUP_BYTES) -> TableFile:
    """Write and publish the data file of ``link`` of ``tip``'s chain in ``tier``, for
    ``table`` (the topic's table, which lives at its place in the tier).

    ``aborted_txns`` are ``(producer_id, first_offset, last_offset)`` of the aborted
    transactions touching the link (``tierlog.remote.read.transactions.aborted_txns``): the
    link must lie below the tier's last stable offset, so that every outcome is known. Reads
    the segment's ``.log`` object with one GET, checking its CRCs and offsets as a reader does
    (CorruptRecordError names the object and batch); a failed write or a short upload
    publishes nothing. Not thread-safe per link; links convert in parallel.
    """
    segment = link.segment
    name = DataFileName.new(tip.partition, link.first_offset, link.last_offset,
                            segment.segment_id)
    key, location = table_place(table, tip)
    size = segment.segment_size_in_bytes
    split = ReadSplit(
        url=str(tier.fs.unstrip_protocol(tier.root)), storage_options={}, topic=tip.topic,
        partition=tip.partition, log_path=tier.path(segment_object_key(segment, SEGMENT_SUFFIX)),
        byte_start=0, byte_end=size, start_offset=max(link.first_offset, log_start_offset),
        end_offset=link.last_offset + 1, isolation_level=READ_UNCOMMITTED,
        aborted=tuple(aborted_txns), segment_first_offset=segment.start_offset,
        segment_last_offset=segment.end_offset, fetch_end=size, object_size=size,
        mark_aborted=True)
    metadata = {KV_VERSION: FILE_FORMAT_VERSION, KV_SEGMENT_ID: segment.segment_id,
                KV_FIRST_OFFSET: str(link.first_offset), KV_LAST_OFFSET: str(link.last_offset)}
    fd, local = tempfile.mkstemp(prefix="tierlog-table-", suffix=".parquet")
    os.close(fd)
    try:
        footer, records = _write(local, read_split(split, tier=tier), metadata, row_group_bytes)
        file_size = os.path.getsize(local)
        tier.put_file(local, tier.path(key, name.key))
    finally:
        with contextlib.suppress(OSError):
            os.unlink(local)
    path = f"{location}/{name.key}"
    log.debug("%s: offsets %d-%d of segment %s -> %s (%d rows, %d bytes)", tip,
              link.first_offset, link.last_offset, segment.segment_id, path, records,
              file_size)
    return TableFile(tip.partition, link.first_offset, link.last_offset, segment.segment_id,
                     path, records, data_file(table, path, footer, file_size, tip.partition))


def table_place(table: Table, tip: TopicIdPartition) -> tuple[str, str]:
    """``(key, location)``: the tier key of ``tip``'s topic table and the table's location
    (its data files' paths start with it); ConfigError when the table does not live at its
    place in the tier, where its data files are published."""
    key = table_key(tip.topic, tip.topic_id)
    location = table.location().rstrip("/")
    if not location.endswith(f"/{key}"):
        raise ConfigError("location", f"table {'.'.join(table.name())} lives at {location}, "
                                      f"not at its place {key} in the tier")
    return key, location


def _write(local: str, batches: Iterable[pa.RecordBatch], metadata: dict[str, str],
           row_group_bytes: int) -> tuple[pq.FileMetaData, int]:
    """Write ``batches`` to the Parquet file ``local`` in row groups of about
    ``row_group_bytes`` uncompressed; ``(footer, rows)``."""
    footers: list[pq.FileMetaData] = []
    rows = 0
    pending: list[pa.RecordBatch] = []
    pending_bytes = 0
    with parquet_writer(local, footers) as writer:
        for batch in batches:
            pending.append(batch)
            pending_bytes += batch.nbytes
            if pending_bytes >= row_group_bytes:
                rows += _write_group(writer, pending)
                pending, pending_bytes = [], 0
        if pending:
            rows += _write_group(writer, pending)
        writer.add_key_value_metadata({**metadata, KV_RECORDS: str(rows)})
    return footers[0], rows


@contextlib.contextmanager
def parquet_writer(local: str, footers: list[pq.FileMetaData]) -> Iterator[pq.ParquetWriter]:
    """A writer of a table data file (the table's schema, zstd, a page index, no Arrow schema
    in the footer) at the local path ``local``; ``footers`` gets its footer once closed. The
    one home of the data files' Parquet settings: a link's conversion and a run's merge."""
    with pq.ParquetWriter(local, ARROW_SCHEMA, compression="zstd", write_page_index=True,
                          store_schema=False, metadata_collector=footers) as writer:
        yield writer


def _write_group(writer: pq.ParquetWriter, batches: list[pa.RecordBatch]) -> int:
    """One row group of ``batches`` (a row group never spans two writes)."""
    group = pa.Table.from_batches(batches).cast(ARROW_SCHEMA)
    rows: int = group.num_rows
    writer.write_table(group, row_group_size=max(1, rows))
    return rows


def data_file(table: Table, path: str, footer: pq.FileMetaData, size: int,
              partition: int) -> DataFile:
    """The Iceberg DataFile of a data file written for ``table``, from the writer's own footer
    (nothing is read back): row count, sizes and per-column statistics (offset and timestamp
    bounds among them) as the table's properties ask."""
    metadata = table.metadata
    schema = metadata.schema()
    if metadata.spec().fields != PARTITION_SPEC.fields:
        raise ConfigError("partition-spec", f"table {'.'.join(table.name())} is partitioned "
                                            f"by {metadata.spec()}, not identity(partition)")
    stats = data_file_statistics_from_parquet_metadata(
        parquet_metadata=footer,
        stats_columns=compute_statistics_plan(schema, metadata.properties),
        parquet_column_mapping=parquet_path_to_id_mapping(schema))
    # The partition value is the file's partition, not inferred from the statistics: a file of
    # no rows has none.
    return DataFile.from_args(
        content=DataFileContent.DATA, file_path=path, file_format=FileFormat.PARQUET,
        partition=Record(partition), file_size_in_bytes=size, sort_order_id=None,
        spec_id=metadata.default_spec_id, equality_ids=None, key_metadata=None,
        **stats.to_serialized_dict())


__all__ = ["ROW_GROUP_BYTES", "TableFile", "convert_link", "data_file", "parquet_writer",
           "table_place"]
