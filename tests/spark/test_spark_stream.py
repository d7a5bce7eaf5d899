"""``spark.readStream.format("tierlog")``: a stream of a real LogManager's topics through its
tail publishing, byte-equal with ``Log.read`` in every field (local and S3 over moto's
server), Spark's Kafka source options (startingOffsets variants, startingTimestamp,
maxOffsetsPerTrigger, Trigger.AvailableNow, failOnDataLoss, subscribePattern picking up new
topics from earliest), and exactly once across a SIGKILL of the driver mid-batch.

The offset JSON, the admission control and the planning of a micro-batch's range are also
tested without Spark, on the functions the stream reader calls.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import textwrap
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pyspark.errors import StreamingQueryException
from support.tier_builder import local_records, records_of

from tierlog import Record
from tierlog.errors import ConfigError, OffsetOutOfRangeError
from tierlog.manager.log_manager import LogManager
from tierlog.spark import TierlogOptions
from tierlog.spark.stream_offsets import from_json, rate_limit, to_json
from tierlog.spark.stream_plan import (
    initial_offsets,
    latest_offsets,
    open_reader,
    plan_range,
    read_stream_split,
)

ROOT = Path(__file__).resolve().parents[2]
RU, RC = "read_uncommitted", "read_committed"
CODECS = ("none", "gzip", "snappy", "lz4", "zstd")


def tier_config(url: str, storage: dict[str, Any] | None = None, **extra: Any) -> dict[str, Any]:
    """A LogManager tiering to ``url`` with tail publishing every second."""
    manager = "s3" if url.startswith("s3://") else "local"
    config = {"segment.bytes": 4096, "remote.storage.enable": True,
              "remote.storage.manager": manager, "remote.storage.url": url,
              "remote.log.tail.ms": 1000, "local.retention.bytes": 0, **extra}
    for key, value in (storage or {}).items():
        config[f"remote.storage.options.{key}"] = value
    return config


class Producer:
    """Appends varied records (keys, null keys and values, headers, every codec, aborted and
    committed transactions) to a manager's partitions and publishes them to the tier."""

    def __init__(self, manager: LogManager, clock: Any) -> None:
        self.manager = manager
        self.clock = clock
        self.n = 0
        self.sequences: dict[tuple[str, int, int], int] = {}

    def records(self, count: int) -> list[Record]:
        out = []
        for _ in range(count):
            i = self.n
            self.n += 1
            self.clock.advance(3)
            out.append(Record(key=None if i % 7 == 3 else b"k%d" % i,
                              value=None if i % 11 == 5 else b"value-%d-" % i * (1 + i % 4),
                              headers=(("h", b"x%d" % i), ("empty", None)) if i % 3 == 0 else (),
                              timestamp=self.clock.now))
        return out

    def append(self, topic: str, partition: int, count: int, *, txn: int | None = None,
               commit: bool = True) -> None:
        log = self.manager.log(topic, partition)
        codec = CODECS[self.n % len(CODECS)]
        if txn is None:
            log.append_records(self.records(count), compression=codec)
            return
        key = (topic, partition, txn)
        seq = self.sequences.get(key, 0)
        log.append_records(self.records(count), compression=codec, producer_id=txn,
                           producer_epoch=0, base_sequence=seq, transactional=True)
        self.sequences[key] = seq + count
        log.append_marker(txn, 0, commit=commit)

    def fill(self, topic: str, partitions: int, rounds: int) -> None:
        for r in range(rounds):
            for p in range(partitions):
                self.append(topic, p, 5 + (r + p) % 4)
                if r % 3 == 1:
                    self.append(topic, p, 3, txn=100 + p, commit=r % 2 == 0)

    def publish(self) -> None:
        """Commit closed segments and publish the tail: the tier holds everything."""
        for log in self.manager.logs().values():
            log.update_high_watermark(log.log_end_offset)
        self.manager.tier_now()
        self.manager.publish_tail_now()


def expected(manager: LogManager, topic: str, isolation: str = RU,
             start: dict[int, int] | None = None) -> list[tuple[int, Record]]:
    """``(partition, record)`` of every record ``Log.read`` gives a consumer, in order."""
    out = []
    for p in manager.partitions(topic):
        first = (start or {}).get(p, 0)
        out += [(p, r) for r in local_records(manager.log(topic, p), isolation)
                if r.offset >= first]
    return out


