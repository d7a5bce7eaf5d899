"""Spark ``local[2]`` reading the 1 M-record remote tier of bench_reader through
``spark.read.format("tierlog")``, against one ``tierlog.reader`` process on the same tier,
same run: records/s and the speed-up.

The Spark query sums every record's value length, so every split is read, decoded and
handed to the JVM as Arrow; the reader baseline decodes into one Arrow table. A third figure
is Spark's floor for any Python data source: one that decodes nothing and yields the same
RecordBatches read back from Parquet (the hand-over to the JVM and its Arrow-to-row work).
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
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
        parquet = root / "same-batches.parquet"
        pq.write_table(reader.read_table(TOPIC, include_headers=False), parquet,
                       compression="none", row_group_size=65_536)

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
        spark.dataSource.register(_parquet_batches_source())
        floor_query = (spark.read.format("batches").option("path", str(parquet))
                       .option("parts", str(SPLITS)).load()
                       .selectExpr("count(*) AS n", "sum(length(value)) AS bytes"))
        assert floor_query.first()["n"] == RECORDS
        floor_best, _ = best_of(lambda: floor_query.first(), 3)
        spark.stop()
    speedup = reader_best / spark_best
    report(f"Spark local[2] over the remote tier: {RECORDS:,} records ({CODEC}), "
           f"{partitions} input partitions", [
               ("one tierlog.reader process", (f"{RECORDS / reader_best / 1e6:8.2f} M records/s "
                                              f"(median {RECORDS / reader_med / 1e6:.2f})")),
               ("Spark local[2]", (f"{RECORDS / spark_best / 1e6:8.2f} M records/s "
                                  f"(median {RECORDS / spark_med / 1e6:.2f})")),
               ("speed-up Spark/reader", f"{speedup:8.2f}x"),
               ("Spark floor: Python source yielding ready batches",
                f"{RECORDS / floor_best / 1e6:8.2f} M records/s (no decode at all)"),
               ("Spark session start / first query", f"{startup:8.1f} s / {first:.1f} s"),
               ("CPU cores of this machine", (f"{os.cpu_count():8d}   (local[2] shares them "
                                              "with the JVM's Arrow-to-row work)")),
           ])
    return {"spark_records_per_s": RECORDS / spark_best, "spark_speedup": speedup,
            "spark_python_source_floor_records_per_s": RECORDS / floor_best}


def _parquet_batches_source() -> Any:
    """A Python data source yielding a Parquet file's row groups as RecordBatches of the
    reader's seven columns (defined in a function so Spark ships it to workers by value)."""
    from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

    from tierlog.spark.schema import schema_ddl

    class Reader(DataSourceReader):
        def __init__(self, path: str, parts: int) -> None:
            self.path, self.parts = path, parts

        def partitions(self) -> list[InputPartition]:
            groups = pq.ParquetFile(self.path).num_row_groups
            return [InputPartition(list(range(i, groups, self.parts))) for i in range(self.parts)]

        def read(self, partition: InputPartition) -> Any:
            source = pq.ParquetFile(self.path)
            for group in partition.value:
                yield from source.read_row_group(group).to_batches()

    class Batches(DataSource):
        @classmethod
        def name(cls) -> str:
            return "batches"

        def schema(self) -> str:
            return str(schema_ddl(include_headers=False))

        def reader(self, schema: Any) -> DataSourceReader:
            return Reader(str(Path(self.options["path"])), int(self.options["parts"]))

    return Batches


if __name__ == "__main__":
    main()
