"""``df.write.format("tierlog")`` and ``df.writeStream.format("tierlog")`` on a real local
Spark: round trips Spark -> tier -> Spark byte-equal, keyed placement, failed jobs, retried
tasks and replayed stream batches."""

from __future__ import annotations

import datetime as dt

import pyarrow as pa
import pytest
from pyspark.sql import functions as F

from tierlog.partitioner import partition_for_key
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
