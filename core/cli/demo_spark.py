"""The demo's last step: Spark SQL over the remote tier through ``tierlog.spark`` (no broker,
no local log), committed records only, printed as tables and checked against the engine;
then a stream of new records, and a Spark job backfilling a second topic into the tier.
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from tierlog.manager.log_manager import LogManager
from tierlog.records.record import Record

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

#: Spark's local master for the demo: the machine's two cores.
SPARK_MASTER = "local[2]"
#: The streaming step: rounds of new records, one a second, and how long to wait for them.
LIVE_ROUNDS = 8
LIVE_RECORDS_PER_ROUND = 30
LIVE_START_TIMEOUT_S = 60
LIVE_DRAIN_TIMEOUT_S = 20
#: The backfill step: rows a Spark job writes into a new topic of the tier.
BACKFILL_RECORDS = 300
BACKFILL_PARTITIONS = 3
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
                      expected: int, open_manager: Callable[[], LogManager] | None = None
                      ) -> bool | None:
    """Query ``topic`` in the tier at ``url`` with Spark SQL (read_committed) and print the
    tables, then (given ``open_manager``, which reopens the demo's LogManager) stream the
    records produced meanwhile (``stream_new_records``). Returns whether Spark counted
    ``expected`` records and the stream saw every new one, or None when PySpark or
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
        verdict = "matches" if counted == expected else "DOES NOT MATCH"
        print(f"Spark counted {counted:,} committed records in the remote tier in "
              f"{time.perf_counter() - began:.1f}s; the engine reads {expected:,} below the "
              f"highest tiered offset: {verdict}.")
        same = table_path_query(spark, url, storage_options, topic)
        streamed = True
        if open_manager is not None:
            streamed = stream_new_records(spark, url, storage_options, topic, open_manager)
        backfilled = backfill_topic(spark, url, storage_options, f"{topic}-backfill")
    finally:
        spark.stop()
    return counted == expected and same and streamed and backfilled


def table_path_query(spark: SparkSession, url: str, storage_options: Mapping[str, Any],
                     topic: str) -> bool:
    """The per-partition query on the table path (``tierlog.spark.register_views``: Spark's
    own Parquet reader over the offsets the topic's table covers, the ``tierlog`` source for
    the tail beyond it) beside the same query on ``spark.read.format("tierlog")`` alone, each
    timed (the faster of two runs); returns whether both give the same rows."""
    import tierlog.spark

    options = {"isolation.level": "read_committed",
               **{f"storage.{k}": _option_text(v) for k, v in storage_options.items()}}
    print("\nThe topic's table: tierlog.spark.register_views(spark, url, ['demo'], "
          "prefix='table_') reads the offsets the table covers with Spark's own Parquet "
          "reader, the tail with the tierlog source:")
    view = tierlog.spark.register_views(spark, url, [topic], prefix="table_", **options)[topic]
    source = spark.read.format("tierlog").options(path=url, subscribe=topic, **options).load()
    source.createOrReplaceTempView("source_demo")
    timed: dict[str, tuple[float, list[Any]]] = {}
    for name in (view, "source_demo"):
        best = float("inf")
        for _ in range(2):  # a new DataFrame each time: a second collect() reuses its shuffle
            began = time.perf_counter()
            rows = spark.sql(PER_PARTITION_SQL.replace("FROM demo ", f"FROM {name} ")).collect()
            best = min(best, time.perf_counter() - began)
        timed[name] = (best, rows)
    print(PER_PARTITION_SQL.replace("FROM demo ", f"FROM {view} ").strip())
    spark.createDataFrame(timed[view][1]).show(truncate=False)
    same = timed[view][1] == timed["source_demo"][1]
    print(f"Spark SQL on the table path ({view}): {timed[view][0]:.2f}s; the same query on "
          f"spark.read.format('tierlog'): {timed['source_demo'][0]:.2f}s "
          f"({timed['source_demo'][0] / timed[view][0]:.1f}x); "
          f"{'the same rows' if same else 'DIFFERENT ROWS'}.")
    return same


def stream_new_records(spark: SparkSession, url: str, storage_options: Mapping[str, Any], topic: str,
                       open_manager: Callable[[], LogManager]) -> bool:
    """``spark.readStream.format("tierlog")`` over the tier while new records are produced:
    the demo's LogManager is reopened with its scheduler running (tail publishing every
    ``remote.log.tail.ms``), a stream starting at ``latest`` with a 1 s trigger prints each
    micro-batch as it arrives, and LIVE_ROUNDS rounds of records are appended, one a second.
    Returns whether the stream saw every new record, exactly once."""
    print(f"\nStreaming: spark.readStream.format('tierlog') on {topic!r} (startingOffsets="
          f"latest, trigger 1 s) while new records are produced; tail publishing puts them "
          f"in the tier every second ...")
    sent: dict[tuple[int, int], float] = {}
    seen: list[tuple[int, int]] = []
    lags: list[float] = []

    def show(batch: DataFrame, batch_id: int) -> None:
        now = time.time()
        rows = batch.selectExpr("partition", "offset", "unix_millis(timestamp) AS ms",
                                "value").collect()
        if not rows:
            return
        seen.extend((r["partition"], r["offset"]) for r in rows)
        batch_lags = [now - r["ms"] / 1000 for r in rows]
        lags.extend(batch_lags)
        ranges: dict[int, tuple[int, int]] = {}
        for r in rows:
            low, high = ranges.get(r["partition"], (r["offset"], r["offset"]))
            ranges[r["partition"]] = (min(low, r["offset"]), max(high, r["offset"]))
        where = ", ".join(f"p{p} offsets {lo}-{hi}" for p, (lo, hi) in sorted(ranges.items()))
        print(f"  batch {batch_id}: {len(rows):3d} new records ({where}), e.g. "
              f"{bytes(rows[0]['value'])!r}, {min(batch_lags):.1f}-{max(batch_lags):.1f} s "
              f"after their append")

    reader = (spark.readStream.format("tierlog").option("path", url).option("subscribe", topic)
              .option("isolation.level", "read_committed"))
    for key, value in storage_options.items():
        reader = reader.option(f"storage.{key}", _option_text(value))
    with tempfile.TemporaryDirectory(prefix="tierlog-demo-stream-") as checkpoint:
        mgr = open_manager()
        try:
            query = (reader.load().writeStream.foreachBatch(show)
                     .trigger(processingTime="1 second")
                     .option("checkpointLocation", checkpoint).start())
            try:
                _await(lambda: query.lastProgress is not None, LIVE_START_TIMEOUT_S)
                logs = [mgr.log(topic, p) for p in mgr.partitions(topic)]
                for round_ in range(LIVE_ROUNDS):
                    for n in range(LIVE_RECORDS_PER_ROUND):
                        log = logs[n % len(logs)]
                        now = time.time()
                        info = log.append_records([Record(
                            key=b"live-%d" % n, value=b"live round %d record %d" % (round_, n),
                            timestamp=int(now * 1000))])
                        sent[(log.partition, info.first_offset)] = now
                    time.sleep(1)
                _await(lambda: len(seen) >= len(sent), LIVE_DRAIN_TIMEOUT_S)
            finally:
                query.stop()
        finally:
            mgr.close()
    exact = sorted(seen) == sorted(sent)
    lags.sort()
    median = lags[len(lags) // 2] if lags else float("nan")
    print(f"The stream saw {len(seen)} of the {len(sent)} records produced "
          f"({'each exactly once' if exact else 'NOT exactly once'}); median append -> "
          f"foreachBatch latency {median:.1f} s.")
    return exact


def backfill_topic(spark: SparkSession, url: str, storage_options: Mapping[str, Any], topic: str
                   ) -> bool:
    """A Spark job writes BACKFILL_RECORDS rows of Spark's Kafka-sink columns into a new
    ``topic`` straight into the tier (``df.write.format("tierlog")``, committed at once, no
    broker), then reads the topic back and prints what it wrote and read. Returns whether
    the read found every row written."""
    print(f"\nBackfill: a Spark job writes {BACKFILL_RECORDS} rows into a new topic "
          f"{topic!r} ({BACKFILL_PARTITIONS} partitions) straight into the tier ...")
    began = time.perf_counter()
    rows = spark.range(BACKFILL_RECORDS, numPartitions=2).selectExpr(
        "concat('user-', CAST(id % 10 AS STRING)) AS key",
        "concat('backfilled event ', CAST(id AS STRING)) AS value",
        "timestamp_millis(1700000000000 + id * 1000) AS timestamp")
    print("Rows written (key picks the partition, as Kafka's partitioner does):")
    rows.show(3, truncate=False)
    writer = (rows.write.format("tierlog").option("path", url).option("topic", topic)
              .option("partitions", str(BACKFILL_PARTITIONS)).mode("append"))
    reader = spark.read.format("tierlog").option("path", url).option("subscribe", topic)
    for key, value in storage_options.items():
        writer = writer.option(f"storage.{key}", _option_text(value))
        reader = reader.option(f"storage.{key}", _option_text(value))
    writer.save()
    print(f"df.write.format('tierlog').option('topic', {topic!r})"
          f".option('partitions', '{BACKFILL_PARTITIONS}').save() committed in "
          f"{time.perf_counter() - began:.1f}s; read back with spark.read.format('tierlog'):")
    back = reader.load()
    back.createOrReplaceTempView("backfill")
    spark.sql("SELECT partition, count(*) AS records, min(offset) AS first_offset, "
              "max(offset) AS last_offset FROM backfill GROUP BY partition "
              "ORDER BY partition").show(truncate=False)
    spark.sql("SELECT partition, offset, CAST(key AS STRING) AS key, "
              "CAST(value AS STRING) AS value, timestamp FROM backfill "
              "ORDER BY partition, offset").show(3, truncate=False)
    read: int = back.count()
    verdict = "every row" if read == BACKFILL_RECORDS else "NOT every row"
    print(f"Spark read {read} records of {topic!r} from the tier: {verdict} written.")
    return read == BACKFILL_RECORDS


def _await(done: Callable[[], bool], timeout_s: float) -> None:
    """Poll ``done`` (the streaming query runs on Spark's threads) until true or timeout."""
    deadline = time.monotonic() + timeout_s
    while not done() and time.monotonic() < deadline:
        time.sleep(0.1)


def _option_text(value: object) -> str:
    """Spark options are strings; tierlog.spark decodes JSON objects, lists and booleans."""
    if isinstance(value, (dict, list, bool)):
        return json.dumps(value)
    return str(value)
