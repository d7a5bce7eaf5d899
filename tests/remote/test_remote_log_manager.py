"""RemoteLogManager through the LogManager: copy, local retention, transparent remote reads,
remote retention, topic deletion, and faults — against the local plugin and S3 (moto over HTTP)."""

from __future__ import annotations

import uuid

import fsspec
import pytest
from support.fault_fs import fault_storage
from support.s3 import S3_BUCKET

from tierlog import Record
from tierlog.errors import CorruptRecordError, OffsetOutOfRangeError
from tierlog.hookspecs import hookimpl
from tierlog.manager.log_manager import LogManager
from tierlog.plugin_manager import get_plugins
from tierlog.remote import RemoteLogSegmentState
from tierlog.remote.rlm.rlm import topic_id_partition

FINISHED = RemoteLogSegmentState.COPY_SEGMENT_FINISHED
CODECS = ("none", "gzip", "snappy", "lz4", "zstd")


def _records(i: int, n: int = 10, ts: int | None = None) -> list[Record]:
    return [Record(key=b"k%d" % (i * n + j), value=b"value-%d-" % (i * n + j) + b"x" * 40,
                   headers=[("n", b"%d" % j)], timestamp=ts) for j in range(n)]


def _batches_by_offset(log):
    """Every batch of the log as raw bytes, keyed by base offset (read through log.read)."""
    out, offset = {}, log.log_start_offset
    while offset < log.log_end_offset:
        res = log.read(offset, max_bytes=1 << 16)
        batches = list(res.batches())
        assert batches, f"no batches at offset {offset}"
        for batch in batches:
            if batch.base_offset >= offset or batch.last_offset >= offset:
                out[batch.base_offset] = bytes(batch.view())
        offset = batches[-1].next_offset
    return out


