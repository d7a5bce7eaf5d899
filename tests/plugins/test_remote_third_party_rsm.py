"""A RemoteStorageManager that is not fsspec-based (tests/plugins/dir_rsm.py) meets the
contract and tiers through a LogManager: its segment metadata is kept in the first log dir
(the log-dir store), reads below the local log start come back from it, remote retention
deletes from it, and a restart finds everything again. The metadata store is its own
pluggable part, chosen by remote.log.metadata.manager.class.name."""

from __future__ import annotations

import pytest
from support.cli_runner import tierlog
from support.plugins.dir_rsm import NAME, PlainDirectoryPlugin, PlainDirectoryRSM
from support.plugins.traveling_index import NAME as INDEX_NAME
from support.plugins.traveling_index import TravelingIndexPlugin
from support.remote_storage_suite import RemoteStorageManagerTests

from tierlog import Record
from tierlog.errors import ConfigError, CorruptRemoteMetadataError, PluginError
from tierlog.hookspecs import hookimpl
from tierlog.manager.log_manager import LogManager
from tierlog.plugin_manager import get_plugins
from tierlog.remote import RemoteLogMetadataManager, RemoteTier
from tierlog.remote.metadata.metadata_logdir import LogDirRemoteLogMetadataManager
from tierlog.remote.metadata.metadata_plugin import METADATA_DIR_NAME
from tierlog.remote.metadata_api import RemoteLogMetadataStore
from tierlog.remote.rlm.rlm import topic_id_partition


class TestPlainDirectoryContract(RemoteStorageManagerTests):
    """The contract tests that do not look at the fsspec layout, request counts or the
    in-tier metadata: fetch ranges (inclusive ends), every index type, a missing
    transaction index, idempotent copy and delete, a closed manager."""

    @pytest.fixture
    def rsm(self, tmp_path):
        return PlainDirectoryRSM(tmp_path / "objects")

    # fsspec layout, request counting and the in-tier metadata manager are not the contract.
    test_objects_follow_kafka_layout = None
    test_each_fetch_is_one_get = None
    test_copy_retry_overwrites = None  # reads the fsspec object path to damage it
    test_metadata_add_update_list_sorted = None
    test_metadata_lookup_by_offset_and_epoch = None
    test_metadata_rejects_illegal_transitions = None
    test_metadata_delete_lifecycle = None
    test_abandoned_copy_can_be_deleted = None
    test_manifest_readable_with_only_fsspec = None
    test_reader_falls_back_to_listing_without_manifest = None
    test_reader_fills_gaps_of_a_stale_manifest = None
    test_local_cache_survives_restart = None
    test_restart_without_cache_rebuilds_from_tier = None


@pytest.fixture
def plain_dir(tmp_path, clock):
    host = get_plugins()
    host.register(PlainDirectoryPlugin(), name="plain-dir-rsm")
    host.register(TravelingIndexPlugin(), name="traveling-index")
    managers = []

    def open_(**overrides):
        config = {"segment.bytes": 2048, "remote.storage.enable": True,
                  "remote.storage.manager": NAME,
                  "remote.storage.url": f"plaindir://{tmp_path}/objects",
                  "local.retention.bytes": 0, **overrides}
        mgr = LogManager.open(tmp_path / "data", config, time_ms=clock, start_scheduler=False)
        managers.append(mgr)
        return mgr

    try:
        yield open_
    finally:
        for mgr in managers:
            mgr.close()
        host.unregister("plain-dir-rsm")
        host.unregister("traveling-index")


def _fill(log, clock, start, count):
    for i in range(start, start + count):
        clock.advance(1000)
        log.append_records([Record(key=b"k%d" % i, value=b"value-%d-" % i + b"x" * 80)])


def _all_records(log, start):
    out, offset = [], start
    while offset < log.log_end_offset:
        batch = list(log.read(offset, max_bytes=1 << 16).records())
        assert batch, f"nothing read at {offset}"
        out += [(r.offset, r.key, r.value) for r in batch]
        offset = batch[-1].offset + 1
    return out


def test_it_tiers_serves_reads_and_keeps_metadata_in_the_log_dir(plain_dir, clock, tmp_path):
    mgr = plain_dir()
    log = mgr.create_topic("orders", 1)[0]
    rlm = mgr.remote_log_manager
    assert isinstance(rlm.rlmm, LogDirRemoteLogMetadataManager)
    _fill(log, clock, 0, 80)
    before = _all_records(log, 0)
    mgr.tier_now()
    assert log.local_log_start_offset > 30 and log.log_start_offset == 0
    assert rlm.rsm.copies == len(rlm.rlmm.list_remote_log_segments(topic_id_partition(log)))
    assert _all_records(log, 0) == before  # offsets below the local start come from the RSM
    assert next(log.read(5, max_bytes=1).records()).offset == 5
    assert log.lookup_index(INDEX_NAME, b"k3") == 3  # a traveling index through this RSM
    stored = list((tmp_path / "data" / METADATA_DIR_NAME).glob("*.json"))
    assert [p.name for p in stored] == [
        f"orders-0-{log.topic_id}.json"]
    assert rlm.rlmm.list_partitions() == [topic_id_partition(log)]

    mgr.close()
    again = plain_dir()  # a restart: the metadata comes back from the log dir
    log = again.log("orders", 0)
    assert log.local_log_start_offset > 30
    assert _all_records(log, 0) == before
    assert again.tier_now()["orders-0"].copied == []  # nothing copied twice


