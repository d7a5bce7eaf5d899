"""``df.write.format("tierlog")`` and ``df.writeStream.format("tierlog")`` on a real local
Spark: round trips Spark -> tier -> Spark byte-equal, keyed placement, failed jobs, retried
tasks and replayed stream batches."""

from __future__ import annotations

import datetime as dt

import pyarrow as pa
import pytest
from pyspark.sql import functions as F

from tierlog.common.partitioner import partition_for_key
from tierlog.reader import RemoteTopicReader

UTC = dt.UTC


def _frame(spark, n, start=0):
    rows = [(f"k{i % 13}".encode() if i % 4 else None, f"v{i}".encode() * (i % 3),
             [(f"h{i % 2}", str(i).encode())] if i % 5 == 0 else [],
             dt.datetime.fromtimestamp(1_700_000_000 + i, UTC)) for i in range(start, start + n)]
    return spark.createDataFrame(
        rows, "key binary, value binary, headers array<struct<key:string,value:binary>>, "
              "timestamp timestamp")


def _read(spark, url, topic):
    return (spark.read.format("tierlog").option("path", url).option("subscribe", topic)
            .option("includeHeaders", "true").load())


def _fields(df):
    return sorted((r.partition, r.offset, r.key, r.value,
                   tuple((h.key, h.value) for h in r.headers or ()), r.timestamp)
                  for r in df.select("partition", "offset", "key", "value", "headers",
                                     "timestamp").collect())


@pytest.mark.parametrize("codec", ["zstd"])
def test_spark_to_tier_to_spark_is_byte_equal(spark, tmp_path, codec):
    url = f"file://{tmp_path}/tier"
    df = _frame(spark, 300).repartition(3)
    (df.write.format("tierlog").option("path", url).option("topic", "orders")
     .option("partitions", "4").option("compression", codec).mode("append").save())
    back = _read(spark, url, "orders")
    got = _fields(back)
    assert len(got) == 300
    by_partition: dict[int, list[int]] = {}
    for p, off, key, _value, _h, _ts in got:
        by_partition.setdefault(p, []).append(off)
        if key is not None:
            assert p == partition_for_key(key, 4)  # where a Kafka producer puts it
    for offsets in by_partition.values():
        assert sorted(offsets) == list(range(len(offsets)))  # contiguous from 0
    sent = sorted(((r.key, r.value, tuple((h.key, h.value) for h in r.headers),
                    r.timestamp) for r in df.collect()), key=repr)
    assert sorted(((k, v, h, ts) for _p, _o, k, v, h, ts in got), key=repr) == sent
    reader = RemoteTopicReader(url)
    assert reader.list_partitions("orders") == [0, 1, 2, 3]


def test_a_failed_job_leaves_nothing_visible_and_no_staging(spark, tmp_path):
    url = f"file://{tmp_path}/tier"
    bad = _frame(spark, 50).repartition(2).withColumn(
        "value", F.expr("CASE WHEN value = X'763439' THEN raise_error('boom') ELSE value END"))
    with pytest.raises(Exception, match="boom"):
        bad.write.format("tierlog").option("path", url).option("topic", "t") \
            .mode("append").save()
    tier = tmp_path / "tier"
    assert not tier.exists() or not [p for p in tier.rglob("*") if p.is_file()]


def test_a_replayed_stream_batch_id_writes_nothing_new(spark, tmp_path):
    from tierlog.spark.write import TierlogStreamWriter

    url = f"file://{tmp_path}/tier"
    writer = TierlogStreamWriter({"path": url, "topic": "s", "streamId": "q"})
    batch = pa.RecordBatch.from_pydict({"key": [b"k"] * 20, "value": [b"v"] * 20})
    for batch_id in (0, 0, 1):
        message = writer.write(iter([batch]))
        writer.commit([message], batch_id)
    assert RemoteTopicReader(url).offset_range("s", 0) == (0, 40)


def test_every_codec_round_trips_through_spark(spark, tmp_path):
    from tierlog.records.compression import CODEC_NAMES

    url = f"file://{tmp_path}/tier"
    df = _frame(spark, 120).repartition(2).cache()
    sent = sorted(((r.key, r.value, tuple((h.key, h.value) for h in r.headers), r.timestamp)
                   for r in df.collect()), key=repr)
    for codec in sorted(CODEC_NAMES):
        (df.write.format("tierlog").option("path", url).option("topic", f"t-{codec}")
         .option("partitions", "2").option("compression", codec).mode("append").save())
    for codec in sorted(CODEC_NAMES):
        got = _fields(_read(spark, url, f"t-{codec}"))
        assert sorted(((k, v, h, ts) for _p, _o, k, v, h, ts in got), key=repr) == sent, codec
    df.unpersist()