class RemoteLogManagerTests:
    """The contract, run once per remote storage plugin (subclasses supply ``tier_config``)."""

    @pytest.fixture
    def tier_config(self):
        raise NotImplementedError

    @pytest.fixture
    def open_manager(self, tmp_path, clock, tier_config):
        managers = []

        def open_(**overrides):
            # moto on a loaded CI host can pass Kafka's 500 ms remote.fetch.max.wait.ms
            config = {"segment.bytes": 2048, "log.retention.check.interval.ms": 1000,
                      "remote.fetch.max.wait.ms": 30_000, **tier_config, **overrides}
            mgr = LogManager.open(tmp_path / "data", config, time_ms=clock, start_scheduler=False)
            managers.append(mgr)
            return mgr

        yield open_
        for mgr in managers:
            mgr.close()

    def _fill(self, log, batches=30, start=0, clock=None):
        for i in range(start, start + batches):
            if clock is not None:
                clock.advance(1000)
            log.append_records(_records(i), compression=CODECS[i % len(CODECS)])

    def test_copies_closed_segments_in_order_and_never_the_active_one(self, open_manager, clock):
        mgr = open_manager()
        log = mgr.create_topic("orders", 1)[0]
        self._fill(log, clock=clock)
        results = mgr.tier_now()
        copied = results["orders-0"].copied
        bases = log.segments.base_offsets()
        assert [m.start_offset for m in copied] == bases[:-1]
        assert [m.end_offset + 1 for m in copied] == bases[1:]
        assert log.highest_offset_in_remote == bases[-1] - 1
        rlmm = mgr.remote_log_manager.rlmm
        listed = rlmm.list_remote_log_segments(topic_id_partition(log))
        assert all(m.state is FINISHED for m in listed)
        # Idempotent: a second run copies nothing new.
        assert mgr.tier_now()["orders-0"].copied == []

    def test_segments_at_or_above_the_lso_stay_local(self, open_manager, clock):
        mgr = open_manager()
        log = mgr.create_topic("orders", 1)[0]
        self._fill(log, batches=5, clock=clock)
        log.append_records(_records(99), producer_id=7, producer_epoch=0, base_sequence=0,
                           transactional=True)
        lso = log.last_stable_offset
        self._fill(log, batches=20, start=5, clock=clock)
        mgr.tier_now()
        assert log.highest_offset_in_remote < lso
        log.append_marker(7, 0, commit=True)
        self._fill(log, batches=3, start=40, clock=clock)
        mgr.tier_now()
        assert log.highest_offset_in_remote >= lso

    def test_local_retention_then_every_offset_reads_back_byte_identical(self, open_manager, clock):
        mgr = open_manager(**{"local.retention.bytes": 4096})
        log = mgr.create_topic("orders", 1)[0]
        self._fill(log, batches=60, clock=clock)
        before = _batches_by_offset(log)
        leo = log.log_end_offset
        mgr.tier_now()
        assert log.local_log_start_offset > 0
        assert log.log_start_offset == 0  # local retention never moves the log start offset
        assert len(log.segments) <= 4
        after = _batches_by_offset(log)
        assert after == before
        for offset in range(0, leo, 7):
            got = [r.offset for r in log.read(offset, max_bytes=1).records()]
            assert got and got[0] == offset
        # Batch i (offsets 10i..10i+9) was stamped start + 1000 (i + 1): remote ones included.
        start = clock.now - 60 * 1000
        for i in (0, 7, 30, 59):
            assert log.offset_for_timestamp(start + 1000 * (i + 1)) == 10 * i
            assert log.offset_for_timestamp(start + 1000 * (i + 1) - 500) == 10 * i
        assert log.local_log_start_offset > 70  # batch 7 really came from the remote tier
        assert log.offset_for_timestamp(clock.now + 1) is None

    def test_local_segments_are_deleted_only_after_their_copy(self, open_manager, clock):
        mgr = open_manager(**{"local.retention.bytes": 0})
        log = mgr.create_topic("orders", 1)[0]
        self._fill(log, batches=20, clock=clock)
        mgr.cleanup_logs()  # retention alone, before anything was copied
        assert log.local_log_start_offset == 0
        mgr.tier_now()
        assert log.local_log_start_offset == log.segments.active.base_offset

    def test_read_committed_from_the_remote_tier(self, open_manager, clock):
        mgr = open_manager(**{"local.retention.bytes": 0})
        log = mgr.create_topic("orders", 1)[0]
        log.append_records(_records(0), producer_id=1, producer_epoch=0, base_sequence=0,
                           transactional=True)
        log.append_records(_records(1), producer_id=2, producer_epoch=0, base_sequence=0,
                           transactional=True)
        log.append_marker(1, 0, commit=True)
        log.append_marker(2, 0, commit=False)
        self._fill(log, batches=20, start=5, clock=clock)
        mgr.tier_now()
        assert log.local_log_start_offset > 25
        got = []
        offset = 0
        while offset < 25:
            res = log.read(offset, isolation="read_committed")
            assert res.from_remote
            batch_records = list(res.records())
            got.extend(r.key for r in batch_records)
            offset = list(res.batches())[-1].next_offset
        assert b"k0" in got and b"k10" not in got  # producer 2 aborted keys k10..k19

    def test_remote_retention_by_time_moves_the_log_start_offset(self, open_manager, clock):
        mgr = open_manager(**{"local.retention.bytes": 0, "retention.ms": 100_000})
        log = mgr.create_topic("orders", 1)[0]
        self._fill(log, batches=40, clock=clock)
        mgr.tier_now()
        assert log.log_start_offset == 0
        clock.advance(200_000)
        self._fill(log, batches=2, start=100, clock=clock)
        mgr.tier_now()
        assert log.log_start_offset > 0
        with pytest.raises(OffsetOutOfRangeError):
            log.read(0)
        remaining = mgr.remote_log_manager.rlmm.list_remote_log_segments(topic_id_partition(log))
        assert all(m.end_offset >= log.log_start_offset for m in remaining)

    def test_remote_retention_by_size(self, open_manager, clock):
        mgr = open_manager(**{"local.retention.bytes": 0, "retention.bytes": 8192})
        log = mgr.create_topic("orders", 1)[0]
        self._fill(log, batches=60, clock=clock)
        mgr.tier_now()
        tip = topic_id_partition(log)
        remote = mgr.remote_log_manager.rlmm.remote_log_size(tip)
        local_only = sum(s.size for s in log.segments.values()
                         if s.base_offset > log.highest_offset_in_remote)
        assert remote + local_only <= 8192 + 2048
        assert log.log_start_offset > 0

    def test_restart_reads_remote_offsets_and_copies_nothing_twice(self, open_manager, clock):
        mgr = open_manager(**{"local.retention.bytes": 0})
        log = mgr.create_topic("orders", 1)[0]
        self._fill(log, batches=30, clock=clock)
        mgr.tier_now()
        before = _batches_by_offset(log)
        mgr.close()
        mgr2 = open_manager(**{"local.retention.bytes": 0})
        log2 = mgr2.log("orders", 0)
        assert log2.log_start_offset == 0 and log2.local_log_start_offset > 0
        assert _batches_by_offset(log2) == before
        assert mgr2.tier_now()["orders-0"].copied == []

    def test_delete_topic_deletes_remote_data(self, open_manager, clock):
        mgr = open_manager()
        log = mgr.create_topic("orders", 1)[0]
        self._fill(log, batches=20, clock=clock)
        mgr.tier_now()
        tip = topic_id_partition(log)
        assert mgr.remote_log_manager.rlmm.list_remote_log_segments(tip)
        mgr.delete_topic("orders")
        assert mgr.remote_log_manager.rlmm.list_remote_log_segments(tip) == []

    def test_fetch_request_counts_cold_and_warm(self, open_manager, clock):
        mgr = open_manager(**{"local.retention.bytes": 0})
        log = mgr.create_topic("orders", 1)[0]
        self._fill(log, batches=30, clock=clock)
        mgr.tier_now()
        stats = mgr.remote_log_manager.rsm.stats
        stats.reset()
        log.read(55, max_bytes=1024)
        cold = stats.total
        stats.reset()
        log.read(57, max_bytes=1024)
        warm = stats.total
        assert cold <= 2 and warm == 1, (cold, warm)


