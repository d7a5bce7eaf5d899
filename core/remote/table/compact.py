"""Compacting a topic's table: consecutive small data files of one partition (a file per
segment, or earlier runs) merged into one run file and committed in their place
(``TableCommitter.compact``: one overwrite snapshot, coverage and rows unchanged), so a query
opens fewer files.

``plan_runs`` picks the runs from the current files' metadata alone; ``merge_run`` streams the
inputs one row group at a time into a run file written with the conversion's own Parquet
settings, each input row group one output row group (so a row group never spans two links),
its links listed in the footer (``tierlog.links``); ``compact_partition`` plans, merges and
commits a partition's runs (the tiering run's table step and ``compact_table`` share it);
``compact_table`` (``tierlog table compact``) does every partition of a topic. A run whose
inputs changed before its commit (retention, a cut, a repair, another compaction) is stale:
counted and left as an orphan for the sweep; the next compaction plans again.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import pairwise
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from pyiceberg.catalog import Catalog
from pyiceberg.table import Table

from tierlog.errors import (
    ConfigError,
    CorruptRemoteMetadataError,
    TableChainError,
    TableCompactionStaleError,
    UnknownTopicOrPartitionError,
)
from tierlog.remote.api import TopicIdPartition
from tierlog.remote.table.build import Call, direct_call, topic_in_tier
from tierlog.remote.table.catalogs import open_topic_table, writer_catalog
from tierlog.remote.table.commit import (
    CurrentFile,
    RunFile,
    TableCommitter,
    current_files,
    offset_bound,
)
from tierlog.remote.table.convert import (
    KV_FIRST_OFFSET,
    KV_LAST_OFFSET,
    KV_RECORDS,
    KV_VERSION,
    data_file,
    parquet_writer,
    table_place,
)
from tierlog.remote.table.coverage import Coverage
from tierlog.remote.table.naming import MAX_RUN_LINKS, DataFileName
from tierlog.remote.table.run_links import (
    KV_LINKS,
    RUN_FORMAT_VERSION,
    RunLink,
    decode_links,
    encode_links,
)
from tierlog.remote.table.schema import ARROW_SCHEMA, table_identifier
from tierlog.remote.tier.object_store import RemoteTier, translate_errors
from tierlog.remote.tier.topics import has_table

log = logging.getLogger(__name__)

#: ``remote.log.table.compaction.target.bytes``' default: the size a run file grows to.
DEFAULT_TARGET_BYTES = 536_870_912
#: ``remote.log.table.compaction.max.links``' default: the most links one run file merges.
DEFAULT_MAX_LINKS = 16
#: Iceberg's table property for the size of a data file; wins over the topic's target.
TARGET_PROPERTY = "write.target-file-size-bytes"
#: A file below this fraction of the target is small: a run may take it.
SMALL_FRACTION = 0.75
#: The most rows of one output row group (Parquet's writer splits a larger write itself; the
#: merge splits first, so it knows each link's first row group).
_MAX_GROUP_ROWS = 1 << 20


@dataclass(frozen=True, slots=True)
class CompactionProgress:
    """Where a ``compact_table`` is, after each run (merged, or found stale)."""

    tip: TopicIdPartition
    runs_done: int
    runs_total: int
    bytes_done: int
    """Bytes of the input files of the runs done."""
    bytes_total: int


@dataclass(slots=True)
class CompactionReport:
    """What a compaction did (or, ``dry_run``, would do)."""

    table: str
    """The table's name (``tierlog.<topic>-<topicId>``)."""
    runs: int = 0
    """Run files committed."""
    files_removed: int = 0
    """Files the runs replaced."""
    stale: int = 0
    """Runs merged but not committed: an input was replaced meanwhile (the run file is an
    orphan for the sweep)."""
    bytes_read: int = 0
    """Bytes of the files merged (committed runs')."""
    bytes_written: int = 0
    """Bytes of the run files committed."""
    planned: list[tuple[int, int, int, int]] = field(default_factory=list)
    """``(partition, first_offset, last_offset, files)`` of each run planned (``dry_run``)."""


def target_bytes_of(table: Table, target_bytes: int | None) -> int:
    """``target_bytes`` when given, else the table's ``write.target-file-size-bytes`` when
    set, else DEFAULT_TARGET_BYTES; ConfigError naming the property when it is not a positive
    number."""
    if target_bytes is not None:
        return target_bytes
    value = table.properties.get(TARGET_PROPERTY)
    if value is None:
        return DEFAULT_TARGET_BYTES
    try:
        parsed = int(value)
    except ValueError:
        parsed = 0
    if parsed < 1:
        raise ConfigError(TARGET_PROPERTY, f"table {'.'.join(table.name())}: {value!r} is not "
                                           f"a positive number of bytes")
    return parsed


