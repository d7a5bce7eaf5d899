"""``tierlog.spark.table`` on the session's local Spark: the same schema and rows as
``spark.read.format("tierlog")`` at both isolation levels (aborted transactions in the table's
files, a log start inside a file, a tail beyond the table, offsets inside files), the covered
part a native ``FileScan parquet``, many files listed on the driver, SQL over the views, and the
source reading everything when Spark's Hadoop has no ``s3a`` (plain PySpark on moto) or the
read starts at a timestamp.

Spark is slow on this host: each test runs a few queries only.
"""

from __future__ import annotations

import contextlib
import json
import logging
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from pyspark.sql import DataFrame, SparkSession
from support.s3 import S3_ACCESS_KEY, S3_BUCKET, S3_REGION, S3_SECRET
from support.table_tier import (
    TableTier,
    apply_log_start,
    build_table_tier,
    compact,
    convert_partition,
    cut_table,
    ready,
)
from support.tier_builder import BASE_TIME_MS, ISOLATIONS, build_simple_tier

from tierlog.errors import ConfigError
from tierlog.remote import TopicIdPartition
from tierlog.remote.table.catalog import TierCatalog
from tierlog.remote.table.commit import TableCommitter
from tierlog.remote.table.schema import open_or_create_table, table_identifier
from tierlog.spark import register_views, table
from tierlog.spark.tables import LISTING_THRESHOLD

#: The first file of orders-0 is cut by a log start offset this far into it.
LOG_START_INTO_FILE = 3


@pytest.fixture(scope="module")
def tt(tmp_path_factory: pytest.TempPathFactory) -> TableTier:
    """The built tier with its tables, the last two links of each partition uncovered (a tail
    to read), and orders-0's log start moved inside its first file (rows below it stay in
    the file and must be filtered)."""
    from tierlog.plugins.local import create_remote_storage

    root = tmp_path_factory.mktemp("spark_table")
    url = (root / "tier").as_uri()
    built = build_table_tier(root, create_remote_storage(url, {"fsync": False}), url,
                             uncovered_links=2)
    first = built.files[("orders", 0)][0]
    assert first.last_offset - first.first_offset > LOG_START_INTO_FILE
    apply_log_start(built, "orders", 0, first.first_offset + LOG_START_INTO_FILE)
    return built


def load(spark: SparkSession, url: str, **options: str) -> DataFrame:
    return spark.read.format("tierlog").option("path", url).options(**options).load()


def rows(df: DataFrame) -> list[tuple[Any, ...]]:
    """The DataFrame's rows as sorted, comparable tuples (a multiset)."""
    return sorted((r.topic, r.partition, r.offset, r.timestamp, r.timestampType,
                   None if r.key is None else bytes(r.key),
                   None if r.value is None else bytes(r.value),
                   tuple((h.key, None if h.value is None else bytes(h.value))
                         for h in r.asDict().get("headers") or ()))
                  for r in df.collect())


def plan_of(df: DataFrame) -> str:
    return str(df._jdf.queryExecution().executedPlan().toString())


def aborted_rows(tt: TableTier, topic: str) -> int:
    return sum(pq.read_table(f.path, columns=["aborted"]).column("aborted").to_pylist()
               .count(True) for (t, _), files in tt.files.items() if t == topic for f in files)


@pytest.mark.parametrize("isolation", ISOLATIONS)
def test_same_rows_and_schema_as_the_source(spark: SparkSession, tt: TableTier,
                                            isolation: str) -> None:
    assert aborted_rows(tt, "orders") > 0  # the table holds aborted rows to filter
    options = {"subscribe": "orders,clicks", "includeHeaders": "true",
               "isolation.level": isolation}
    df = table(spark, tt.url, **options)
    source = load(spark, tt.url, **options)
    assert df.schema == source.schema
    assert df.exceptAll(source).count() == 0
    assert source.exceptAll(df).count() == 0
    expected = len(tt.expected("orders", isolation)) + len(tt.expected("clicks", isolation))
    assert df.count() == expected
    plan = plan_of(df)
    assert "FileScan parquet" in plan and "Batched: true" in plan  # Spark's own reader
    assert "BatchScan tierlog" in plan  # the tail beyond the table


