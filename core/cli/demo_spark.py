"""The demo's last step: Spark SQL over the remote tier through ``tierlog.spark`` (no broker,
no local log), committed records only, printed as tables and checked against the engine.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Mapping
from typing import Any

#: Spark's local master for the demo: the machine's two cores.
SPARK_MASTER = "local[2]"
PER_PARTITION_SQL = """
SELECT partition, count(*) AS records, min(offset) AS first_offset, max(offset) AS last_offset,
       min(timestamp) AS first_timestamp, max(timestamp) AS last_timestamp
FROM demo GROUP BY partition ORDER BY partition
"""
PER_MINUTE_SQL = """
SELECT date_format(date_trunc('minute', timestamp), 'yyyy-MM-dd HH:mm') AS minute,
       count_if(partition = 0) AS partition_0, count_if(partition = 1) AS partition_1,
       count_if(partition = 2) AS partition_2, count(*) AS records
FROM demo GROUP BY 1 ORDER BY 1
"""


def run_spark_queries(url: str, storage_options: Mapping[str, Any], topic: str,
                      expected: int) -> bool | None:
    """Query ``topic`` in the tier at ``url`` with Spark SQL (read_committed) and print the
    tables; returns whether Spark counted ``expected`` records, or None when PySpark or
    ``tierlog.spark`` is missing (reported, and the step skipped)."""
    # A local master needs no routable address (and Spark warns when it picks one).
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    try:
        import tierlog.spark  # imports pyspark
    except ImportError as exc:
        print(f"\nSpark step skipped: {exc} (install tierlog[spark] and Java 17+).")
        return None
    print(f"\nStarting Spark ({SPARK_MASTER}) to query the remote tier directly ...")
    began = time.perf_counter()
    # Its Python workers run this interpreter (it has tierlog and pyarrow); tierlog registered.
    spark = tierlog.spark.session("tierlog-demo", SPARK_MASTER)
    try:
        spark.sparkContext.setLogLevel("ERROR")
        reader = (spark.read.format("tierlog").option("path", url).option("subscribe", topic)
                  .option("isolation.level", "read_committed"))
        for key, value in storage_options.items():
            reader = reader.option(f"storage.{key}", _option_text(value))
        df = reader.load().cache()
        df.createOrReplaceTempView("demo")
        print(f"spark.read.format('tierlog').option('path', {url!r})"
              f".option('subscribe', {topic!r}).option('isolation.level', 'read_committed')")
        print("\nCommitted records per partition in the remote tier:")
        per_partition = spark.sql(PER_PARTITION_SQL)
        per_partition.show(truncate=False)
        print("Committed records per minute (by record timestamp):")
        spark.sql(PER_MINUTE_SQL).show(100, truncate=False)
        counted: int = sum(row["records"] for row in per_partition.collect())
    finally:
        spark.stop()
    verdict = "matches" if counted == expected else "DOES NOT MATCH"
    print(f"Spark counted {counted:,} committed records in the remote tier in "
          f"{time.perf_counter() - began:.1f}s; the engine reads {expected:,} below the "
          f"highest tiered offset: {verdict}.")
    return counted == expected


def _option_text(value: Any) -> str:
    """Spark options are strings; tierlog.spark decodes JSON objects, lists and booleans."""
    if isinstance(value, (dict, list, bool)):
        return json.dumps(value)
    return str(value)