def plan_runs(files: Sequence[CurrentFile], *, start: int | None, target_bytes: int,
              max_links: int) -> list[list[CurrentFile]]:
    """The runs to merge among ``files`` (one partition's current files, in offset order),
    from their metadata alone: greedy groups of consecutive small files (each under
    SMALL_FRACTION of ``target_bytes``), a group's bytes at most ``target_bytes`` and its links
    at most ``max_links``; groups of two files or more. A big file breaks a group, and so does
    a file holding rows below ``start`` (the partition's start: a straddler retention left,
    whose rows below it must not be copied)."""
    if target_bytes < 1 or not 2 <= max_links <= MAX_RUN_LINKS:
        raise ValueError(f"a compaction needs a positive target and 2 to {MAX_RUN_LINKS} links "
                         f"a run, got {target_bytes} bytes and {max_links} links")
    runs: list[list[CurrentFile]] = []
    group: list[CurrentFile] = []

    def close() -> None:
        if len(group) >= 2:
            runs.append(list(group))
        group.clear()

    for f in files:
        size = f.data_file.file_size_in_bytes
        lower = offset_bound(f.data_file, lower=True)
        if size >= SMALL_FRACTION * target_bytes \
                or (start is not None and lower is not None and lower < start):
            close()
            continue
        if group and (f.partition != group[-1].partition
                      or f.first_offset != group[-1].last_offset + 1
                      or sum(g.data_file.file_size_in_bytes for g in group) + size > target_bytes
                      or sum(g.links for g in group) + f.links > max_links):
            close()
        group.append(f)
    close()
    return runs


def merge_run(tier: RemoteTier, table: Table, tip: TopicIdPartition,
              files: Sequence[CurrentFile]) -> RunFile:
    """Merge ``files`` (consecutive current files of ``tip``'s ``table``, in offset order) into
    one run file, published to the tier (not committed): their rows in order, each input row
    group one output row group (split at 2**20 rows), the footer listing each link
    (``tierlog.links``: a link file's from its name, a run's from its own footer, row groups
    shifted). Streams one row group at a time; one GET per input, one PUT. TableChainError when
    the files are not consecutive links of one partition; CorruptRemoteMetadataError naming an
    input run file whose link list does not match its name."""
    if not files:
        raise ValueError(f"{tip}: a run merges at least one file")
    spans = [(f.first_offset, f.last_offset) for f in files]
    if any(f.partition != tip.partition for f in files) \
            or any(b.first_offset != a.last_offset + 1 for a, b in pairwise(files)):
        raise TableChainError(f"partition {tip.partition}: files {spans} of partitions "
                              f"{sorted({f.partition for f in files})} are not consecutive "
                              f"links of one partition")
    key, location = table_place(table, tip)
    name = DataFileName.new_run(tip.partition, files[0].first_offset, files[-1].last_offset,
                                sum(f.links for f in files))
    path = f"{location}/{name.key}"
    fd, local = tempfile.mkstemp(prefix="tierlog-run-", suffix=".parquet")
    os.close(fd)
    try:
        footers: list[pq.FileMetaData] = []
        links: list[RunLink] = []
        groups = records = 0
        with parquet_writer(local, footers) as writer:
            for f in files:
                source = tier.path(key, DataFileName.parse(f.data_file.file_path).key)
                with _parquet_file(tier, source) as parquet:
                    links += _links_of(f, parquet, groups)
                    for table_rows in _row_groups(parquet):
                        writer.write_table(table_rows, row_group_size=table_rows.num_rows)
                        groups += 1
                        records += table_rows.num_rows
            writer.add_key_value_metadata({
                KV_VERSION: RUN_FORMAT_VERSION, KV_FIRST_OFFSET: str(name.first_offset),
                KV_LAST_OFFSET: str(name.last_offset), KV_RECORDS: str(records),
                KV_LINKS: encode_links(links)})
        footer = footers[0]
        _check_groups(path, footer, links)
        size = os.path.getsize(local)
        tier.put_file(local, tier.path(key, name.key))
    finally:
        with contextlib.suppress(OSError):
            os.unlink(local)
    return RunFile(tip.partition, name.first_offset, name.last_offset,
                   data_file(table, path, footer, size, tip.partition),
                   tuple(f.data_file.file_path for f in files))