MANAGER_CONFIG = tier_config  # what the manager fixture opens, tiering to tier_url


@pytest.fixture
def producer(manager: LogManager, clock: Any) -> Producer:
    return Producer(manager, clock)


def options(url: str, **extra: str) -> TierlogOptions:
    return TierlogOptions.parse({"path": url, **extra}, streaming=True)


# -- offsets and admission control, without Spark ----------------------------------------------

partition_offsets = st.dictionaries(
    st.tuples(st.sampled_from(["orders", "clicks", "a.b-c_d"]), st.integers(0, 50)),
    st.integers(0, 1 << 62), max_size=12)


@settings(max_examples=200, deadline=None)
@given(partition_offsets)
def test_offsets_round_trip_through_spark_kafka_json(offsets: dict[tuple[str, int], int]) -> None:
    data = to_json(offsets)
    assert from_json(json.loads(json.dumps(data))) == offsets
    assert all(isinstance(p, str) for parts in data.values() for p in parts)
    assert to_json(dict(reversed(list(offsets.items())))) == data  # one JSON per offsets


@pytest.mark.parametrize("bad", [[1], {"orders": 3}, {"orders": {"x": 1}},
                                 {"orders": {"0": -1}}, {"orders": {"0": True}}])
def test_offsets_that_are_not_kafka_json_are_refused(bad: Any) -> None:
    with pytest.raises(ConfigError, match="start offset"):
        from_json(bad, "start offset")


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_rate_limit_shares_the_limit_in_proportion(data: Any) -> None:
    latest = data.draw(st.dictionaries(st.tuples(st.just("t"), st.integers(0, 8)),
                                       st.integers(0, 10_000), min_size=1))
    start = {tp: data.draw(st.integers(0, end)) for tp, end in latest.items()
             if data.draw(st.booleans())}
    new = {tp: data.draw(st.integers(0, end)) for tp, end in latest.items() if tp not in start}
    limit = data.draw(st.integers(1, 20_000))
    out = rate_limit(limit, start, latest, new)
    assert set(out) == set(latest)
    begin = {**new, **start}
    backlog = {tp: latest[tp] - begin[tp] for tp in latest if latest[tp] > begin[tp]}
    total = sum(backlog.values())
    for tp, end in out.items():
        assert end <= latest[tp]
        if tp in backlog:
            assert end > begin[tp]  # never starved
            assert end - begin[tp] <= max(1, limit * backlog[tp] // total + 1)
    if total and limit >= total:
        assert out == latest
    taken = sum(out[tp] - begin[tp] for tp in backlog)
    assert taken <= limit + len(backlog)


def test_spark_kafka_rate_limit_example() -> None:
    """Spark's own example: 10 offsets over backlogs of 30 and 10 -> 7 and 2 (rounded down),
    and a backlog too small for a whole share still gets one."""
    out = rate_limit(10, {("t", 0): 0, ("t", 1): 0}, {("t", 0): 30, ("t", 1): 10}, {})
    assert out == {("t", 0): 7, ("t", 1): 2}
    out = rate_limit(10, {("t", 0): 0}, {("t", 0): 1000, ("t", 1): 5}, {("t", 1): 4})
    assert out == {("t", 0): 9, ("t", 1): 5}


def test_stream_options_start_at_latest_and_refuse_an_end(tier_url: str) -> None:
    assert options(tier_url, subscribe="orders").starting_offsets == "latest"
    assert TierlogOptions.parse({"path": tier_url, "subscribe": "o"}).starting_offsets \
        == "earliest"
    assert options(tier_url, subscribe="o", maxOffsetsPerTrigger="5").max_offsets_per_trigger \
        == 5
    for key in ("endingOffsets", "endingTimestamp", "endingOffsetsByTimestamp"):
        with pytest.raises(ConfigError, match=f"{key.lower()}.*streaming"):
            options(tier_url, subscribe="o", **{key: "latest"})
    with pytest.raises(ConfigError, match="maxoffsetspertrigger"):
        options(tier_url, subscribe="o", maxOffsetsPerTrigger="0")


def test_initial_offsets_follow_the_starting_options(manager, producer, tier_url, clock) -> None:
    manager.create_topic("orders", 2)
    producer.fill("orders", 2, 6)
    producer.publish()
    reader = open_reader(options(tier_url, subscribe="orders"))
    ends = {(t, p): manager.log(t, p).high_watermark for t, p in [("orders", 0), ("orders", 1)]}
    manager.log("orders", 0).delete_records_before(4)
    producer.publish()
    assert initial_offsets(options(tier_url, subscribe="orders"), reader) == ends
    assert initial_offsets(options(tier_url, subscribe="orders", startingOffsets="earliest"),
                           reader) == {("orders", 0): 4, ("orders", 1): 0}
    given_ = '{"orders": {"0": -1, "1": 7}}'
    assert initial_offsets(options(tier_url, subscribe="orders", startingOffsets=given_),
                           reader) == {("orders", 0): ends[("orders", 0)], ("orders", 1): 7}
    # A timestamp: the first offset stamped at or after it (the records are 3 ms apart).
    rows = expected(manager, "orders")
    target = next(r for p, r in rows if p == 1 and r.offset >= 20)
    by_ts = options(tier_url, subscribe="orders", startingTimestamp=str(target.timestamp))
    got = initial_offsets(by_ts, reader)
    assert got[("orders", 1)] == target.offset
    later = [r.offset for p, r in rows if p == 0 and r.timestamp >= target.timestamp]
    assert got[("orders", 0)] == later[0]
    with pytest.raises(OffsetOutOfRangeError, match="no offset matches starting timestamp"):
        initial_offsets(options(tier_url, subscribe="orders",
                                startingTimestamp=str(clock.now + 10_000),
                                startingOffsetsByTimestampStrategy="error"), reader)
    assert initial_offsets(options(tier_url, subscribe="orders",
                                   startingTimestamp=str(clock.now + 10_000),
                                   startingOffsetsByTimestampStrategy="latest"), reader) == ends


def read_range(opts: TierlogOptions, start: dict[tuple[str, int], int],
               end: dict[tuple[str, int], int]) -> list[tuple[int, Record]]:
    rows: list[Any] = []
    for part in plan_range(opts, open_reader(opts), start, end):
        for batch in read_stream_split(part):
            rows += batch.to_pylist()
    return records_of(rows)


def test_a_range_planned_over_the_tail_reads_the_same_after_its_segment_commits(
        manager, producer, tier_url) -> None:
    """Exactly once needs ``partitions(start, end)`` to read the same records whenever it
    runs: planned while the offsets are in tail objects, read after those objects were
    deleted (their segment committed), and planned again then."""
    manager.create_topic("orders", 1)
    log = manager.log("orders", 0)
    producer.fill("orders", 1, 3)
    producer.publish()
    committed = log.highest_offset_in_remote + 1
    producer.fill("orders", 1, 3)  # in the active segment: the tail only
    producer.publish()
    opts = options(tier_url, subscribe="orders", includeHeaders="true")
    start = {("orders", 0): committed + 2}
    end = latest_offsets(opts, open_reader(opts))
    assert end[("orders", 0)] == log.high_watermark > committed + 2
    planned = plan_range(opts, open_reader(opts), start, end)
    assert planned and all("/_tail/" in p.split.log_path for p in planned)
    want = [(p, r) for p, r in expected(manager, "orders") if r.offset >= committed + 2]
    log.roll()
    producer.fill("orders", 1, 2)  # past ``end``: never read by this range
    producer.publish()
    assert not list((Path(tier_url[7:])).glob("*/_tail/" + Path(planned[0].split.log_path).name))
    rows: list[Any] = []
    for part in planned:
        for batch in read_stream_split(part):
            rows += batch.to_pylist()
    assert records_of(rows) == want
    assert read_range(opts, start, end) == want


def test_offsets_lost_to_retention_fail_or_are_skipped_naming_them(
        manager, producer, tier_url, caplog) -> None:
    manager.create_topic("orders", 2)
    producer.fill("orders", 2, 6)
    producer.publish()
    end = latest_offsets(options(tier_url, subscribe="orders"), open_reader(options(
        tier_url, subscribe="orders")))
    start = {("orders", 0): 3, ("orders", 1): 0}
    manager.log("orders", 0).delete_records_before(10)
    producer.publish()
    strict = options(tier_url, subscribe="orders", includeHeaders="true")
    with pytest.raises(OffsetOutOfRangeError,
                       match=r"^orders-0: starting offset 3 is below the earliest offset in the "
                             r"tier, 10: offsets 3 to 9 were deleted .*failOnDataLoss=false"):
        plan_range(strict, open_reader(strict), start, end)
    lenient = options(tier_url, subscribe="orders", includeHeaders="true",
                      failOnDataLoss="false")
    with caplog.at_level(logging.WARNING, "tierlog.reader"):
        rows = read_range(lenient, start, end)
        # A batch ending below the earliest names only its own lost offsets, and reads none.
        assert read_range(lenient, {("orders", 0): 3}, {("orders", 0): 6}) == []
    assert rows == expected(manager, "orders")  # everything the log still has
    assert [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING] == [
        ("orders-0: starting offset 3 is below the earliest offset in the tier, 10: offsets 3 "
        "to 9 were deleted (retention or DeleteRecords); reading from 10 (fail_on_data_loss "
        "is off)"),
        ("orders-0: starting offset 3 is below the earliest offset in the tier, 10: offsets 3 "
        "to 5 were deleted (retention or DeleteRecords); reading from 10 (fail_on_data_loss "
        "is off)")]


def test_new_partitions_and_topics_are_read_from_their_earliest(manager, producer,
                                                                tier_url) -> None:
    manager.create_topic("orders", 2)
    manager.create_topic("orders-eu", 1)
    producer.fill("orders", 2, 3)
    producer.fill("orders-eu", 1, 3)
    manager.log("orders-eu", 0).delete_records_before(2)
    producer.publish()
    opts = options(tier_url, subscribePattern="orders.*", includeHeaders="true")
    end = latest_offsets(opts, open_reader(opts))
    assert set(end) == {("orders", 0), ("orders", 1), ("orders-eu", 0)}
    start = {("orders", 0): 5}  # orders-1 and orders-eu are new since
    rows = read_range(opts, start, end)
    assert rows == [(p, r) for p, r in expected(manager, "orders") if p == 1 or r.offset >= 5] \
        + expected(manager, "orders-eu")
    assert rows[-1][1].offset == end[("orders-eu", 0)] - 1
    assert expected(manager, "orders-eu")[0][1].offset == 2  # its earliest


# -- Spark ----------------------------------------------------------------------------------


def stream(spark: Any, url: str, storage: dict[str, Any] | None = None, **opts: str) -> Any:
    reader = spark.readStream.format("tierlog").option("path", url)
    for key, value in (storage or {}).items():
        reader = reader.option(f"storage.{key}", str(value))
    for key, value in opts.items():
        reader = reader.option(key, value)
    return reader.load()


class Collector:
    """A ``foreachBatch`` sink keeping each micro-batch's rows."""

    def __init__(self) -> None:
        self.batches: list[list[dict[str, Any]]] = []

    def __call__(self, df: Any, batch_id: int) -> None:
        self.batches.append([r.asDict(recursive=True) for r in df.collect()])

    @property
    def rows(self) -> list[dict[str, Any]]:
        return sorted((r for b in self.batches for r in b),
                      key=lambda r: (r["topic"], r["partition"], r["offset"]))


def run_available_now(df: Any, checkpoint: Path) -> Collector:
    sink = Collector()
    query = (df.writeStream.foreachBatch(sink).option("checkpointLocation", str(checkpoint))
             .trigger(availableNow=True).start())
    query.awaitTermination(120)
    assert not query.isActive
    if query.exception() is not None:
        raise AssertionError(str(query.exception()))
    return sink


@pytest.mark.parametrize("isolation", [RU, RC])
def test_stream_is_byte_equal_with_log_read(spark, manager, producer, tier_url, tmp_path,
                                            isolation) -> None:
    manager.create_topic("orders", 2)
    producer.fill("orders", 2, 9)
    producer.append("orders", 0, 4, txn=300, commit=False)  # open: read_committed stops before
    producer.publish()
    assert any("/_tail/" in str(p) for p in (tmp_path / "tier").rglob("*.log"))
    df = stream(spark, tier_url, subscribe="orders", startingOffsets="earliest",
                includeHeaders="true", **{"isolation.level": isolation})
    sink = run_available_now(df, tmp_path / "ckpt")
    want = expected(manager, "orders", isolation)
    if isolation == RC:
        lso = manager.log("orders", 0).last_stable_offset
        want = [(p, r) for p, r in want if p == 1 or r.offset < lso]
    assert records_of(sink.rows) == want
    assert {(r["topic"], r["timestampType"]) for r in sink.rows} == {("orders", 0)}


def test_stream_from_s3_is_byte_equal_with_log_read(spark, tmp_path, clock, s3_options,
                                                    s3_endpoint) -> None:
    url = f"s3://tierlog-tests/stream-{uuid.uuid4().hex[:8]}"
    mgr = LogManager.open(tmp_path / "data", tier_config(url, s3_options), time_ms=clock,
                          start_scheduler=False)
    try:
        mgr.create_topic("orders", 2)
        producer = Producer(mgr, clock)
        producer.fill("orders", 2, 6)
        producer.publish()
        df = stream(spark, url, s3_options, subscribe="orders", startingOffsets="earliest",
                    includeHeaders="true")
        sink = run_available_now(df, tmp_path / "ckpt")
        assert records_of(sink.rows) == expected(mgr, "orders")
        producer.fill("orders", 2, 2)  # the same query, restarted, reads only what is new
        producer.publish()
        sink = run_available_now(df, tmp_path / "ckpt")
        first_new = {p: max(r.offset for q, r in expected(mgr, "orders") if q == p) for p in
                     (0, 1)}
        assert len(sink.rows) > 0
        assert all(r["offset"] <= first_new[r["partition"]] for r in sink.rows)
        assert records_of(sink.rows)[-1][1] == expected(mgr, "orders")[-1][1]
    finally:
        mgr.close()


def test_a_user_schema_streams_just_its_columns(spark, manager, producer, tier_url,
                                                tmp_path) -> None:
    manager.create_topic("orders", 1)
    producer.fill("orders", 1, 3)
    producer.publish()
    df = (spark.readStream.format("tierlog").schema("offset long, value binary")
          .option("path", tier_url).option("subscribe", "orders")
          .option("startingOffsets", "earliest").load())
    sink = run_available_now(df, tmp_path / "ckpt")
    got = sorted((r["offset"], r["value"]) for b in sink.batches for r in b)
    assert got == [(r.offset, r.value) for _, r in expected(manager, "orders")]
    assert {tuple(r) for b in sink.batches for r in b} == {("offset", "value")}


def test_max_offsets_per_trigger_with_available_now(spark, manager, producer, tier_url,
                                                    tmp_path) -> None:
    manager.create_topic("orders", 2)
    for _ in range(6):
        producer.append("orders", 0, 5)
    producer.append("orders", 1, 10)
    producer.publish()
    df = stream(spark, tier_url, subscribe="orders", startingOffsets="earliest",
                maxOffsetsPerTrigger="10", includeHeaders="true")
    sink = run_available_now(df, tmp_path / "ckpt")
    # 30 and 10 offsets, 10 a batch: 7 + 2, then 7 + 2, 7 + 2, then what is left.
    sizes = [sorted({r["partition"]: 0 for r in b}.keys()) and
             [sum(1 for r in b if r["partition"] == p) for p in (0, 1)] for b in sink.batches]
    assert sizes[:3] == [[7, 2], [7, 2], [7, 2]]
    assert all(sum(s) <= 10 for s in sizes)
    assert records_of(sink.rows) == expected(manager, "orders")
    # AvailableNow stops at the ends it saw when it began.
    producer.append("orders", 0, 5)
    producer.publish()
    sink = run_available_now(df, tmp_path / "ckpt")
    assert [len(b) for b in sink.batches] == [5]


def test_latest_start_reads_only_what_arrives_after(spark, manager, producer, tier_url,
                                                    tmp_path) -> None:
    manager.create_topic("orders", 1)
    producer.fill("orders", 1, 3)
    producer.publish()
    sink = Collector()
    query = (stream(spark, tier_url, subscribe="orders", includeHeaders="true")
             .writeStream.foreachBatch(sink)
             .option("checkpointLocation", str(tmp_path / "ckpt")).start())
    try:
        query.processAllAvailable()
        assert sink.rows == []
        before = manager.log("orders", 0).high_watermark
        producer.fill("orders", 1, 2)
        producer.publish()
        query.processAllAvailable()
    finally:
        query.stop()
    assert records_of(sink.rows) == [(p, r) for p, r in expected(manager, "orders")
                                     if r.offset >= before]


def test_subscribe_pattern_picks_up_a_new_topic_from_earliest(spark, manager, producer,
                                                              tier_url, tmp_path) -> None:
    manager.create_topic("orders", 1)
    producer.fill("orders", 1, 2)
    producer.publish()
    sink = Collector()
    query = (stream(spark, tier_url, subscribePattern="orders.*", startingOffsets="latest",
                    includeHeaders="true")
             .writeStream.foreachBatch(sink)
             .option("checkpointLocation", str(tmp_path / "ckpt")).start())
    try:
        query.processAllAvailable()
        manager.create_topic("orders-eu", 2)
        producer.fill("orders-eu", 2, 3)
        producer.publish()
        query.processAllAvailable()
    finally:
        query.stop()
    assert records_of(sink.rows) == expected(manager, "orders-eu")


def test_fail_on_data_loss_in_a_stream(spark, manager, producer, tier_url, tmp_path) -> None:
    manager.create_topic("orders", 1)
    producer.fill("orders", 1, 2)
    producer.publish()
    log = manager.log("orders", 0)
    df = stream(spark, tier_url, subscribe="orders", startingOffsets="earliest")
    read = run_available_now(df, tmp_path / "ckpt").rows
    assert len(read) == len(expected(manager, "orders"))
    # New records, then retention removes some of them before the query reads them.
    unread = log.high_watermark
    producer.fill("orders", 1, 3)
    producer.publish()
    log.delete_records_before(unread + 4)
    producer.publish()
    with pytest.raises(StreamingQueryException,
                       match=rf"orders-0: starting offset {unread} is below the earliest offset "
                             rf"in the tier, {unread + 4}: offsets {unread} to {unread + 3} were "
                             rf"deleted .*failOnDataLoss=false"):
        run_available_now(df, tmp_path / "ckpt")
    lenient = stream(spark, tier_url, subscribe="orders", startingOffsets="earliest",
                     failOnDataLoss="false")
    sink = run_available_now(lenient, tmp_path / "ckpt")
    assert [r["offset"] for r in sink.rows] == [r.offset for _, r in expected(manager, "orders")]
    assert sink.rows[0]["offset"] == unread + 4


# -- exactly once across a SIGKILL of the driver ---------------------------------------------

#: The driver of the kill test: a streaming query of the tier into Spark's parquet file sink.
#: With KILL_AT_OFFSET set, the task reading partition 0 from that offset on writes a marker
#: and stops there (its batch's other task may have written its file): the test SIGKILLs the
#: driver's process group at that moment, mid-batch.
DRIVER = textwrap.dedent("""
    import os, sys, time
    from pathlib import Path
    import tierlog.spark
    from tierlog.spark import TierlogDataSource
    from tierlog.spark.stream import TierlogStreamReader
    url, out, ckpt, marker = sys.argv[1:5]
    kill_at = int(os.environ.get("KILL_AT_OFFSET", "-1"))

    class Killable(TierlogStreamReader):
        def read(self, partition):
            split = partition.value.split
            if kill_at >= 0 and split.partition == 0 and split.start_offset >= kill_at:
                Path(marker).write_text(str(split.start_offset))
                deadline = time.monotonic() + 120  # our driver is being killed
                while time.monotonic() < deadline and os.getppid() != 1:
                    time.sleep(0.1)
                os._exit(1)
            return super().read(partition)

    class KillableSource(TierlogDataSource):
        @classmethod
        def name(cls):
            return "tierlog_killable"

        def streamReader(self, schema):
            return Killable(super().streamReader(schema).options)

    spark = tierlog.spark.session("kill-test", "local[2]",
                                  **{"spark.sql.shuffle.partitions": "2"})
    spark.sparkContext.setLogLevel("ERROR")
    spark.dataSource.register(KillableSource)
    query = (spark.readStream.format("tierlog_killable").option("path", url)
             .option("subscribe", "orders").option("startingOffsets", "earliest")
             .option("maxOffsetsPerTrigger", "30").option("includeHeaders", "true").load()
             .writeStream.format("parquet").option("path", out)
             .option("checkpointLocation", ckpt).trigger(availableNow=True).start())
    query.awaitTermination()
    spark.stop()
    """)


def committed_rows(out: Path) -> list[dict[str, Any]]:
    """The rows of the files Spark's file sink committed (its ``_spark_metadata`` log):
    what any reader of the sink sees."""
    import pyarrow.parquet as pq

    paths: list[str] = []
    for entry in sorted((out / "_spark_metadata").iterdir()):
        if entry.name.startswith("."):
            continue
        for line in entry.read_text().splitlines()[1:]:
            record = json.loads(line)
            if record["action"] == "add":
                paths.append(record["path"].removeprefix("file://"))
    rows: list[dict[str, Any]] = []
    for path in paths:
        rows += pq.read_table(path).to_pylist()
    return rows


def run_driver(script: Path, args: list[str], env: dict[str, str], marker: Path | None
               ) -> None:
    """Run the driver to its end, or (``marker``) until a task writes the marker: then
    SIGKILL its whole process group (the JVM and Python workers with it)."""
    proc = subprocess.Popen([sys.executable, str(script), *args], env=env, cwd=script.parent,
                            start_new_session=True, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    try:
        if marker is None:
            output, _ = proc.communicate(timeout=240)
            assert proc.returncode == 0, output[-3000:]
            return
        deadline = time.monotonic() + 240
        while not marker.exists():  # an external process: polled, with a deadline
            assert proc.poll() is None, f"the driver ended first:\n{proc.stdout.read()[-3000:]}"
            assert time.monotonic() < deadline, "the driver never reached the kill point"
            time.sleep(0.05)
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=60)
        assert proc.returncode == -signal.SIGKILL
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=60)
        if proc.stdout is not None:
            proc.stdout.close()


