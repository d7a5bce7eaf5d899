"""``tierlog table build --spark``: ``build_table`` (tierlog.remote.table.build) with its
conversions on Spark's executors. The build plans on the driver as ever (the table's coverage,
each partition's uncovered links, the batches); each batch is one Spark job of one task per
link, which converts the link and publishes its Parquet file in the tier and returns the file's
DataFile (statistics from the writer's footer) picklably; the driver commits the batch through
``TableCommitter`` as the local build does, so resuming and exactly once are the same.

A task gets what it needs as plain values: the tier's fsspec filesystem and root (both
picklable), the link's segment metadata as its JSON dict, the aborted transactions touching it
(read on the driver, which holds the chain) and the driver's table metadata (with its
location), from which it builds a read-only table: an executor needs no catalog, so a build
in a user's catalog (REST, Glue, SQL) runs on Spark as one in the tier's own does.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from pyiceberg.catalog import Catalog
from pyiceberg.table import Table
from pyiceberg.table.metadata import TableMetadata
from pyspark.sql import SparkSession

from tierlog.remote.api import RemoteLogSegmentMetadata, TopicIdPartition
from tierlog.remote.read.readable import ChainLink
from tierlog.remote.read.transactions import AbortedRange, aborted_txns
from tierlog.remote.table.build import (
    DEFAULT_BATCH_BYTES,
    DEFAULT_BATCH_LINKS,
    BuildProgress,
    BuildReport,
    LinkJob,
    build_table,
)
from tierlog.remote.table.convert import TableFile
from tierlog.remote.tier.object_store import RemoteTier

log = logging.getLogger(__name__)

__all__ = ["build_table_on_spark", "spark_converter"]

#: What a task receives: (fs, root, put_options, (identifier, metadata, metadata location),
#: tip, segment dict, first, last, aborted, log start offset).
_Task = tuple[Any, str, dict[str, Any], tuple[tuple[str, ...], TableMetadata, str],
              TopicIdPartition, dict[str, Any], int, int, tuple[AbortedRange, ...], int]


def _convert_task(task: _Task) -> TableFile:
    """On an executor: convert and publish one link; its TableFile (DataFile included)."""
    from tierlog.remote.table.catalogs import static_table
    from tierlog.remote.table.convert import convert_link

    fs, root, put_options, table_state, tip, segment, first, last, aborted, log_start = task
    tier = RemoteTier(fs, root, put_options=put_options)
    table = static_table(tier, *table_state)
    link = ChainLink(RemoteLogSegmentMetadata.from_dict(segment), first, last)
    return convert_link(tier, table, tip, link, aborted_txns=aborted,
                        log_start_offset=log_start)


def spark_converter(spark: SparkSession, tier: RemoteTier
                    ) -> Callable[[Table, Sequence[LinkJob]], Iterable[TableFile]]:
    """A build's Converter running each batch as one Spark job, one task per link."""
    def convert(table: Table, jobs: Sequence[LinkJob]) -> Iterable[TableFile]:
        identifier = tuple(table.name())
        table_state = (identifier, table.metadata, table.metadata_location)
        tasks: list[_Task] = [
            (tier.fs, tier.root, tier.put_options, table_state, j.work.tip,
             j.link.segment.to_dict(), j.link.first_offset, j.link.last_offset,
             tuple(aborted_txns(tier, j.work.chain, j.link.first_offset,
                                j.link.last_offset + 1)),
             j.log_start_offset)
            for j in jobs]
        context = spark.sparkContext
        context.setJobDescription(f"tierlog: convert {len(tasks)} segments of "
                                  f"{'.'.join(identifier)}")
        files: list[TableFile] = context.parallelize(tasks, len(tasks)).map(
            _convert_task).collect()
        return files
    return convert


def build_table_on_spark(tier: RemoteTier, topic: str, *, topic_id: str | None = None,
                         catalog: Catalog | None = None, spark: SparkSession | None = None,
                         progress: Callable[[BuildProgress], None] | None = None,
                         batch_links: int = DEFAULT_BATCH_LINKS,
                         batch_bytes: int = DEFAULT_BATCH_BYTES,
                         max_links: int | None = None) -> BuildReport:
    """``build_table`` of ``topic`` in ``tier`` (in ``catalog``, by default the tier's own) with
    each batch converted on ``spark``'s executors (default: ``tierlog.spark.session()``, a local
    one)."""
    if spark is None:
        from tierlog.spark.session import session

        spark = session("tierlog-table-build")
    return build_table(tier, topic, topic_id=topic_id, catalog=catalog, progress=progress,
                       batch_links=batch_links, batch_bytes=batch_bytes, max_links=max_links,
                       converter=spark_converter(spark, tier))