@contextlib.contextmanager
def _parquet_file(tier: RemoteTier, path: str) -> Iterator[pq.ParquetFile]:
    """The Parquet file at ``path`` in the tier, streamed (RemoteResourceNotFoundError when it
    does not exist)."""
    with translate_errors("read", path):
        tier.stats.record("gets")
        stream = tier.fs.open(path, "rb")
    with stream:
        yield pq.ParquetFile(stream)


def _links_of(f: CurrentFile, parquet: pq.ParquetFile, first_group: int) -> list[RunLink]:
    """The links of the input ``f``, their row groups counted from ``first_group`` (where its
    first row group lands in the run)."""
    rows = parquet.metadata.num_rows
    if not f.is_run:
        segment = DataFileName.parse(f.data_file.file_path).segment_id
        assert segment is not None  # a link file's name holds its segment
        return [RunLink(segment, f.first_offset, f.last_offset, rows, first_group)]
    source = f.data_file.file_path
    kv = parquet.metadata.metadata or {}
    own = decode_links(kv.get(KV_LINKS.encode()), source)
    if (own[0].first_offset, own[-1].last_offset, len(own)) != (f.first_offset, f.last_offset,
                                                                f.links) \
            or sum(k.records for k in own) != rows:
        raise CorruptRemoteMetadataError(
            f"{source}: its {KV_LINKS} ({len(own)} links of offsets {own[0].first_offset}.."
            f"{own[-1].last_offset}, {sum(k.records for k in own)} rows) is not what its name "
            f"and {rows} rows say")
    # Re-split row groups: each input group of n rows becomes ceil(n / _MAX_GROUP_ROWS).
    shifted = [_groups_before(parquet, k.first_row_group) for k in own]
    return [RunLink(k.segment_id, k.first_offset, k.last_offset, k.records, first_group + s)
            for k, s in zip(own, shifted, strict=True)]


def _groups_before(parquet: pq.ParquetFile, index: int) -> int:
    """How many output row groups the input's row groups before ``index`` become."""
    return sum(_pieces(parquet.metadata.row_group(g).num_rows) for g in range(index))


