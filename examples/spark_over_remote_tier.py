"""Spark SQL over tierlog's remote tier: write a topic with tierlog, copy its closed segments
to a tier in a temporary directory, then query the tier with ``spark.read.format("tierlog")``.

Run: ``python examples/spark_over_remote_tier.py`` (needs ``tierlog[spark]`` and Java 17).
"""

from __future__ import annotations

import itertools
import os
import sys
import tempfile
from pathlib import Path

from pyspark.sql import SparkSession

import tierlog.spark
from tierlog import Log, Record
from tierlog.plugins.local import create_remote_storage
from tierlog.remote import (
    FsspecRemoteStorageManager,
    LogSegmentData,
    RemoteLogMetadataManager,
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemoteLogSegmentState,
    TopicIdPartition,
)

TOPIC_ID = "q0Vs7vGvSZ6ljmj-ZmXC1A"
START_MS = 1_700_000_000_000


def tier_closed_segments(log: Log, rsm: FsspecRemoteStorageManager,
                         rlmm: RemoteLogMetadataManager) -> None:
    """Copy every closed segment as tiered storage does: metadata COPY_SEGMENT_STARTED, the
    segment's files, then COPY_SEGMENT_FINISHED (which makes it visible to readers)."""
    tip = TopicIdPartition(TOPIC_ID, log.topic, log.partition)
    segments = log.segments.values()
    for segment, successor in itertools.pairwise(segments):
        md = RemoteLogSegmentMetadata(
            remote_log_segment_id=RemoteLogSegmentId.generate(tip),
            start_offset=segment.base_offset, end_offset=successor.base_offset - 1,
            max_timestamp_ms=segment.max_timestamp_so_far, event_timestamp_ms=START_MS,
            segment_size_in_bytes=segment.log.size_in_bytes(),
            segment_leader_epochs={0: segment.base_offset}, txn_idx_empty=True)
        rlmm.add_remote_log_segment_metadata(md)
        rsm.copy_log_segment_data(md, LogSegmentData(
            log_segment=segment.log.path, offset_index=segment.offset_index.path,
            time_index=segment.time_index.path, transaction_index=None,
            producer_snapshot_index=log.directory / f"{successor.base_offset:020d}.snapshot",
            leader_epoch_index=f"0\n1\n0 {segment.base_offset}\n".encode()))
        rlmm.update_remote_log_segment_metadata(RemoteLogSegmentMetadataUpdate(
            remote_log_segment_id=md.remote_log_segment_id, event_timestamp_ms=START_MS + 1,
            state=RemoteLogSegmentState.COPY_SEGMENT_FINISHED))


def build_tier(root: Path) -> str:
    """Topic ``orders`` (3 partitions, 3000 orders each, every codec) tiered under ``root``."""
    url = (root / "tier").as_uri()
    rsm = create_remote_storage(url, {"fsync": False})
    rlmm = RemoteLogMetadataManager(rsm.tier)
    codecs = ["none", "gzip", "snappy", "lz4", "zstd"]
    for partition in range(3):
        log = Log.open(root / "logs" / f"orders-{partition}", {"segment.bytes": 64 << 10},
                       topic_id=TOPIC_ID)
        for n in range(30):
            log.append_records(
                [Record(key=f"customer-{(n * 100 + i) % 37}".encode(),
                        value=f"{{\"amount\": {(n * 100 + i) % 250}}}".encode(),
                        headers=[("region", b"eu" if i % 2 else b"us")],
                        timestamp=START_MS + (n * 100 + i) * 1000)
                 for i in range(100)], compression=codecs[n % len(codecs)])
        log.roll()
        tier_closed_segments(log, rsm, rlmm)
        log.close()
    return url


def main() -> None:
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    with tempfile.TemporaryDirectory() as tmp:
        url = build_tier(Path(tmp))
        spark = (SparkSession.builder.master("local[2]").appName("tierlog-example")
                 .config("spark.ui.enabled", "false")
                 .config("spark.ui.showConsoleProgress", "false")
                 .config("spark.sql.session.timeZone", "UTC").getOrCreate())
        spark.sparkContext.setLogLevel("ERROR")
        tierlog.spark.register(spark)
        (spark.read.format("tierlog").option("path", url).option("subscribe", "orders")
         .option("startingTimestamp", str(START_MS + 600_000)).load()
         .createOrReplaceTempView("orders"))
        spark.sql("""
            SELECT partition,
                   count(*) AS orders,
                   sum(get_json_object(CAST(value AS STRING), '$.amount')) AS amount,
                   min(offset) AS first_offset,
                   max(timestamp) AS last_order
            FROM orders
            WHERE headers[0].value = CAST('eu' AS BINARY)
            GROUP BY partition ORDER BY partition
        """).show(truncate=False)
        spark.stop()


if __name__ == "__main__":
    main()
