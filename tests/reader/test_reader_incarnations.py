"""A topic deleted and re-created (or re-created from a new data dir) against the same tier
has several incarnations (topic ids) there: readers pick the newest by default (the one whose
metadata holds the latest event time) and take a ``topic_id``/``topicId`` to choose."""

from __future__ import annotations

import pytest

from tierlog import Record
from tierlog.errors import ConfigError, RemoteStorageError
from tierlog.manager.log_manager import LogManager
from tierlog.reader import RemoteTopicReader


def _manager(tmp_path, name, clock):
    config = {"segment.bytes": 1200, "remote.storage.enable": True,
              "remote.storage.manager": "local",
              "remote.storage.url": (tmp_path / "tier").as_uri()}
    return LogManager.open(tmp_path / name, config, time_ms=clock, start_scheduler=False)


def _incarnation(tmp_path, name, clock, value: bytes, count: int, partitions: int = 2) -> str:
    mgr = _manager(tmp_path, name, clock)
    try:
        logs = mgr.create_topic("orders", partitions)
        for log in logs:
            for i in range(count):
                log.append_records([Record(key=b"k%d" % i, value=value * 30)])
            log.roll()
        mgr.tier_now()
        return logs[0].topic_id
    finally:
        mgr.close()


@pytest.fixture
def two_incarnations(tmp_path, clock):
    old = _incarnation(tmp_path, "old-data", clock, b"o", 40)
    clock.advance(60_000)
    new = _incarnation(tmp_path, "new-data", clock, b"n", 25)
    assert old != new
    return (tmp_path / "tier").as_uri(), old, new


def _values(table) -> set[bytes]:
    return {v[:1] for v in table.column("value").to_pylist()}


def test_the_newest_incarnation_is_read_by_default(two_incarnations):
    url, _, new = two_incarnations
    reader = RemoteTopicReader(url)
    assert reader.list_topics() == ["orders"]
    assert reader.list_partitions("orders") == [0, 1]
    table = reader.read_table("orders")
    assert _values(table) == {b"n"}
    assert table.num_rows == 2 * 25
    assert {s.topic_id_partition.topic_id for s in reader.list_segments("orders", 0)} == {new}


def test_topic_id_chooses_an_incarnation(two_incarnations):
    url, old, new = two_incarnations
    reader = RemoteTopicReader(url)
    assert _values(reader.read_table("orders", topic_id=old)) == {b"o"}
    assert _values(reader.read_table("orders", topic_id=new)) == {b"n"}
    assert reader.offset_range("orders", 0, topic_id=old)[1] > \
        reader.offset_range("orders", 0, topic_id=new)[1]


def test_incarnations_that_cannot_be_told_apart_need_a_topic_id(tmp_path, clock):
    # Both created at the same instant and never written: nothing says which is newer.
    for name in ("a", "b"):
        mgr = _manager(tmp_path, name, clock)
        log = mgr.create_topic("orders", 1)[0]
        log.append_records([Record(key=b"k", value=b"v" * 1000)])
        log.roll()
        mgr.tier_now()
        mgr.close()
    reader = RemoteTopicReader((tmp_path / "tier").as_uri())
    with pytest.raises(RemoteStorageError, match="topic_id"):
        reader.read_table("orders")


def test_spark_source_reads_the_newest_and_takes_a_topic_id(two_incarnations):
    pytest.importorskip("pyspark")
    from tierlog.spark import TierlogDataSource, TierlogOptions

    url, old, _ = two_incarnations

    def rows(**options: str) -> set[bytes]:
        source = TierlogDataSource({"path": url, "subscribe": "orders", **options})
        reader = source.reader(None)
        got: set[bytes] = set()
        for part in reader.partitions():
            for batch in reader.read(part):
                got |= {v[:1] for v in batch.column("value").to_pylist()}
        return got

    assert rows() == {b"n"}
    assert rows(topicId=old) == {b"o"}
    assert rows(topicId=f'{{"orders": "{old}"}}') == {b"o"}
    with pytest.raises(ConfigError, match="topicid"):
        TierlogOptions.parse({"path": url, "subscribe": "orders", "topicId": "short"})