def test_exactly_once_across_sigkill_of_the_driver(manager, producer, tier_url, tmp_path) -> None:
    """A driver is SIGKILLed mid-batch (a task of the batch running, its file sink's other
    task maybe done), then restarted from its checkpoint: the file sink holds every record
    exactly once, and new records produced in between are read too."""
    manager.create_topic("orders", 2)
    producer.fill("orders", 2, 12)
    producer.publish()
    script = tmp_path / "driver.py"
    script.write_text(DRIVER)
    out, ckpt, marker = tmp_path / "out", tmp_path / "ckpt", tmp_path / "marker"
    args = [tier_url, str(out), str(ckpt), str(marker)]
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable,
           "PYSPARK_DRIVER_PYTHON": sys.executable, "SPARK_LOCAL_IP": "127.0.0.1"}
    run_driver(script, args, {**env, "KILL_AT_OFFSET": "40"}, marker)
    assert int(marker.read_text()) >= 40
    planned = {int(f.name) for f in (ckpt / "offsets").iterdir() if f.name.isdigit()}
    done = {int(f.name) for f in (ckpt / "commits").iterdir() if f.name.isdigit()}
    assert max(planned) not in done  # the batch it was killed in was planned, not committed
    before = committed_rows(out)
    assert 0 < len(before) < len(expected(manager, "orders"))  # killed mid-query
    producer.fill("orders", 2, 2)
    producer.publish()
    run_driver(script, args, env, None)
    rows = sorted(committed_rows(out), key=lambda r: (r["partition"], r["offset"]))
    assert records_of(rows) == expected(manager, "orders")  # each exactly once