def test_offsets_inside_files_and_into_the_tail(spark: SparkSession, tt: TableTier) -> None:
    p0, p1 = tt.files[("orders", 0)], tt.files[("orders", 1)]
    start = {"0": p0[1].first_offset + 2, "1": p1[0].first_offset + 1}
    # orders-0 ends inside a covered file, orders-1 in the tail.
    end = {"0": p0[2].last_offset - 1, "1": tt.covered("orders", 1) + 5}
    options = {"subscribe": "orders", "startingOffsets": json.dumps({"orders": start}),
               "endingOffsets": json.dumps({"orders": end}),
               "isolation.level": "read_committed"}
    got = rows(table(spark, tt.url, **options))
    assert got == rows(load(spark, tt.url, **options))
    assert {r[1] for r in got} == {0, 1}
    assert all(start[str(r[1])] <= r[2] < end[str(r[1])] for r in got)


def test_a_compacted_table_then_a_restore_cut_inside_a_run(spark: SparkSession,
                                                           tt: TableTier) -> None:
    # Compaction merges each partition's files into run files (orders-0's first file holds
    # rows below its log start and stays out of its run); then a restore cut falls inside
    # orders-1's run, which is unmerged and cut. In each state, at both levels and with
    # offsets inside the runs, Spark's table path returns the source's rows.
    before = {p: len(tt.current("orders", p)) for p in (0, 1)}
    compact(tt, "orders")
    assert all(len(tt.current("orders", p)) < before[p] for p in (0, 1))
    assert any(f.is_run for f in tt.current("orders", 1))
    p1 = tt.files[("orders", 1)]
    inside = {"orders": {"0": tt.files[("orders", 0)][2].first_offset + 1,
                         "1": p1[1].first_offset + 2}}
    for state in ("compacted", "cut inside a run"):
        if state == "cut inside a run":
            cut_table(tt, "orders", 1, p1[2].first_offset + 1)
            assert not any(f.is_run and f.first_offset < p1[2].first_offset + 1 <= f.last_offset
                           for f in tt.current("orders", 1))
        for isolation in ISOLATIONS:
            for extra in ({}, {"startingOffsets": json.dumps(inside)}):
                options = {"subscribe": "orders", "includeHeaders": "true",
                           "isolation.level": isolation, **extra}
                assert rows(table(spark, tt.url, **options)) == rows(
                    load(spark, tt.url, **options)), (state, isolation, extra)


def test_sql_over_views_and_a_second_query(spark: SparkSession, tt: TableTier) -> None:
    views = register_views(spark, tt.url, ["orders"], prefix="tbl_", includeHeaders=True)
    assert views == {"orders": "tbl_orders"}
    expected = tt.expected("orders", "read_uncommitted")
    filtered = sum(1 for p, r in expected if p == 1 and r.offset >= 50)
    assert spark.sql("SELECT count(*) FROM tbl_orders WHERE partition = 1 AND offset >= 50"
                     ).first()[0] == filtered
    # A later query of the same view reads every row (no pruned reader kept from the first).
    assert spark.sql("SELECT count(*) FROM tbl_orders").first()[0] == len(expected)


def stage_tasks(spark: SparkSession, group: str) -> list[int]:
    """The task count of each stage the jobs of ``group`` ran."""
    tracker = spark.sparkContext.statusTracker()
    tasks = []
    for job in tracker.getJobIdsForGroup(group):
        info = tracker.getJobInfo(job)
        for stage in info.stageIds if info is not None else ():
            stage_info = tracker.getStageInfo(stage)
            if stage_info is not None:
                tasks.append(stage_info.numTasks)
    return tasks


@pytest.fixture
def many_files(tmp_path: Path) -> Iterator[tuple[str, int, int]]:
    """A topic of 50 segments, each a file of its table: (url, files, records)."""
    from tierlog.plugins.local import create_remote_storage

    url = (tmp_path / "tier").as_uri()
    rsm = create_remote_storage(url, {"fsync": False})
    log, _ = build_simple_tier(tmp_path / "logs", rsm, records=1000, per_batch=20,
                                      value_size=20, segment_bytes=1200)
    tip = TopicIdPartition(log.topic_id, "events", 0)
    catalog = TierCatalog(rsm.tier)
    iceberg = open_or_create_table(catalog, "events", tip.topic_id)
    files = convert_partition(rsm.tier, iceberg, tip)
    TableCommitter(catalog, table_identifier("events", tip.topic_id),
                   backoff=lambda _: None).commit([ready(f) for f in files], starts={0: 0})
    yield url, len(files), log.log_end_offset
    log.close()


