"""The remote tier's layout has one home each: object paths (``tierlog.remote.tier.layout``), the
partition listing (``tierlog.remote.tier.manifest.remote_partitions``) and the request counter
(``tierlog.remote.tier.object_store.RequestStats``), used alike by the writer and the tier
reader."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import fsspec
import pytest
from fsspec.implementations.local import LocalFileSystem

from tierlog import Record
from tierlog.manager.log_manager import LogManager
from tierlog.reader import ReadStats, RemoteTopicReader
from tierlog.remote import (
    IndexType,
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentState,
    RemoteTier,
    RequestStats,
    TopicIdPartition,
    list_remote_partitions,
)
from tierlog.remote.read.readable import open_tier
from tierlog.remote.tier.layout import (
    MANIFEST_NAME,
    METADATA_DIR,
    SEGMENT_OBJECT_SUFFIXES,
    manifest_key,
    metadata_dir_key,
    metadata_object_key,
    metadata_object_name,
    owner_key,
    parse_partition_dir_name,
    segment_file_prefix,
    segment_object_key,
)
from tierlog.remote.tier.manifest import remote_partitions

TOPIC_ID = "-0Vs7vGvSZ6ljmj-ZmXC1A"


def _metadata(rng: random.Random) -> RemoteLogSegmentMetadata:
    topic = rng.choice(["orders", "web-logs", "a.b_c", "x-1-2"])
    tip = TopicIdPartition(TOPIC_ID, topic, rng.randrange(0, 1 << 16))
    start = rng.randrange(0, 1 << 50)
    return RemoteLogSegmentMetadata(
        remote_log_segment_id=RemoteLogSegmentId.generate(tip), start_offset=start,
        end_offset=start + rng.randrange(0, 1000), max_timestamp_ms=1, event_timestamp_ms=1,
        segment_size_in_bytes=10, segment_leader_epochs={0: start},
        state=RemoteLogSegmentState.COPY_SEGMENT_STARTED)


@pytest.mark.parametrize("seed", range(25))
def test_keys_are_the_partition_directory_then_the_objects_name(seed: int) -> None:
    md = _metadata(random.Random(seed))
    tip = md.topic_id_partition
    for suffix in SEGMENT_OBJECT_SUFFIXES:
        directory, name = segment_object_key(md, suffix).split("/")
        assert parse_partition_dir_name(directory) == tip
        assert name == segment_file_prefix(md) + suffix
    assert manifest_key(tip).split("/") == [directory, MANIFEST_NAME]
    assert metadata_dir_key(tip).split("/") == [directory, METADATA_DIR]
    assert metadata_object_key(md).split("/") == [directory, METADATA_DIR,
                                                  metadata_object_name(md)]


@pytest.fixture
def tiered(tmp_path: Path, clock: Any) -> Any:
    config = {"segment.bytes": 1 << 20, "index.interval.bytes": 200, "local.retention.bytes": 0,
              "remote.storage.enable": True, "remote.storage.manager": "local",
              "remote.storage.url": (tmp_path / "tier").as_uri()}
    mgr = LogManager.open(tmp_path / "data", config, time_ms=clock, start_scheduler=False)
    for topic in ("orders", "clicks"):
        for log in mgr.create_topic(topic, 2):
            for i in range(3):
                log.append_records([Record(key=b"k%d" % i, value=b"v" * 40)])
                log.roll()
    mgr.tier_now()
    yield mgr, tmp_path / "tier"
    mgr.close()


def test_every_object_the_writer_stored_is_where_the_layout_says(tiered: Any) -> None:
    mgr, root = tiered
    rsm = mgr.remote_log_manager.rsm
    tier = rsm.tier
    partitions = remote_partitions(tier)
    assert [(p.topic, p.partition) for p in partitions] == [
        ("clicks", 0), ("clicks", 1), ("orders", 0), ("orders", 1)]
    reader = RemoteTopicReader(root.as_uri())
    for tip in partitions:
        segments = reader.list_segments(tip.topic, tip.partition)
        assert segments
        expected = {tier.path(manifest_key(tip)), tier.path(owner_key(tip))}
        for md in segments:
            expected |= {tier.path(segment_object_key(md, s)) for s in SEGMENT_OBJECT_SUFFIXES
                         if s != IndexType.TRANSACTION.suffix}
            expected.add(tier.path(metadata_object_key(md)))
            assert rsm.object_path(md, ".log") == tier.path(segment_object_key(md, ".log"))
        stored = {str(p) for p in (root / tier.path(manifest_key(tip)).split("/")[-2]).rglob("*")
                  if p.is_file()}
        assert stored == expected


def test_one_listing_of_partitions_for_writer_and_reader(tiered: Any) -> None:
    mgr, root = tiered
    (root / "not-a-partition").mkdir()
    (root / f"stray-x-{TOPIC_ID}").mkdir()  # a partition number that is not one
    rsm = mgr.remote_log_manager.rsm
    rsm.stats.reset()
    listed = mgr.remote_log_manager.rlmm.list_partitions()
    assert rsm.stats.snapshot()["lists"] == 1  # counted by the writer's own tier now
    assert listed == remote_partitions(rsm.tier) == list_remote_partitions(
        LocalFileSystem(), str(root))
    reader = RemoteTopicReader(root.as_uri())
    reader.stats.reset()
    assert reader.list_topics() == ["clicks", "orders"]
    assert reader.stats.lists == 1


def test_the_reader_and_the_writer_count_with_one_class(tiered: Any) -> None:
    mgr, root = tiered
    assert ReadStats is RequestStats
    reader = RemoteTopicReader(root.as_uri())
    assert type(reader.stats) is type(mgr.remote_log_manager.rsm.stats) is RequestStats
    reader.stats.reset()
    table = reader.read_table("orders")
    assert table.num_rows == 6
    counts = reader.stats.snapshot()
    assert counts["gets"] == reader.stats.gets > 0 and counts["puts"] == counts["deletes"] == 0
    assert counts["bytes"] == reader.stats.bytes > 0
    reader.stats.reset()
    assert reader.stats.snapshot() == dict.fromkeys(counts, 0)


class _RecordingFileSystem(LocalFileSystem):
    """The local filesystem, remembering the ranges it was asked to read."""

    cachable = False

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.ranges: list[tuple[Any, Any]] = []

    def cat_file(self, path: str, start: Any = None, end: Any = None, **kwargs: Any) -> bytes:
        self.ranges.append((start, end))
        return super().cat_file(path, start=start, end=end, **kwargs)


def test_a_readers_whole_object_reads_are_ranged_and_counted(tmp_path: Path) -> None:
    (tmp_path / "obj").write_bytes(b"x" * 100)
    fs = _RecordingFileSystem()
    stats = RequestStats()
    reader_tier = RemoteTier(fs, str(tmp_path), rename_on_publish=False, stats=stats,
                             ranged_reads=True)
    writer_tier = RemoteTier(fs, str(tmp_path), rename_on_publish=False, stats=stats)
    assert reader_tier.get_bytes(reader_tier.path("obj")) == b"x" * 100
    assert writer_tier.get_bytes(writer_tier.path("obj"), 10, 20) == b"x" * 10
    assert writer_tier.get_bytes(writer_tier.path("obj")) == b"x" * 100
    assert fs.ranges == [(0, None), (10, 20), (None, None)]
    assert (stats.gets, stats.bytes, stats.total) == (3, 210, 3)


def test_open_tier_shares_the_callers_counter(tmp_path: Path) -> None:
    stats = ReadStats()
    tier = open_tier(tmp_path.as_uri(), None, stats)
    assert tier.stats is stats and tier.ranged_reads and not tier.rename_on_publish
    assert isinstance(tier.fs, fsspec.AbstractFileSystem)
