"""Spark ``local[2]`` reading the 1 M-record remote tier of bench_reader through
``spark.read.format("tierlog")``, against one ``tierlog.reader`` process on the same tier,
same run: records/s and the speed-up.

The Spark query sums every record's value length, so every split is read, decoded and
handed to the JVM as Arrow; the reader baseline decodes into one Arrow table.
"""

from __future__ import annotations

import os
import sys
import time

from _util import best_of, report, scratch_dir
from bench_reader import RECORDS, TOPIC, build_tier

from tierlog.reader import RemoteTopicReader

CODEC = "none"
SPLITS = 8


def main() -> dict[str, float]:
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    import tierlog.spark

    with scratch_dir("spark") as root:
        url = build_tier(root, CODEC)
        reader = RemoteTopicReader(url)
        tier_bytes = sum(s.segment_size_in_bytes for s in reader.list_segments(TOPIC, 0))
        reader_best, reader_med = best_of(lambda: reader.read_table(TOPIC), 3)

        started = time.perf_counter()
        spark = (SparkSession.builder.master("local[2]").appName("bench-spark")
                 .config("spark.ui.enabled", "false")
                 .config("spark.ui.showConsoleProgress", "false")
                 .config("spark.sql.shuffle.partitions", "2").getOrCreate())
        spark.sparkContext.setLogLevel("ERROR")
        tierlog.spark.register(spark)
        startup = time.perf_counter() - started
        df = (spark.read.format("tierlog").option("path", url).option("subscribe", TOPIC)
              .option("splitBytes", str(tier_bytes // SPLITS + 1)).load())
        query = df.selectExpr("count(*) AS n", "sum(length(value)) AS bytes")

        def run() -> None:
            row = query.first()
            assert row["n"] == RECORDS, row

        first_started = time.perf_counter()
        run()  # the first run also starts the Python workers
        first = time.perf_counter() - first_started
        spark_best, spark_med = best_of(run, 3)
        partitions = df.rdd.getNumPartitions()
        spark.stop()
    speedup = reader_best / spark_best
    report(f"Spark local[2] over the remote tier: {RECORDS:,} records ({CODEC}), "
           f"{partitions} input partitions", [
               ("one tierlog.reader process", (f"{RECORDS / reader_best / 1e6:8.2f} M records/s "
                                              f"(median {RECORDS / reader_med / 1e6:.2f})")),
               ("Spark local[2]", (f"{RECORDS / spark_best / 1e6:8.2f} M records/s "
                                  f"(median {RECORDS / spark_med / 1e6:.2f})")),
               ("speed-up Spark/reader", f"{speedup:8.2f}x"),
               ("Spark session start / first query", f"{startup:8.1f} s / {first:.1f} s"),
               ("CPU cores of this machine", (f"{os.cpu_count():8d}   (local[2] shares them "
                                              "with the JVM's Arrow-to-row work)")),
           ])
    return {"spark_records_per_s": RECORDS / spark_best, "spark_speedup": speedup}


if __name__ == "__main__":
    main()
