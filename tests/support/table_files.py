"""Links as table files for the committer's tests: a Parquet file of a toy topic table's rows
(partition, offset), published to the tier under its link's name, with its DataFile built from
the writer's footer, as the conversion of a segment makes them (no re-read)."""

from __future__ import annotations

import tempfile
import uuid
from collections.abc import Sequence
from pathlib import Path

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

from support.table_commits import SCHEMA
from tierlog.remote.table.commit import ReadyFile
from tierlog.remote.tier.object_store import RemoteTier


def link_file_name(partition: int, first: int, last: int, segment_id: str) -> str:
    return (f"data/p{partition}/{first:020d}-{last:020d}-{segment_id}-"
            f"{uuid.uuid4().hex[:8]}.parquet")


def write_link(tier: RemoteTier, table: Table, partition: int, first: int, last: int, *,
               offsets: Sequence[int] | None = None, segment_id: str = "seg") -> ReadyFile:
    """The link ``[first, last]`` of ``partition`` as a published file: rows at ``offsets``
    (all of the link by default; ``[]`` for a link with no data rows)."""
    offsets = list(range(first, last + 1)) if offsets is None else list(offsets)
    rows = pa.table({"partition": pa.array([partition] * len(offsets), pa.int32()),
                     "offset": pa.array(offsets, pa.int64())}, schema=SCHEMA.as_arrow())
    location = f"{table.location()}/{link_file_name(partition, first, last, segment_id)}"
    with tempfile.TemporaryDirectory() as tmp:
        local = Path(tmp) / "link.parquet"
        footers: list[pq.FileMetaData] = []
        pq.write_table(rows, local, store_schema=False, metadata_collector=footers)
        tier.put_file(local, str(tier.fs._strip_protocol(location)))
        size = local.stat().st_size
    return ReadyFile(partition, first, last,
                     data_file(table, location, partition, footers[0], size))


def data_file(table: Table, location: str, partition: int, footer: pq.FileMetaData,
              size: int) -> DataFile:
    """The DataFile of a written file, from its footer (the partition given: a file of no
    rows has no statistics to infer it from)."""
    metadata = table.metadata
    stats = data_file_statistics_from_parquet_metadata(
        parquet_metadata=footer,
        stats_columns=compute_statistics_plan(metadata.schema(), metadata.properties),
        parquet_column_mapping=parquet_path_to_id_mapping(metadata.schema()))
    return DataFile.from_args(
        content=DataFileContent.DATA, file_path=location, file_format=FileFormat.PARQUET,
        partition=Record(partition),
        file_size_in_bytes=size, sort_order_id=None, spec_id=metadata.default_spec_id,
        equality_ids=None, key_metadata=None, **stats.to_serialized_dict())