class TestLocalPlugin(RemoteLogManagerTests):
    @pytest.fixture
    def tier_config(self, tmp_path):
        return {"remote.storage.enable": True, "remote.storage.manager": "local",
                "remote.storage.url": f"file://{tmp_path}/tier"}


class TestS3Plugin(RemoteLogManagerTests):
    @pytest.fixture
    def tier_config(self, s3_options):
        config = {"remote.storage.enable": True, "remote.storage.manager": "s3",
                  "remote.storage.url": f"s3://{S3_BUCKET}/rlm-{uuid.uuid4().hex[:10]}"}
        config.update({f"remote.storage.options.{k}": v for k, v in s3_options.items()})
        return config


# -- faults: a remote storage plugin over a fault-injecting filesystem ----------------------


@pytest.fixture
def faulty(tmp_path, clock):
    config = {"segment.bytes": 2048, "remote.storage.enable": True,
              "remote.storage.manager": "faulty", "remote.storage.url": f"faulty://{tmp_path}/tier",
              "local.retention.bytes": 0}
    with fault_storage() as faults:
        mgr = LogManager.open(tmp_path / "data", config, time_ms=clock, start_scheduler=False)
        try:
            yield faults, mgr
        finally:
            mgr.close()


def test_failed_copy_commits_nothing_deletes_nothing_and_a_retry_succeeds(faulty, clock):
    fs, mgr = faulty
    log = mgr.create_topic("orders", 1)[0]
    for i in range(20):
        log.append_records(_records(i))
    first_local = log.segments.base_offsets()
    # Each copy uploads .log, .index, .timeindex, .snapshot: call 5 is the 2nd segment's .log.
    fs.fail("put_file", nth=5)
    result = mgr.tier_now()["orders-0"]
    assert result.errors and len(result.copied) == 1
    tip = topic_id_partition(log)
    rlmm = mgr.remote_log_manager.rlmm
    committed = [m for m in rlmm.list_remote_log_segments(tip) if m.state is FINISHED]
    assert [m.start_offset for m in committed] == [first_local[0]]
    # Only the copied segment may go locally; the failed one is still on disk.
    assert first_local[1] in log.segments.base_offsets()
    result = mgr.tier_now()["orders-0"]
    assert result.errors == [] and result.orphans_removed == 1
    committed = [m for m in rlmm.list_remote_log_segments(tip) if m.state is FINISHED]
    assert [m.start_offset for m in committed] == first_local[:-1]
    assert all(m.state is FINISHED for m in rlmm.list_remote_log_segments(tip))


def test_corrupted_remote_object_raises_corrupt_record_error(faulty, clock):
    _, mgr = faulty
    log = mgr.create_topic("orders", 1)[0]
    for i in range(20):
        log.append_records(_records(i))
    mgr.tier_now()
    metadata = mgr.remote_log_manager.rlmm.remote_log_segment_metadata(topic_id_partition(log), 0)
    path = mgr.remote_log_manager.rsm.object_path(metadata, ".log")
    data = bytearray(fsspec.filesystem("file").cat_file(path))
    data[100] ^= 0xFF
    fsspec.filesystem("file").pipe_file(path, bytes(data))
    with pytest.raises(CorruptRecordError,
                       match=r"orders-0, .*\.log, batch at offset 0 .*CRC check failed"):
        log.read(0)