def test_a_retried_task_never_duplicates(spark, tmp_path):
    """The session retries a failed task once (local[2,2]); a UDF fails its first attempt
    after the writer staged chunks (small segment.bytes), the retry succeeds."""
    marker = tmp_path / "failed-once"

    @F.udf("binary", useArrow=False)
    def fail_once(value):
        if value == b"v250" and not marker.exists():
            marker.touch()
            raise RuntimeError("first attempt fails")
        return value

    url = f"file://{tmp_path}/tier"
    df = _frame(spark, 300).coalesce(1).withColumn("value", fail_once("value"))
    (df.write.format("tierlog").option("path", url).option("topic", "r")
     .option("segment.bytes", "2000").option("batch.size", "200").mode("append").save())
    assert marker.exists()  # the first attempt did fail
    got = _fields(_read(spark, url, "r"))
    assert [o for _p, o, *_ in got] == list(range(300))  # all once, contiguous
    assert sorted(g[3] for g in got) == sorted(r.value for r in _frame(spark, 300).collect())
    assert not [p for p in (tmp_path / "tier").rglob("_staging/*")]


def test_spark_to_tier_to_log_read_after_adoption(spark, tmp_path, clock):
    """Spark writes a topic, a LogManager adopts it: Log.read returns exactly what Spark
    reads back (every field), appends continue at the end, and Spark may no longer write it."""
    from support.backfill_rows import log_batches, manager_config

    from tierlog.manager.log_manager import LogManager
    from tierlog.records.batch import iter_batches
    from tierlog.records.record import Record

    url = f"file://{tmp_path}/tier"
    df = _frame(spark, 200).repartition(2)
    (df.write.format("tierlog").option("path", url).option("topic", "a")
     .option("partitions", "2").option("compression", "snappy").mode("append").save())
    spark_rows = _fields(_read(spark, url, "a"))
    with LogManager.open(tmp_path / "data", manager_config(url), time_ms=clock,
                         start_scheduler=False) as mgr:
        logs = mgr.adopt_topic("a")
        from_log = []
        for partition_log in logs:
            end = partition_log.log_end_offset
            for data in log_batches(partition_log, 0, end):
                for b in iter_batches(data, strict=True):
                    from_log += [(partition_log.partition, r.offset, r.key, r.value,
                                  tuple(r.headers),
                                  dt.datetime.fromtimestamp(r.timestamp / 1000, UTC))
                                 for r in b.records()]
            info = partition_log.append_records([Record(b"k", b"after", timestamp=1)])
            assert info.first_offset == end
        norm = sorted((p, o, k, v, h, ts.replace(tzinfo=UTC) if ts.tzinfo is None else ts)
                      for p, o, k, v, h, ts in spark_rows)
        assert sorted(from_log) == [(p, o, k, v, h, ts.astimezone(UTC))
                                    for p, o, k, v, h, ts in norm]
        with pytest.raises(Exception, match="is owned by LogManager on"):
            (df.write.format("tierlog").option("path", url).option("topic", "a")
             .mode("append").save())


def test_spark_round_trip_on_s3(spark, s3_endpoint, s3_options):
    import json
    import uuid

    from support.s3 import S3_BUCKET

    url = f"s3://{S3_BUCKET}/spark-write-{uuid.uuid4().hex[:10]}"
    opts = {"path": url, "storage.endpoint_url": s3_endpoint, "storage.key": s3_options["key"],
            "storage.secret": s3_options["secret"],
            "storage.client_kwargs": json.dumps({"region_name": s3_options["region"]})}
    df = _frame(spark, 150).repartition(2)
    df.write.format("tierlog").options(**opts).option("topic", "s3t").option(
        "partitions", "3").option("compression", "lz4").mode("append").save()
    got = _fields(spark.read.format("tierlog").options(**opts).option("subscribe", "s3t")
                  .option("includeHeaders", "true").load())
    sent = sorted(((r.key, r.value, tuple((h.key, h.value) for h in r.headers), r.timestamp)
                   for r in df.collect()), key=repr)
    assert sorted(((k, v, h, ts) for _p, _o, k, v, h, ts in got), key=repr) == sent
