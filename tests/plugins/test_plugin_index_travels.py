"""A plugin index type with uploaded_to_remote=True travels with its segment: it is uploaded
beside the segment's objects, answers Log.lookup_index from the tier once local retention
removed the segment (through the remote index cache), and is deleted with the segment."""

from __future__ import annotations

import dataclasses

import pytest
from support.plugins.traveling_index import (
    NAME,
    SUFFIX,
    LatestKeyIndexType,
    TravelingIndexPlugin,
)
from support.remote_storage_suite import metadata_for, update, write_segment

from tierlog import Record
from tierlog.errors import RemoteResourceNotFoundError, RemoteStorageError
from tierlog.plugin_manager import get_plugins
from tierlog.plugins.local.plugin import create_remote_storage
from tierlog.remote import RemoteLogSegmentState, TopicIdPartition
from tierlog.remote.rlm.index_cache import RemoteIndexCache
from tierlog.remote.rlm.rlm import topic_id_partition
from tierlog.remote.tier.fsspec_storage import extra_index_suffixes

MANAGER_CONFIG = {"segment.bytes": 2048, "remote.storage.enable": True,
                  "remote.storage.manager": "local", "local.retention.bytes": 0}


@pytest.fixture
def traveling_index():
    """The traveling index plugin, registered before the manager opens (usefixtures comes
    first) and unregistered after it closes."""
    host = get_plugins()
    host.register(TravelingIndexPlugin(), name="traveling-index")
    try:
        yield
    finally:
        host.unregister("traveling-index")


def _fill(log, clock, start: int, count: int) -> None:
    for i in range(start, start + count):
        clock.advance(1000)
        log.append_records([Record(key=b"key-%d" % i, value=b"v" * 100)])


@pytest.mark.usefixtures("traveling_index")
def test_the_index_is_uploaded_and_answers_from_the_tier(manager, clock, tmp_path):
    log = manager.create_topic("orders", 1)[0]
    _fill(log, clock, 0, 60)
    _fill(log, clock, 0, 1)  # key-0 again, at the log end: the newest answer wins
    newest = log.log_end_offset - 1
    manager.tier_now()
    local_start = log.local_log_start_offset
    assert local_start > 20  # key-3's segment is only in the tier now
    assert not list((tmp_path / "data" / "orders-0").glob(f"00000000000000000000{SUFFIX}"))
    rlm = manager.remote_log_manager
    copied = rlm.rlmm.list_remote_log_segments(topic_id_partition(log))
    assert copied and all(extra_index_suffixes(m) == (SUFFIX,) for m in copied)
    assert len(list((tmp_path / "tier").rglob(f"*{SUFFIX}"))) == len(copied)

    assert log.lookup_index(NAME, b"key-3") == 3
    assert log.lookup_index(NAME, b"key-0") == newest
    assert log.lookup_index(NAME, b"key-59") == 59
    assert log.lookup_index(NAME, b"never-written") is None
    cached = list((tmp_path / "data" / "remote-log-index-cache").glob(f"*{SUFFIX}"))
    assert cached  # fetched once into the index cache
    before = rlm.rsm.stats.snapshot()["gets"]
    assert log.lookup_index(NAME, b"key-3") == 3
    assert rlm.rsm.stats.snapshot()["gets"] == before  # served from the cache


@pytest.mark.usefixtures("traveling_index")
def test_remote_retention_and_topic_deletion_delete_the_index_with_its_segment(
        manager, clock, tmp_path):
    log = manager.create_topic("orders", 1, {"retention.ms": 100_000})[0]
    _fill(log, clock, 0, 60)
    manager.tier_now()
    tier = tmp_path / "tier"
    assert len(list(tier.rglob(f"*{SUFFIX}"))) == len(list(tier.rglob("*.log"))) > 3
    clock.advance(200_000)
    _fill(log, clock, 100, 30)
    manager.tier_now()
    assert log.log_start_offset > 0  # remote retention deleted the old segments
    remaining = manager.remote_log_manager.rlmm.list_remote_log_segments(topic_id_partition(log))
    assert remaining
    assert len(list(tier.rglob(f"*{SUFFIX}"))) == len(list(tier.rglob("*.log"))) == len(remaining)
    manager.delete_topic("orders")
    assert not list(tier.rglob(f"*{SUFFIX}"))
    assert not list(tier.rglob("*.log"))


# -- the RSM and the index cache on their own ------------------------------------------------


@pytest.fixture
def rsm(tmp_path):
    return create_remote_storage((tmp_path / "tier").as_uri(), {})


def _copy(rsm, tmp_path, extra=None):
    """Copy a small segment (with ``extra`` plugin index files) and return its committed
    metadata, the RSM's custom metadata included."""
    seg = write_segment(tmp_path / "seg")
    md = metadata_for(TopicIdPartition("q0Vs7vGvSZ6ljmj-ZmXC1A", "clicks", 0), seg)
    custom = rsm.copy_log_segment_data(
        md, dataclasses.replace(seg.data, extra_indexes=extra or {}))
    done = md.create_with_update(update(md, RemoteLogSegmentState.COPY_SEGMENT_FINISHED))
    return dataclasses.replace(done, custom_metadata=custom)


def test_the_rsm_stores_fetches_and_deletes_a_plugin_index(rsm, tmp_path):
    index_file = tmp_path / "00000000000000000000.latestkey"
    index_file.write_bytes(b'{"k1": 1}')
    md = _copy(rsm, tmp_path, {SUFFIX: index_file})
    assert extra_index_suffixes(md) == (SUFFIX,)
    assert rsm.fetch_index(md, LatestKeyIndexType()).read() == b'{"k1": 1}'
    rsm.delete_log_segment_data(md)
    assert not [p for p in (tmp_path / "tier").rglob("*") if p.is_file()]
    with pytest.raises(RemoteResourceNotFoundError):
        rsm.fetch_index(md, LatestKeyIndexType())


@pytest.mark.parametrize("suffix", [".index", ".log", "latestkey", ".a/b"])
def test_the_rsm_refuses_a_plugin_suffix_that_would_clash(rsm, tmp_path, suffix):
    index_file = tmp_path / "x"
    index_file.write_bytes(b"{}")
    with pytest.raises(RemoteStorageError, match="plugin index suffix"):
        _copy(rsm, tmp_path, {suffix: index_file})


def test_a_segment_copied_without_the_index_answers_none_once(rsm, tmp_path):
    md = _copy(rsm, tmp_path)
    assert md.custom_metadata is None  # nothing extra: the copy is as before
    cache = RemoteIndexCache(tmp_path / "cache", 1 << 20, rsm)
    assert cache.extra_index(md, LatestKeyIndexType(), None) is None
    gets = rsm.stats.snapshot()["gets"]
    assert cache.extra_index(md, LatestKeyIndexType(), None) is None
    assert rsm.stats.snapshot()["gets"] == gets
    cache.close()
