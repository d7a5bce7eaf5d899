"""Spark SQL over tierlog's remote tier: write a topic with tierlog, copy its closed segments
to a tier in a temporary directory, then query the tier with ``spark.read.format("tierlog")``.

Run: ``python examples/spark_over_remote_tier.py`` (needs ``tierlog[spark]`` and Java 17).
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

from pyspark.sql import SparkSession

import tierlog
import tierlog.spark
from tierlog import Record

START_MS = 1_700_000_000_000
CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]


def build_tier(root: Path) -> str:
    """Topic ``orders`` (3 partitions, 3000 orders each, every codec) tiered under ``root``
    by a LogManager, exactly as a tierlog node tiers its closed segments."""
    url = (root / "tier").as_uri()
    # The records are stamped in 2023: keep them (retention.ms=-1) rather than let the
    # default 7-day retention delete them from the tier right after the copy.
    config = {"segment.bytes": 64 << 10, "retention.ms": -1, "remote.storage.enable": True,
              "remote.storage.manager": "local", "remote.storage.url": url}
    with tierlog.LogManager.open(root / "logs", config, start_scheduler=False) as mgr:
        for partition, log in enumerate(mgr.create_topic("orders", partitions=3)):
            for n in range(30):
                log.append_records(
                    [Record(key=f"customer-{(n * 100 + i) % 37}".encode(),
                            value=f"{{\"amount\": {(n * 100 + i) % 250}}}".encode(),
                            headers=[("region", b"eu" if i % 2 else b"us")],
                            timestamp=START_MS + (n * 100 + i) * 1000)
                     for i in range(100)], compression=CODECS[(n + partition) % len(CODECS)])
            log.roll()
        copied = sum(len(r.copied) for r in mgr.tier_now().values())
        print(f"tiered {copied} segments to {url}")
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
         .option("startingTimestamp", str(START_MS + 600_000))
         .option("includeHeaders", "true").load()  # the query below reads headers
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