def test_remote_retention_deletes_from_it(plain_dir, clock, tmp_path):
    mgr = plain_dir(**{"retention.ms": 100_000})
    log = mgr.create_topic("orders", 1)[0]
    _fill(log, clock, 0, 60)
    mgr.tier_now()
    objects = tmp_path / "objects"
    copied = {p.name for p in objects.iterdir()}
    assert len(copied) > 3
    clock.advance(200_000)
    _fill(log, clock, 100, 30)
    mgr.tier_now()
    assert log.log_start_offset > 0
    remaining = mgr.remote_log_manager.rlmm.list_remote_log_segments(topic_id_partition(log))
    assert {p.name for p in objects.iterdir()} == {m.segment_id for m in remaining}
    assert not copied & {m.segment_id for m in remaining}


def test_the_metadata_store_is_chosen_by_name(plain_dir, tmp_path):
    # Each refused manager is closed before the next opens the dir (one owner at a time).
    with plain_dir(**{"remote.log.metadata.manager.class.name": "tier"}) as refused, \
            pytest.raises(ConfigError, match="'tier' keeps the metadata in the tier"):
        refused.create_topic("a", 1)
    with plain_dir(**{"remote.log.metadata.manager.class.name": "nope"}) as refused, \
            pytest.raises(PluginError, match="no remote log metadata manager named 'nope'"):
        refused.create_topic("b", 1)
    mgr = plain_dir(**{"remote.storage.manager": "local",
                       "remote.storage.url": f"file://{tmp_path}/tier",
                       "remote.log.metadata.manager.class.name": "log-dir"})
    mgr.create_topic("c", 1)
    assert isinstance(mgr.remote_log_manager.rlmm, LogDirRemoteLogMetadataManager)


def test_a_plugin_store_replaces_the_default(plain_dir):
    made = []

    class StorePlugin:
        @hookimpl
        def tierlog_register_remote_metadata_managers(self, register):
            def factory(rsm, log_dir):
                store = LogDirRemoteLogMetadataManager(log_dir / "my-store")
                made.append(store)
                return store
            register("mine", factory)

    host = get_plugins()
    host.register(StorePlugin(), name="my-store")
    try:
        mgr = plain_dir(**{"remote.log.metadata.manager.class.name": "mine"})
        mgr.create_topic("orders", 1)
        assert mgr.remote_log_manager.rlmm is made[0]
    finally:
        host.unregister("my-store")


def test_an_object_that_is_not_an_rsm_is_refused(tmp_path, clock):
    class NotAnRSM:
        def close(self):
            pass

    class Plugin:
        @hookimpl
        def tierlog_register_remote_storage(self, register):
            register("broken", lambda url, options: NotAnRSM())

    host = get_plugins()
    host.register(Plugin(), name="broken-rsm")
    try:
        with pytest.raises(ConfigError, match=r"NotAnRSM.*no copy_log_segment_data, "
                                              r"fetch_log_segment, fetch_index"):
            mgr = LogManager.open(tmp_path / "data", {
                "remote.storage.enable": True, "remote.storage.manager": "broken",
                "remote.storage.url": "x"}, time_ms=clock, start_scheduler=False)
            try:
                mgr.create_topic("orders", 1)
            finally:
                mgr.close()
    finally:
        host.unregister("broken-rsm")


def test_a_corrupt_log_dir_store_file_is_an_error_not_an_empty_partition(plain_dir, clock,
                                                                        tmp_path):
    mgr = plain_dir()
    log = mgr.create_topic("orders", 1)[0]
    _fill(log, clock, 0, 40)
    mgr.tier_now()
    tip = topic_id_partition(log)
    mgr.close()
    (stored,) = (tmp_path / "data" / METADATA_DIR_NAME).glob("*.json")
    stored.write_bytes(b"{not json")
    store = LogDirRemoteLogMetadataManager(tmp_path / "data" / METADATA_DIR_NAME)
    with pytest.raises(CorruptRemoteMetadataError, match=stored.name):
        store.list_remote_log_segments(tip)


def test_both_built_in_stores_meet_the_contract(tmp_path):
    import fsspec

    tier = RemoteTier(fsspec.filesystem("file"), str(tmp_path / "tier"))
    assert isinstance(RemoteLogMetadataManager(tier), RemoteLogMetadataStore)
    assert isinstance(LogDirRemoteLogMetadataManager(tmp_path / "md"), RemoteLogMetadataStore)


def test_tierlog_plugins_lists_the_metadata_stores() -> None:
    out = tierlog("plugins").stdout
    assert out.split("metadata stores:")[1].split()[:2] == ["log-dir,", "tier"]