def test_many_files_are_listed_on_the_driver(spark: SparkSession,
                                             many_files: tuple[str, int, int]) -> None:
    url, files, records = many_files
    assert files > 32  # Spark's default threshold of a parallel listing job
    before = spark.conf.get(LISTING_THRESHOLD, None)
    group = f"many-files-{uuid.uuid4().hex}"
    spark.sparkContext.setJobGroup(group, "tierlog.spark.table over many files")
    try:
        df = table(spark, url, "events")
    finally:
        spark.sparkContext.setLocalProperty("spark.jobGroup.id", None)  # type: ignore[arg-type]
    # No job listed the files (one task per path); the schema is read from one footer.
    assert all(n < files for n in stage_tasks(spark, group)), stage_tasks(spark, group)
    assert spark.conf.get(LISTING_THRESHOLD, None) == before
    assert f"InMemoryFileIndex({files} paths)" in plan_of(df)
    assert df.count() == records
    assert "BatchScan tierlog" not in plan_of(df)  # all covered: no tail


@pytest.fixture(scope="module")
def s3_tt(tmp_path_factory: pytest.TempPathFactory, s3_endpoint: str) -> TableTier:
    from tierlog.plugins.s3 import create_remote_storage

    url = f"s3://{S3_BUCKET}/spark-table-{uuid.uuid4().hex[:12]}"
    options = {"endpoint_url": s3_endpoint, "key": S3_ACCESS_KEY, "secret": S3_SECRET,
               "region": S3_REGION}
    return build_table_tier(tmp_path_factory.mktemp("s3"), create_remote_storage(url, options),
                            url, rounds=3, uncovered_links=1, topics=("orders",))


def test_without_hadoop_aws_the_source_reads_it_all(spark: SparkSession, s3_tt: TableTier,
                                                    s3_endpoint: str,
                                                    caplog: pytest.LogCaptureFixture) -> None:
    jvm, conf = spark._jvm, spark._jsc.hadoopConfiguration()  # type: ignore[attr-defined]
    with contextlib.suppress(Exception):  # py4j's error: the fallback this test is about
        jvm.org.apache.hadoop.fs.FileSystem.getFileSystemClass("s3a", conf)
        pytest.skip("this Spark reads s3a (hadoop-aws is on its classpath)")
    assert s3_tt.files[("orders", 0)]  # the topic has a table
    options = {"subscribe": "orders", "isolation.level": "read_committed",
               "storage.endpoint_url": s3_endpoint, "storage.key": S3_ACCESS_KEY,
               "storage.secret": S3_SECRET,
               "storage.client_kwargs": json.dumps({"region_name": S3_REGION})}
    with caplog.at_level(logging.WARNING, logger="tierlog.spark"):
        df = table(spark, s3_tt.url, **options)
    warnings = [r.getMessage() for r in caplog.records if r.name == "tierlog.spark.tables"]
    assert len(warnings) == 1, warnings
    assert "s3a://" in warnings[0] and "not readable by this Spark" in warnings[0]
    assert "S3AFileSystem" in warnings[0]
    assert "FileScan parquet" not in plan_of(df)
    assert len(rows(df)) == len(s3_tt.expected("orders", "read_committed"))


def test_timestamps_an_empty_read_and_bad_options(
        spark: SparkSession, tt: TableTier) -> None:
    df = table(spark, tt.url, "orders", startingTimestamp=BASE_TIME_MS)
    plan = plan_of(df)
    assert "FileScan parquet" not in plan and "BatchScan tierlog" in plan
    nothing = json.dumps({"orders": {"0": 5, "1": 5}})
    empty = table(spark, tt.url, "orders", startingOffsets=nothing, endingOffsets=nothing)
    assert empty.schema == load(spark, tt.url, subscribe="orders").schema
    assert empty.count() == 0
    with pytest.raises(ConfigError, match="startingoffsets"):
        table(spark, tt.url, "orders", startingOffsets="latest")
    with pytest.raises(ConfigError, match="subscribe"):
        table(spark, tt.url, "orders", assign='{"orders": [0]}')
