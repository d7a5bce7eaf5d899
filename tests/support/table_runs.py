"""Test helper: run files in a topic's table. :func:`merge` makes one with the compaction's own
code (``compact.merge_run``, ``TableCommitter.compact``) from a partition's current files;
:func:`tamper` swaps a run for a damaged copy (its rows and row groups kept, its footer's
key-value metadata changed), committed with the coverage kept, as a bug could leave it."""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from tierlog.remote.api import TopicIdPartition
from tierlog.remote.table.commit import CurrentFile, TableCommitter, current_files
from tierlog.remote.table.compact import merge_run
from tierlog.remote.table.convert import data_file, parquet_writer
from tierlog.remote.table.coverage import Coverage
from tierlog.remote.table.naming import DataFileName
from tierlog.remote.tier.layout import table_key
from tierlog.remote.tier.object_store import RemoteTier


def tier_path(tier: RemoteTier, tip: TopicIdPartition, location: str) -> str:
    """The tier path of a table data file's location."""
    return tier.path(table_key(tip.topic, tip.topic_id), DataFileName.parse(location).key)


def _current(committer: TableCommitter, tip: TopicIdPartition, path: str) -> CurrentFile:
    table = committer.catalog.load_table(committer.identifier)
    return next(f for f in current_files(table, tip.partition) if f.data_file.file_path == path)


def merge(tier: RemoteTier, committer: TableCommitter, tip: TopicIdPartition,
          first: int | None = None, last: int | None = None) -> CurrentFile:
    """Merge the partition's current files wholly within ``[first, last]`` (default: all)
    into one run file and commit it in their place; the run's CurrentFile."""
    table = committer.catalog.load_table(committer.identifier)
    inputs = [f for f in current_files(table, tip.partition)
              if (first is None or f.first_offset >= first)
              and (last is None or f.last_offset <= last)]
    assert len(inputs) >= 2, f"nothing to merge: {inputs}"
    run = merge_run(tier, table, tip, inputs)
    committer.compact(run)
    return _current(committer, tip, run.data_file.file_path)


def tamper(tier: RemoteTier, committer: TableCommitter, tip: TopicIdPartition,
           run: CurrentFile, change: Callable[[dict[str, str]], dict[str, str]], *,
           rows: Callable[[int, pa.Table], pa.Table] | None = None) -> CurrentFile:
    """Replace ``run`` in the table by a copy whose footer's key-value metadata is
    ``change(kv)`` and whose row group ``g`` is ``rows(g, group)`` (default: the same), under
    a new name of the same span, in one snapshot that keeps the coverage; the copy's
    CurrentFile (its DataFile from the copy's own footer)."""
    table = committer.catalog.load_table(committer.identifier)
    name = DataFileName.new_run(tip.partition, run.first_offset, run.last_offset, run.links)
    location = f"{table.location().rstrip('/')}/{name.key}"
    with tempfile.TemporaryDirectory() as tmp:
        local = Path(tmp) / name.name
        footers: list[pq.FileMetaData] = []
        with tier.fs.open(tier_path(tier, tip, run.data_file.file_path), "rb") as stream:
            source = pq.ParquetFile(stream)
            kv = {k.decode(): v.decode() for k, v in (source.metadata.metadata or {}).items()}
            with parquet_writer(str(local), footers) as writer:
                for g in range(source.num_row_groups):
                    group = source.read_row_group(g)
                    group = group if rows is None else rows(g, group)
                    writer.write_table(group, row_group_size=max(1, group.num_rows))
                writer.add_key_value_metadata(change(kv))
        size = local.stat().st_size
        tier.put_file(local, tier.path(table_key(tip.topic, tip.topic_id), name.key))
    copy = data_file(table, location, footers[0], size, tip.partition)
    coverage = Coverage.of_snapshot(table.current_snapshot(), "t")
    tx = table.transaction()
    with tx.update_snapshot(snapshot_properties=coverage.summary()).overwrite() as producer:
        producer.delete_data_file(run.data_file)
        producer.append_data_file(copy)
    tx.commit_transaction()
    return _current(committer, tip, location)


__all__ = ["merge", "tamper", "tier_path"]