def _pieces(rows: int) -> int:
    return -(-rows // _MAX_GROUP_ROWS)


def _row_groups(parquet: pq.ParquetFile) -> Iterator[pa.Table]:
    """The input's rows, one row group (at most _MAX_GROUP_ROWS rows) at a time; a row group
    of no rows yields nothing."""
    for g in range(parquet.num_row_groups):
        rows = parquet.read_row_group(g).cast(ARROW_SCHEMA)
        for at in range(0, rows.num_rows, _MAX_GROUP_ROWS):
            yield rows.slice(at, _MAX_GROUP_ROWS)


def _check_groups(path: str, footer: pq.FileMetaData, links: Sequence[RunLink]) -> None:
    """TableChainError (a bug, nothing published) unless each link's rows are exactly its row
    groups' in the written footer."""
    ends = [k.first_row_group for k in links[1:]] + [footer.num_row_groups]
    for k, end in zip(links, ends, strict=True):
        rows = sum(footer.row_group(g).num_rows for g in range(k.first_row_group, end))
        if rows != k.records:
            raise TableChainError(f"{path}: link [{k.first_offset}, {k.last_offset}] has "
                                  f"{k.records} rows but its row groups {rows}")


def compact_partition(tier: RemoteTier, committer: TableCommitter, tip: TopicIdPartition, *,
                      target_bytes: int | None = None, max_links: int = DEFAULT_MAX_LINKS,
                      max_runs: int | None = None, call: Call = direct_call,
                      report: CompactionReport | None = None, dry_run: bool = False,
                      on_run: Callable[[int], None] | None = None) -> CompactionReport:
    """Plan ``tip``'s runs on the table's current snapshot (``plan_runs``; ``target_bytes``
    None: ``target_bytes_of`` the table), then merge and commit each (at most ``max_runs``),
    adding to ``report`` (a new one when None). ``dry_run`` only records the runs planned.
    A stale run (an input replaced meanwhile) is counted and its file left for the sweep,
    never raised. ``call`` bounds each request against the tier (the tiering run's);
    ``on_run(bytes of its inputs)`` after each run."""
    name = ".".join(committer.identifier)
    report = report if report is not None else CompactionReport(name)
    table = call(f"{tip}: load the table {name}",
                 lambda: committer.catalog.load_table(committer.identifier))
    coverage = Coverage.of_snapshot(table.current_snapshot(), name)
    runs = plan_runs(current_files(table, tip.partition), start=coverage.start.get(tip.partition),
                     target_bytes=target_bytes_of(table, target_bytes), max_links=max_links)
    for group in runs if max_runs is None else runs[:max(0, max_runs)]:
        first, last = group[0].first_offset, group[-1].last_offset
        read = sum(f.data_file.file_size_in_bytes for f in group)
        if dry_run:
            report.planned.append((tip.partition, first, last, len(group)))
            continue
        started = time.monotonic()
        run = call(f"{tip}: merge the table files of offsets {first}-{last}",
                   functools.partial(merge_run, tier, table, tip, group))
        try:
            committer.compact(run)
        except TableCompactionStaleError as e:
            report.stale += 1
            log.warning("%s: %s", tip, e)
        else:
            report.runs += 1
            report.files_removed += len(group)
            report.bytes_read += read
            report.bytes_written += run.data_file.file_size_in_bytes
            log.info("%s: merged %d files of offsets %d-%d (%d bytes) into %s (%d bytes) in "
                     "%.2f s", tip, len(group), first, last, read, run.data_file.file_path,
                     run.data_file.file_size_in_bytes, time.monotonic() - started)
        if on_run is not None:
            on_run(read)
    return report


def compact_table(tier: RemoteTier | str, topic: str, *, topic_id: str | None = None,
                  storage_options: Mapping[str, Any] | None = None,
                  catalog: Catalog | None = None, partitions: Sequence[int] | None = None,
                  target_bytes: int | None = None, max_links: int = DEFAULT_MAX_LINKS,
                  dry_run: bool = False,
                  progress: Callable[[CompactionProgress], None] | None = None
                  ) -> CompactionReport:
    """Compact every partition (or ``partitions``) of ``topic``'s table in ``tier`` (a
    RemoteTier, or its URL with its ``storage_options``; the incarnation ``topic_id``, by
    default the newest) through ``catalog`` (default: the tier's own; TableCatalogRequiredError
    when a user's catalog owns the table), with ``compact_partition``; ``target_bytes`` None:
    the table's ``write.target-file-size-bytes`` when set, else DEFAULT_TARGET_BYTES.
    ``progress`` after each run. UnknownTopicOrPartitionError when the tier holds no partition
    of the topic (or not one of ``partitions``), or no table of it. Safe beside running
    brokers."""
    tier, tips = topic_in_tier(tier, topic, topic_id, storage_options, partitions)
    topic_id = tips[0].topic_id
    if not has_table(tier, topic, topic_id):  # nothing to compact; never create one here
        raise UnknownTopicOrPartitionError(f"{topic} (topic id {topic_id}) has no table in the "
                                           f"tier at {tier.root}")
    catalog = catalog if catalog is not None else writer_catalog(tier, topic, topic_id)
    table = open_topic_table(tier, catalog, topic, topic_id)
    committer = TableCommitter(catalog, table_identifier(topic, topic_id))
    report = CompactionReport(".".join(table.name()))
    target = target_bytes_of(table, target_bytes)
    coverage = Coverage.of_snapshot(table.current_snapshot(), report.table)
    planned = {tip.partition: plan_runs(current_files(table, tip.partition),
                                        start=coverage.start.get(tip.partition),
                                        target_bytes=target, max_links=max_links)
               for tip in tips}
    runs_total = sum(len(runs) for runs in planned.values())
    bytes_total = sum(f.data_file.file_size_in_bytes
                      for runs in planned.values() for run in runs for f in run)
    done = [0, 0]
    for tip in tips:
        def on_run(read: int, tip: TopicIdPartition = tip) -> None:
            done[0] += 1
            done[1] += read
            if progress is not None:
                progress(CompactionProgress(tip, done[0], max(runs_total, done[0]), done[1],
                                            max(bytes_total, done[1])))
        compact_partition(tier, committer, tip, target_bytes=target, max_links=max_links,
                          report=report, dry_run=dry_run, on_run=on_run)
    log.info("%s: %d runs merged %d files (%d bytes -> %d bytes); %d stale%s", report.table,
             report.runs, report.files_removed, report.bytes_read, report.bytes_written,
             report.stale, f"; dry run: {len(report.planned)} planned" if dry_run else "")
    return report


__all__ = ["DEFAULT_MAX_LINKS", "DEFAULT_TARGET_BYTES", "TARGET_PROPERTY", "CompactionProgress",
           "CompactionReport", "compact_partition", "compact_table", "merge_run", "plan_runs",
           "target_bytes_of"]
