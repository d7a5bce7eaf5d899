"""Spark ``local[2]`` writing 1 M records into a local tier through
``df.write.format("tierlog")``, against ``df.write.parquet`` of the SAME cached DataFrame to
the same filesystem, same run (issue 14's goal: at least 50% of Parquet's rate).

The rows are bench_reader's: keys ``k0``..``k999``, 100-byte values, a header on every tenth
row, one millisecond apart, in Spark's Kafka-sink columns; the topic has one partition (a
Kafka topic of N partitions adds Kafka's partitioner, once per distinct key). Where the time
goes, from the same run: the task side in one process on the same rows as Arrow batches
(what each Spark task runs: routing, encoding, CRC, indexes, staging I/O), the driver's
commit (copying staged chunks into segments, manifests), and Spark's floor for any Python
writer: a data source whose tasks only iterate the Arrow batches Spark hands them.
``TIERLOG_BENCH_SPARK_WRITE_RECORDS`` overrides the size.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Any

import fsspec
from _util import best_of, report, scratch_dir

from tierlog.remote.ops.backfill import BackfillTaskWriter, WriteOptions, collect
from tierlog.remote.ops.backfill_commit import BackfillCommitter
from tierlog.remote.tier.object_store import RemoteTier

RECORDS = int(os.environ.get("TIERLOG_BENCH_SPARK_WRITE_RECORDS", "1000000"))
TOPIC = "events"
REPEATS = 3
BASE_TIME_MS = 1_700_000_000_000


def rows(spark: Any, n: int) -> Any:
    """bench_reader's records as Spark's Kafka-sink columns, cached and materialized."""
    df = spark.range(n, numPartitions=2).selectExpr(
        "CAST(concat('k', CAST(id % 1000 AS STRING)) AS BINARY) AS key",
        "CAST(repeat('v', 100) AS BINARY) AS value",
        "IF(id % 10 = 0, array(named_struct('key', 'src', 'value', CAST('bench' AS BINARY))),"
        " array()) AS headers",
        f"timestamp_millis({BASE_TIME_MS} + id) AS timestamp")
    df = df.cache()
    assert df.count() == n
    return df


def _noop_source() -> Any:
    """A Python data source whose writer only iterates the Arrow batches Spark hands it:
    the floor of any Python writer (hand-over, planner and commit processes, scheduling)."""
    from pyspark.sql.datasource import DataSource, DataSourceArrowWriter, WriterCommitMessage

    class NoopWriter(DataSourceArrowWriter):
        def write(self, iterator: Any) -> WriterCommitMessage:
            for _ in iterator:
                pass
            return WriterCommitMessage()

    class NoopSource(DataSource):
        @classmethod
        def name(cls) -> str:
            return "noop-arrow"

        def writer(self, schema: Any, overwrite: bool) -> Any:
            return NoopWriter()

    return NoopSource


def in_process(root: Path, batches: list[Any]) -> tuple[float, float]:
    """(task side, commit) seconds for the same rows in this process."""
    tier = RemoteTier(fsspec.filesystem("file"), str(root))
    started = time.perf_counter()
    writer = BackfillTaskWriter(tier, "job-0", 0, "t00000-a0-bench", WriteOptions(topic=TOPIC))
    for batch in batches:
        writer.write(batch)
    message = writer.commit_message()
    task_s = time.perf_counter() - started
    started = time.perf_counter()
    chunks, created = collect([message], "job-0")
    committer = BackfillCommitter(tier, time_ms=lambda: time.time_ns() // 1_000_000)
    try:
        committer.commit("job-0", chunks, created=created)
    finally:
        committer.close()
    return task_s, time.perf_counter() - started


def main() -> dict[str, float]:
    from tierlog.spark import session

    with scratch_dir("spark-write") as root:
        spark = session("bench-spark-write", master="local[2]",
                        **{"spark.ui.showConsoleProgress": "false",
                           "spark.sql.shuffle.partitions": "2"})
        spark.sparkContext.setLogLevel("ERROR")
        df = rows(spark, RECORDS)
        runs = iter(range(1 << 30))

        def tierlog_write() -> None:
            url = (root / f"tier-{next(runs)}").as_uri()
            (df.write.format("tierlog").option("path", url).option("topic", TOPIC)
             .mode("append").save())

        def parquet_write() -> None:
            df.write.mode("overwrite").parquet(str(root / "parquet"))

        def noop_write() -> None:
            df.write.format("noop-arrow").mode("append").save()

        spark.dataSource.register(_noop_source())
        tierlog_write()  # warm-up: starts the Python workers
        parquet_write()
        noop_write()
        tl_best, tl_med = best_of(tierlog_write, REPEATS)
        pq_best, pq_med = best_of(parquet_write, REPEATS)
        floor_s = best_of(noop_write, REPEATS)[0]
        written = spark.read.format("tierlog").option("path", (root / "tier-1").as_uri()) \
            .option("subscribe", TOPIC).load().count()
        assert written == RECORDS, written
        batches = df.toArrow().to_batches(max_chunksize=10_000)  # Spark's Arrow batch size
        spark.stop()
        task_s, commit_s = min((in_process(root / f"local-{i}", batches) for i in range(3)),
                               key=sum)
    rows_out = [
        ("Spark df.write.format('tierlog')", (f"{RECORDS / tl_best / 1e6:8.2f} M records/s "
                                              f"(best {tl_best:.2f} s, median {tl_med:.2f} s)")),
        ("Spark df.write.parquet (same df)", (f"{RECORDS / pq_best / 1e6:8.2f} M records/s "
                                              f"(best {pq_best:.2f} s, median {pq_med:.2f} s)")),
        ("ratio tierlog/Parquet", f"{pq_best / tl_best:8.1%}  (goal: >= 50%)"),
        ("  task side, one process", (f"{task_s:8.2f} s ({RECORDS / task_s / 1e6:.2f} M "
                                      f"records/s: routing, encoding, CRC, indexes, staging)")),
        ("  driver commit, one process", f"{commit_s:8.2f} s (staged chunks -> segments)"),
        ("  Spark's floor (a no-op Python writer)",
         f"{floor_s:8.2f} s (hand-over to Python, planner and commit processes, scheduling)"),
        ("  tierlog above that floor", (f"{tl_best - floor_s:8.2f} s (the tasks' work on 2 "
                                        f"cores and the commit)")),
    ]
    report(f"Spark local[2] -> tier vs Parquet: {RECORDS:,} records, one partition", rows_out)
    return {"spark_write_records_per_s": RECORDS / tl_best,
            "spark_parquet_write_records_per_s": RECORDS / pq_best,
            "spark_write_ratio": pq_best / tl_best}


if __name__ == "__main__":
    sys.exit(main() and 0)