# -- the scheduler, hooks, epoch lineage and the index cache (local plugin) -----------------


@pytest.fixture
def local_manager(tmp_path, clock):
    managers = []

    def open_(**overrides):
        config = {"segment.bytes": 2048, "remote.storage.enable": True,
                  "remote.storage.manager": "local",
                  "remote.storage.url": f"file://{tmp_path}/tier", **overrides}
        mgr = LogManager.open(tmp_path / "data", config, time_ms=clock, start_scheduler=False)
        managers.append(mgr)
        return mgr

    yield open_
    for mgr in managers:
        mgr.close()


def test_the_scheduler_tiers_every_task_interval_and_hooks_see_each_copy(local_manager, clock):
    from support.plugins.audit import AuditPlugin

    class CopyAudit(AuditPlugin):
        @hookimpl
        def tierlog_segment_copied_to_remote(self, event):
            self.events.append(("copied", event.topic, event.metadata.start_offset))

    audit = CopyAudit()
    host = get_plugins()
    host.register(audit, name="copy-audit")
    try:
        mgr = local_manager(**{"remote.log.manager.task.interval.ms": 10_000})
        log = mgr.create_topic("orders", 1)[0]
        for i in range(20):
            log.append_records(_records(i))
        clock.advance(9_999)
        mgr.scheduler.run_due()
        assert log.highest_offset_in_remote == -1
        clock.advance(1)
        mgr.scheduler.run_due()  # submits the run to the remote log manager's threads
        assert mgr.remote_log_manager.await_tiering(timeout_s=30)
        bases = log.segments.base_offsets()
        assert log.highest_offset_in_remote == bases[-1] - 1
        copied = [e[2] for e in audit.events if e[0] == "copied"]
        assert copied == bases[:-1]
    finally:
        host.unregister("copy-audit")


def test_remote_segments_outside_the_epoch_lineage_are_deleted(local_manager, clock):
    mgr = local_manager()
    log = mgr.create_topic("orders", 1)[0]
    for i in range(20):
        log.append_records(_records(i))
    mgr.tier_now()
    tip = topic_id_partition(log)
    rlmm = mgr.remote_log_manager.rlmm
    old = [m for m in rlmm.list_remote_log_segments(tip) if m.state is FINISHED]
    assert old and all(set(m.segment_leader_epochs) == {0} for m in old)
    # A new leader at epoch 5 whose log starts after the tiered data: epoch 0 is no longer
    # in this replica's lineage, so its remote segments go.
    log.truncate_fully_and_start_at(log.log_end_offset)
    log.leader_epoch = 5
    for i in range(20, 40):
        log.append_records(_records(i))
    result = mgr.tier_now()["orders-0"]
    assert {m.start_offset for m in result.deleted_remote} == {m.start_offset for m in old}
    remaining = [m for m in rlmm.list_remote_log_segments(tip) if m.state is FINISHED]
    assert remaining and all(set(m.segment_leader_epochs) == {5} for m in remaining)


def test_the_index_cache_is_bounded_and_reloaded_at_start(local_manager, clock, tmp_path):
    # Entries in every index (index.interval.bytes=100) and room for only a few of them.
    settings = {"local.retention.bytes": 0, "index.interval.bytes": 100,
                "remote.log.index.file.cache.total.size.bytes": 64}
    mgr = local_manager(**settings)
    log = mgr.create_topic("orders", 1)[0]
    for i in range(60):
        log.append_records(_records(i))
    mgr.tier_now()
    cache = mgr.remote_log_manager.index_cache
    offsets = range(0, log.local_log_start_offset, 50)
    for offset in offsets:
        log.read(offset, max_bytes=100)
    rlmm = mgr.remote_log_manager.rlmm
    read = {rlmm.remote_log_segment_metadata(topic_id_partition(log), o).segment_id
            for o in offsets}
    files = list(cache.directory.iterdir())
    assert len({f.name.split(".")[0] for f in files}) < len(read)  # some were evicted
    assert files and cache.size_in_bytes <= 64 + max(f.stat().st_size for f in files)
    assert all(f.name.split("_")[0].isdigit() and f.suffix in (".index", ".timeindex", ".txnindex")
               for f in files)
    kept = sorted(f.name for f in files)
    mgr.close()
    mgr2 = local_manager(**settings)
    cache2 = mgr2.remote_log_manager.index_cache
    assert sorted(f.name for f in cache2.directory.iterdir()) == kept
    assert cache2.size_in_bytes == sum(f.stat().st_size for f in cache2.directory.iterdir())
