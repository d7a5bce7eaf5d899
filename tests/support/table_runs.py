"""Test helper: a compaction's run file made from a partition's current files, as the design
has it (row groups 1:1 with the inputs', never spanning two links; the footer's
``tierlog.version="2"``, first/last offsets, records and ``tierlog.links``), published to the
tier and committed in one overwrite snapshot that removes the inputs and keeps the coverage
(COMPACTION.md §0). Stands in for ``tierlog.remote.table.compact`` until that lands."""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from pathlib import Path

import pyarrow.parquet as pq

from tierlog.remote.api import TopicIdPartition
from tierlog.remote.table.commit import CurrentFile, TableCommitter, current_files
from tierlog.remote.table.convert import (
    KV_FIRST_OFFSET,
    KV_LAST_OFFSET,
    KV_RECORDS,
    KV_VERSION,
    data_file,
)
from tierlog.remote.table.coverage import Coverage
from tierlog.remote.table.naming import DataFileName
from tierlog.remote.table.run_links import KV_LINKS, RUN_FORMAT_VERSION, RunLink, encode_links
from tierlog.remote.table.schema import ARROW_SCHEMA
from tierlog.remote.tier.layout import table_key
from tierlog.remote.tier.object_store import RemoteTier


def tier_path(tier: RemoteTier, tip: TopicIdPartition, location: str) -> str:
    """The tier path of a table data file's location."""
    return tier.path(table_key(tip.topic, tip.topic_id), DataFileName.parse(location).key)


def merge(tier: RemoteTier, committer: TableCommitter, tip: TopicIdPartition,
          first: int | None = None, last: int | None = None, *,
          tamper: Callable[[dict[str, str]], dict[str, str]] | None = None) -> CurrentFile:
    """Merge the partition's current link files wholly within ``[first, last]`` (default:
    all) into one run file and commit it in their place; the run's CurrentFile. ``tamper``
    changes the footer's key-value metadata before it is written (a damaged run)."""
    table = committer.catalog.load_table(committer.identifier)
    inputs = [f for f in current_files(table, tip.partition) if not f.is_run
              and (first is None or f.first_offset >= first)
              and (last is None or f.last_offset <= last)]
    assert len(inputs) >= 2, f"nothing to merge: {inputs}"
    links: list[RunLink] = []
    groups = records = 0
    name = DataFileName.new_run(tip.partition, inputs[0].first_offset, inputs[-1].last_offset,
                                len(inputs))
    location = f"{table.location().rstrip('/')}/{name.key}"
    with tempfile.TemporaryDirectory() as tmp:
        local = Path(tmp) / name.name
        footers: list[pq.FileMetaData] = []
        with pq.ParquetWriter(local, ARROW_SCHEMA, compression="zstd", write_page_index=True,
                              store_schema=False, metadata_collector=footers) as writer:
            for f in inputs:
                with tier.fs.open(tier_path(tier, tip, f.data_file.file_path), "rb") as stream:
                    source = pq.ParquetFile(stream)
                    rows = 0
                    for g in range(source.num_row_groups):
                        group = source.read_row_group(g).cast(ARROW_SCHEMA)
                        writer.write_table(group, row_group_size=max(1, group.num_rows))
                        rows += group.num_rows
                segment = DataFileName.parse(f.data_file.file_path).segment_id
                assert segment is not None
                links.append(RunLink(segment, f.first_offset, f.last_offset, rows, groups))
                groups += source.num_row_groups
                records += rows
            kv = {KV_VERSION: RUN_FORMAT_VERSION, KV_FIRST_OFFSET: str(name.first_offset),
                  KV_LAST_OFFSET: str(name.last_offset), KV_RECORDS: str(records),
                  KV_LINKS: encode_links(links)}
            writer.add_key_value_metadata(kv if tamper is None else tamper(kv))
        size = local.stat().st_size
        tier.put_file(local, tier.path(table_key(tip.topic, tip.topic_id), name.key))
    run = data_file(table, location, footers[0], size, tip.partition)
    coverage = Coverage.of_snapshot(table.current_snapshot(), "t")
    tx = table.transaction()
    with tx.update_snapshot(snapshot_properties=coverage.summary()).overwrite() as producer:
        for f in inputs:
            producer.delete_data_file(f.data_file)
        producer.append_data_file(run)
    tx.commit_transaction()
    return CurrentFile(tip.partition, name.first_offset, name.last_offset, run, len(inputs),
                       True)


__all__ = ["merge", "tier_path"]
