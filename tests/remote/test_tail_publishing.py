"""Tail publishing (``remote.log.tail.ms``): readers of the tier return exactly what a Kafka
consumer reads from the engine, at both isolation levels, with the tail on and off, after
DeleteRecords, retention, truncation and a crash losing unflushed data; publishing is
incremental, crash-safe, at most once per interval and silent when nothing changed."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support.fault_fs import fault_storage
from support.txn_layouts import ABORTER, COMMITTER, LAYOUTS, RC, LayoutWriter

from tierlog import Record
from tierlog.config import LogConfig
from tierlog.errors import ConfigError, CorruptRemoteMetadataError
from tierlog.index.transaction_index import AbortedTxn
from tierlog.manager.log_manager import LogManager
from tierlog.reader import RemoteTopicReader
from tierlog.remote import TopicIdPartition
from tierlog.remote.tier.layout import is_tail_object_name, tail_object_name
from tierlog.remote.tier.tail_manifest import TailManifest, TailObject

RU = "read_uncommitted"
LEVELS = (RU, RC)
ROOT = Path(__file__).resolve().parents[2]


def consumer(log: Any, isolation: str, start: int | None = None) -> list[tuple[int, bytes]]:
    """(offset, key) of every record a consumer at ``isolation`` fetches from ``start`` (the
    log start offset) on, fetch by fetch as a consumer does."""
    out: list[tuple[int, bytes]] = []
    offset = log.log_start_offset if start is None else start
    while True:
        info = log.read(offset, max_bytes=700, isolation=isolation)
        batches = list(info.batches())
        if not batches:
            return out
        out += [(r.offset, r.key) for r in info.records() if r.offset >= offset]
        offset = batches[-1].next_offset


def tier_rows(reader: RemoteTopicReader, isolation: str, **options: Any
              ) -> list[tuple[int, bytes]]:
    rows = reader.read_table("orders", isolation_level=isolation, **options).to_pylist()
    return [(r["offset"], r["key"]) for r in rows]


def config(url: str, tail_ms: int = 1000, **extra: Any) -> dict[str, Any]:
    return {"segment.bytes": 1 << 20, "remote.storage.enable": True,
            "remote.storage.manager": "local", "remote.storage.url": url,
            "remote.log.tail.ms": tail_ms, "local.retention.bytes": 0, **extra}


MANAGER_CONFIG = config  # what the manager fixture opens, tiering to tier_url


def tail_names(tmp_path: Path) -> list[str]:
    return sorted(p.name for p in (tmp_path / "tier").glob("*/_tail/*.log"))


def _open_txn_after(w: LayoutWriter) -> None:
    """Data past the committed segments: plain records, an aborted and a committed
    transaction, and an open one (the last stable offset stops before it)."""
    w.plain(); w.txn(ABORTER); w.txn(COMMITTER); w.plain(); w.end(ABORTER); w.end(COMMITTER)
    w.plain(); w.txn(ABORTER); w.plain()


# -- exactly what a consumer reads -----------------------------------------------------------


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("tail_on", [True, False])
def test_reader_returns_what_a_consumer_reads(tmp_path, clock, tier_url, layout, tail_on):
    mgr = LogManager.open(tmp_path / "data", config(tier_url, 1000 if tail_on else -1),
                          time_ms=clock, start_scheduler=False)
    try:
        log = mgr.create_topic("orders", 1)[0]
        w = LayoutWriter(log)
        LAYOUTS[layout](w)
        mgr.tier_now()
        _open_txn_after(w)
        assert mgr.publish_tail_now() == ({"orders-0": True} if tail_on else {})
        reader = RemoteTopicReader(tier_url)
        tier_end = log.highest_offset_in_remote + 1
        for level in LEVELS:
            expected = consumer(log, level)
            latest = reader.offset_range("orders", 0, isolation_level=level)[1]
            if tail_on:  # everything a consumer reads
                upper = log.high_watermark if level == RU else log.last_stable_offset
                assert latest == upper
                assert reader.latest_offsets("orders", isolation_level=level) == {0: upper}
            else:  # the committed segments only
                assert latest <= tier_end
                expected = [(o, k) for o, k in expected if o < latest]
            assert tier_rows(reader, level) == expected, level
            for start in range(0, latest, 5):
                assert tier_rows(reader, level, starting_offsets={0: start}) == \
                    [(o, k) for o, k in expected if o >= start], (level, start)
            for end in range(1, latest, 4):
                assert tier_rows(reader, level, ending_offsets={0: end}) == \
                    [(o, k) for o, k in expected if o < end], (level, end)
    finally:
        mgr.close()


def test_the_tail_alone_before_any_segment_closes(manager, tier_url):
    log = manager.create_topic("orders", 1)[0]
    w = LayoutWriter(log)
    _open_txn_after(w)
    manager.publish_tail_now()
    reader = RemoteTopicReader(tier_url)
    assert reader.list_segments("orders", 0) == []
    for level in LEVELS:
        assert tier_rows(reader, level) == consumer(log, level)
    assert reader.latest_offsets("orders", isolation_level=RC) == {0: log.last_stable_offset}
    assert log.last_stable_offset < log.high_watermark  # the open transaction


def test_timestamps_resolve_in_the_tail(manager, tier_url, clock):
    log = manager.create_topic("orders", 1)[0]
    for i in range(30):
        log.append_records([Record(key=b"k%d" % i, value=b"v", timestamp=1000 + 10 * i)])
    manager.publish_tail_now()
    reader = RemoteTopicReader(tier_url)
    rows = tier_rows(reader, RU, starting_timestamp=1095, ending_timestamp=1200)
    assert [o for o, _ in rows] == list(range(10, 20))


def test_delete_records_and_retention_move_the_tail_start(manager, tier_url, tmp_path):
    log = manager.create_topic("orders", 1)[0]
    w = LayoutWriter(log)
    w.plain(10); log.roll(); w.plain(10)
    manager.tier_now()
    w.plain(10)
    manager.publish_tail_now()
    log.delete_records_before(25)  # inside the tail, above the committed segment
    assert manager.publish_tail_now() == {"orders-0": True}
    reader = RemoteTopicReader(tier_url)
    for level in LEVELS:
        assert tier_rows(reader, level) == consumer(log, level)
        assert tier_rows(reader, level)[0][0] == 25
    assert reader.offset_range("orders", 0) == (25, 30)
    manager.tier_now()  # remote retention drops the segment below the log start
    manager.publish_tail_now()
    assert tier_rows(reader, RU) == consumer(log, RU)


def test_retention_by_size_deletes_tail_objects_with_their_segments(tmp_path, clock, tier_url):
    mgr = LogManager.open(tmp_path / "data", config(tier_url, **{"segment.bytes": 2048,
                                                                 "retention.bytes": 4096}),
                          time_ms=clock, start_scheduler=False)
    try:
        log = mgr.create_topic("orders", 1)[0]
        w = LayoutWriter(log)
        for _ in range(16):
            w.plain(8)
            mgr.publish_tail_now()
        mgr.tier_now()
        mgr.publish_tail_now()
        assert log.log_start_offset > 0
        reader = RemoteTopicReader(tier_url)
        assert tier_rows(reader, RU) == consumer(log, RU)
        stored = TailManifest.from_json(next((tmp_path / "tier").glob("*/_tail.json"))
                                        .read_bytes(), "t")
        assert sorted(o.name for o in stored.objects) == tail_names(tmp_path)
        assert all(o.end_offset > log.highest_offset_in_remote for o in stored.objects)
    finally:
        mgr.close()


# -- incremental, consistent with copies, truncation -------------------------------------------


def test_incremental_objects_and_deletion_once_copied(manager, tier_url, tmp_path):
    log = manager.create_topic("orders", 1)[0]
    w = LayoutWriter(log)
    w.plain(5)
    manager.publish_tail_now()
    first = tail_names(tmp_path)
    w.plain(5)
    manager.publish_tail_now()
    second = tail_names(tmp_path)
    assert len(first) == 1 and set(first) < set(second) and len(second) == 2  # never rewritten
    log.roll()
    w.plain(3)
    manager.tier_now()  # the first segment is committed: its tail objects go
    assert tail_names(tmp_path) == second  # not before the next publish
    assert manager.publish_tail_now() == {"orders-0": True}
    remaining = tail_names(tmp_path)
    assert not set(remaining) & set(second) and len(remaining) == 1
    reader = RemoteTopicReader(tier_url)
    assert tier_rows(reader, RU) == consumer(log, RU)


def test_truncation_below_the_published_end_is_republished(manager, tier_url):
    log = manager.create_topic("orders", 1)[0]
    w = LayoutWriter(log)
    for _ in range(5):
        w.plain(2)
    manager.publish_tail_now()
    log.truncate_to(6)  # a follower truncating to its new leader
    w.plain(4)  # different records at offsets 6..9
    assert log.high_watermark == 10
    assert manager.publish_tail_now() == {"orders-0": True}
    reader = RemoteTopicReader(tier_url)
    assert tier_rows(reader, RU) == consumer(log, RU)
    assert tier_rows(reader, RU)[6][1] == b"p-10"


def test_only_flushed_data_is_published(manager):
    log = manager.create_topic("orders", 1)[0]
    LayoutWriter(log).plain(10)
    assert log.recovery_point == 0
    manager.publish_tail_now()
    assert log.recovery_point >= 10


def test_a_crash_losing_unflushed_data_never_leaves_it_in_the_tier(tmp_path, tier_url):
    """A writer publishes its tail, appends more, and dies; the power cut loses what it did
    not flush (its segment is cut at the flushed size). The tier holds only what survived."""
    child = textwrap.dedent(f"""
        import os, sys
        from tierlog import Record
        from tierlog.manager.log_manager import LogManager
        mgr = LogManager.open({str(tmp_path / 'data')!r}, {config(tier_url)!r},
                              start_scheduler=False)
        log = mgr.create_topic("orders", 1)[0]
        for i in range(20):
            log.append_records([Record(key=b"a%d" % i, value=b"v" * 40)])
        mgr.publish_tail_now()
        seg = log.segments.active
        print(seg.log.path, seg.size, flush=True)
        for i in range(20):
            log.append_records([Record(key=b"b%d" % i, value=b"v" * 40)])
        os._exit(0)
    """)
    out = subprocess.run([sys.executable, "-c", child], capture_output=True, text=True,
                         check=True, timeout=60, env={**os.environ, "PYTHONPATH": str(ROOT)})
    path, flushed = out.stdout.split()
    os.truncate(path, int(flushed))  # the page cache held the rest
    mgr = LogManager.open(tmp_path / "data", config(tier_url), start_scheduler=False)
    try:
        log = mgr.log("orders", 0)
        reader = RemoteTopicReader(tier_url)
        rows = tier_rows(reader, RU)
        assert rows == consumer(log, RU)[:len(rows)] and len(rows) == 20
        log.update_high_watermark(log.log_end_offset)
        LayoutWriter(log).plain(3)
        mgr.publish_tail_now()
        assert tier_rows(reader, RU) == consumer(log, RU)
    finally:
        mgr.close()


# -- crash safety ------------------------------------------------------------------------------


def test_failed_manifest_replace_keeps_the_old_tail_and_the_orphan_is_swept(tmp_path, clock):
    conf = {**config(f"faulty://{tmp_path}/tier"), "remote.storage.manager": "faulty"}
    with fault_storage() as fs:
        mgr = LogManager.open(tmp_path / "data", conf, time_ms=clock, start_scheduler=False)
        try:
            log = mgr.create_topic("orders", 1)[0]
            w = LayoutWriter(log)
            w.plain(5)
            mgr.publish_tail_now()
            reader = RemoteTopicReader(f"file://{tmp_path}/tier")
            before = tier_rows(reader, RU)
            w.plain(5)
            fs.fail("pipe_file", nth=2)  # the new object goes up, the manifest does not
            assert mgr.publish_tail_now() == {"orders-0": False}
            assert tier_rows(reader, RU) == before  # the old tail, whole
            assert len(tail_names(tmp_path)) == 2  # one orphan
            result = mgr.tier_now()["orders-0"]
            assert result.orphans_removed == 1 and len(tail_names(tmp_path)) == 1
            assert mgr.publish_tail_now() == {"orders-0": True}  # retried
            assert tier_rows(reader, RU) == consumer(log, RU)
        finally:
            mgr.close()


# -- the scheduler: at most once per interval, nothing when nothing changed --------------------


def test_scheduler_publishes_at_most_once_per_interval_and_only_on_change(
        tmp_path, clock, tier_url):
    mgr = LogManager.open(tmp_path / "data", config(tier_url, 1000), time_ms=clock,
                          start_scheduler=False)
    try:
        log = mgr.create_topic("orders", 1)[0]
        stats = mgr.remote_log_manager.rsm.stats  # type: ignore[union-attr]
        reader = RemoteTopicReader(tier_url)

        def tick(ms: int) -> None:
            clock.advance(ms)
            mgr.scheduler.run_due()
            assert mgr.await_tail_publishing(10)

        w = LayoutWriter(log)
        w.plain(3)
        tick(100)
        assert reader.latest_offsets("orders") == {0: 3}
        puts = stats.snapshot()["puts"]
        w.plain(3)
        for _ in range(9):  # inside the interval: nothing goes out
            tick(100)
        assert stats.snapshot()["puts"] == puts
        tick(100)
        assert reader.latest_offsets("orders") == {0: 6}
        tick(30_000)  # the first tiering run sweeps for orphans once (a GET and a LIST)
        assert mgr.remote_log_manager.await_tiering(10)  # type: ignore[union-attr]
        idle = stats.total
        for _ in range(100):  # nothing changed: no request at all, tiering runs included
            tick(1000)
        assert mgr.remote_log_manager.await_tiering(10)  # type: ignore[union-attr]
        assert stats.total == idle
    finally:
        mgr.close()


# -- S3 over the moto server ------------------------------------------------------------------


def test_s3_reader_returns_what_a_consumer_reads(tmp_path, clock, s3_options):
    url = f"s3://tierlog-tests/tail-{tmp_path.name}"
    conf = {**config(url), "remote.storage.manager": "s3",
            **{f"remote.storage.options.{k}": v for k, v in s3_options.items()}}
    mgr = LogManager.open(tmp_path / "data", conf, time_ms=clock, start_scheduler=False)
    try:
        log = mgr.create_topic("orders", 1)[0]
        w = LayoutWriter(log)
        LAYOUTS["marker-in-next-remote-segment"](w)
        mgr.tier_now()
        _open_txn_after(w)
        mgr.publish_tail_now()
        reader = RemoteTopicReader(url, s3_options)
        for level in LEVELS:
            assert tier_rows(reader, level) == consumer(log, level)
        log.delete_records_before(log.highest_offset_in_remote + 3)
        mgr.publish_tail_now()
        for level in LEVELS:
            assert tier_rows(reader, level) == consumer(log, level)
    finally:
        mgr.close()


# -- the homes: config, names, manifest --------------------------------------------------------


def test_tail_ms_is_validated() -> None:
    assert LogConfig()["remote.log.tail.ms"] == -1
    assert LogConfig({"remote.log.tail.ms": "1000"})["remote.log.tail.ms"] == 1000
    with pytest.raises(ConfigError, match=r"remote\.log\.tail\.ms"):
        LogConfig({"remote.log.tail.ms": -2})


@given(st.integers(0, 10**18), st.integers(1, 10**6))
def test_tail_object_names_parse(first: int, length: int) -> None:
    name = tail_object_name(first, first + length, "A" * 22)
    assert is_tail_object_name(name) and name.startswith(f"{first:020d}-{first + length:020d}-")
    assert not is_tail_object_name(name[1:]) and not is_tail_object_name(name + ".partial")


_TIP = TopicIdPartition("AAAAAAAAAAAAAAAAAAAAAA", "orders", 3)


@settings(max_examples=50)
@given(st.lists(st.integers(1, 50), max_size=6), st.integers(0, 5), st.integers(0, 9))
def test_tail_manifest_round_trips(lengths: list[int], gap: int, lag: int) -> None:
    objects, at = [], 10
    for n in lengths:
        objects.append(TailObject(tail_object_name(at, at + n, "B" * 22), at, at + n, 100 * n,
                                  10, 7, 123, (5, 0, 42)))
        at += n + gap
    hw = at
    manifest = TailManifest(_TIP, 3, hw, max(0, hw - lag), 10, 10, tuple(objects),
                            (AbortedTxn(7, 11, 12, 11),))
    again = TailManifest.from_json(manifest.to_json(), "x")
    assert again == manifest and again.same_content(manifest)
    assert again.published_end(True) == max(0, hw - lag) and again.published_end(False) == hw


@pytest.mark.parametrize("damage", [
    b"not json", b'{"version": 2}', b"[]",
    (b'{"version":1,"topicId":"AAAAAAAAAAAAAAAAAAAAAA","topic":"t","partition":0,'
     b'"generation":1,"highWatermark":5,"lastStableOffset":6,"logStartOffset":0,"tierEnd":0,'
     b'"objects":[],"abortedTxns":[]}'),
    (b'{"version":1,"topicId":"AAAAAAAAAAAAAAAAAAAAAA","topic":"t","partition":0,'
     b'"generation":1,"highWatermark":5,"lastStableOffset":5,"logStartOffset":0,"tierEnd":0,'
     b'"objects":[{"name":"../x.log"}],"abortedTxns":[]}'),
])
def test_corrupt_tail_manifest_is_named(damage: bytes) -> None:
    with pytest.raises(CorruptRemoteMetadataError, match=r"p/_tail\.json"):
        TailManifest.from_json(damage, "p/_tail.json")


# -- Spark: the same records, local and S3 -----------------------------------------------------


def _spark_rows(spark: Any, url: str, level: str, **options: str) -> list[tuple[int, bytes]]:
    reader = spark.read.format("tierlog").option("path", url).option("subscribe", "orders") \
        .option("isolation.level", level)
    for key, value in options.items():
        reader = reader.option(key, value)
    rows = reader.load().select("offset", "key").collect()
    return sorted((r["offset"], bytes(r["key"])) for r in rows)


@pytest.mark.parametrize("where", ["local", "s3"])
def test_spark_reads_what_a_consumer_reads(spark, tmp_path, clock, where, request):
    if where == "s3":
        s3_options = request.getfixturevalue("s3_options")
        url = f"s3://tierlog-tests/tail-spark-{tmp_path.name}"
        conf = {**config(url), "remote.storage.manager": "s3",
                **{f"remote.storage.options.{k}": v for k, v in s3_options.items()}}
        spark_options = {f"storage.{k}": v for k, v in s3_options.items() if k != "region"}
        spark_options["storage.region"] = s3_options["region"]
    else:
        url = f"file://{tmp_path}/tier"
        conf, spark_options = config(url), {}
    mgr = LogManager.open(tmp_path / "data", conf, time_ms=clock, start_scheduler=False)
    try:
        log = mgr.create_topic("orders", 1)[0]
        w = LayoutWriter(log)
        LAYOUTS["data-spanning-two-segments"](w)
        mgr.tier_now()
        _open_txn_after(w)
        mgr.publish_tail_now()
        for level in LEVELS:
            assert _spark_rows(spark, url, level, **spark_options) == consumer(log, level)
    finally:
        mgr.close()
