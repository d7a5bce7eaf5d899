"""LogManager.restore_topic: a topic tiered by one LogManager, its disks then lost, is rebuilt
from the bucket alone (local and s3 plugins): every offset reads back byte-equal, appends and
idempotent deduplication continue, read_committed is unchanged, point-in-time cuts land on
stable offsets and take the tier's later segments out, and the refusals name the problem."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
from support.restore_world import (
    IDEM,
    T0,
    HistoryWriter,
    Source,
    at_each_offset,
    lose_disks_after,
    manager_tier,
    raw_batches,
    tier_config,
)
from support.txn_layouts import COMMITTER, consumer_view

from tierlog.errors import (
    ConfigError,
    OffsetOutOfRangeError,
    OutOfOrderSequenceError,
    PartitionOwnedError,
    TopicExistsError,
    UnknownTopicOrPartitionError,
)
from tierlog.manager.log_manager import LogManager
from tierlog.records.record import Record
from tierlog.remote.api import RemoteLogSegmentState
from tierlog.remote.tier.manifest import load_partition
from tierlog.remote.tier.ownership import manager_owner, read_owner
from tierlog.remote.tier.topics import topic_partitions


@pytest.fixture(params=["local", "s3"])
def source(request: pytest.FixtureRequest, tmp_path: Path, clock: Any) -> Source:
    return lose_disks_after(tmp_path, tier_config(request.param, tmp_path, request), clock)


def test_a_restored_topic_reads_byte_equal_and_continues(source: Source, clock: Any) -> None:
    with LogManager.open(source.data, source.config, time_ms=clock,
                         start_scheduler=False) as mgr:
        (log,) = mgr.restore_topic("orders")
        end = source.tier_end
        assert (log.topic_id, log.log_start_offset, log.log_end_offset, log.high_watermark,
                log.local_log_start_offset) == (source.topic_id, 0, end, end, end)
        assert log.leader_epoch_cache.entries() == source.epochs
        assert log.recovery.snapshots_from_remote == [end] and not log.recovery.errors
        assert raw_batches(log, 0, end) == source.batches
        assert at_each_offset(log, 0, end) == source.each
        assert consumer_view(log, 0, end) == source.view
        assert not [k for _, k in consumer_view(log, 0, end) if k.startswith(b"a-")]
        # The idempotent producer keeps deduplicating: its last batch again is a duplicate.
        records, seq = source.last_idem
        dup = log.append_records(records, producer_id=IDEM, producer_epoch=0, base_sequence=seq)
        assert dup.duplicate and log.log_end_offset == end
        with pytest.raises(OutOfOrderSequenceError):
            log.append_records(records, producer_id=IDEM, producer_epoch=0,
                               base_sequence=seq + 5)
        info = log.append_records(records, producer_id=IDEM, producer_epoch=0,
                                  base_sequence=seq + len(records))
        assert info.first_offset == end and not info.duplicate
        # A transactional producer starts its next transaction where it left off.
        log.append_records([Record(b"c", b"x", timestamp=T0)], producer_id=COMMITTER,
                           producer_epoch=0, base_sequence=4, transactional=True)
        assert log.last_stable_offset == end + len(records)
    with LogManager.open(source.data, source.config, time_ms=clock,
                         start_scheduler=False) as mgr:  # it survives a reopen
        log = mgr.log("orders", 0)
        assert (log.log_start_offset, log.topic_id) == (0, source.topic_id)
        assert raw_batches(log, 0, source.tier_end) == source.batches


def test_a_cut_mid_segment_restores_its_bytes_below_the_cut_locally(
        source: Source, clock: Any) -> None:
    cut = source.marks["after-marker"]
    with LogManager.open(source.data, source.config, time_ms=clock,
                         start_scheduler=False) as mgr:
        (log,) = mgr.restore_topic("orders", to_offset=cut, execute=True)
        assert log.log_end_offset == cut  # stable: the committer's marker is below it
        assert 0 < log.local_log_start_offset < cut  # the straddling segment's first bytes
        # Producer state: the tier's snapshot at the local start, then the local bytes.
        assert log.recovery.snapshots_from_remote == [log.local_log_start_offset]
        assert not log.recovery.errors
        below = [b for b in source.batches if _base(b) < cut]
        assert raw_batches(log, 0, cut) == below
        assert at_each_offset(log, 0, cut) == source.each[:cut]
        assert consumer_view(log, 0, cut) == [(o, k) for o, k in source.view if o < cut]
        tier = manager_tier(mgr)
        tip = topic_partitions(tier, "orders")[0]
        manifest, _ = load_partition(tier, tip)
        # The bytes below the cut went to the tier as a segment of their own before the
        # segment they came from was deleted: the tier alone holds every record below it.
        prefix = max(manifest.committed, key=lambda m: m.end_offset)
        assert (prefix.start_offset, prefix.end_offset) == (log.local_log_start_offset, cut - 1)
        assert {m.state for m in manifest.segments} == {RemoteLogSegmentState.COPY_SEGMENT_FINISHED}
        assert log.highest_offset_in_remote == cut - 1
        # The producer state is the one at the cut: the idempotent batch just above it is new.
        records, seq = source.last_idem
        info = log.append_records(records, producer_id=IDEM, producer_epoch=0, base_sequence=seq)
        assert not info.duplicate and info.first_offset == cut
        # Tiering copies the appends after the tier's segments: one chain.
        log.roll()
        log.update_high_watermark(log.log_end_offset)
        mgr.tier_now()
        committed = sorted(load_partition(tier, tip)[0].committed, key=lambda m: m.start_offset)
        assert [m.start_offset for m in committed[1:]] == [m.end_offset + 1
                                                          for m in committed[:-1]]
        assert committed[-1].end_offset == log.log_end_offset - 1
        assert raw_batches(log, 0, cut) == below


def test_a_cut_inside_a_transaction_moves_below_its_first_offset(
        source: Source, clock: Any) -> None:
    marker = source.marks["committer-marker"]  # the committer's transaction is open here
    with LogManager.open(source.data, source.config, time_ms=clock,
                         start_scheduler=False) as mgr:
        (log,) = mgr.restore_topic("orders", to_offset=marker, execute=True)
        first = source.marks["committer-first"]
        assert log.log_end_offset == first  # in the segment before the one asked for
        assert raw_batches(log, 0, first) == [b for b in source.batches if _base(b) < first]
        assert log.last_stable_offset == first
        assert consumer_view(log, 0, first) == [(o, k) for o, k in source.view if o < first]


def test_a_cut_by_time_keeps_the_batches_up_to_it(source: Source, clock: Any) -> None:
    cut = source.marks["seg3"]
    with LogManager.open(source.data, source.config, time_ms=clock,
                         start_scheduler=False) as mgr:
        # Each batch's timestamp is T0 + its base offset: up to the one before seg3.
        (log,) = mgr.restore_topic("orders", to_timestamp=T0 + cut - 1, execute=True)
        assert log.log_end_offset == cut
        assert log.local_log_start_offset == cut  # a segment boundary: nothing fetched
        assert raw_batches(log, 0, cut) == [b for b in source.batches if _base(b) < cut]


def _base(batch: bytes) -> int:
    return int.from_bytes(batch[:8], "big")


def test_the_tier_end_inside_a_transaction_is_not_restored(
        tmp_path: Path, clock: Any, request: pytest.FixtureRequest) -> None:
    def write(w: HistoryWriter) -> None:
        w.plain(); w.mark("open"); w.txn(COMMITTER); w.plain()
        w.log.roll()
        w.end(COMMITTER); w.plain()  # the marker stays in the active segment

    source = lose_disks_after(tmp_path, tier_config("local", tmp_path, request), clock, write)
    with LogManager.open(source.data, source.config, time_ms=clock,
                         start_scheduler=False) as mgr:
        (log,) = mgr.restore_topic("orders", execute=True)
        assert source.tier_end > source.marks["open"]
        assert log.log_end_offset == source.marks["open"]
        assert log.last_stable_offset == log.log_end_offset
        assert raw_batches(log, 0, log.log_end_offset) == source.batches[:1]


@pytest.mark.parametrize("kind", ["local"])
def test_refusals_name_the_problem(
        tmp_path: Path, clock: Any, request: pytest.FixtureRequest, kind: str) -> None:
    source = lose_disks_after(tmp_path, tier_config(kind, tmp_path, request), clock)
    other = tmp_path / "other"
    with LogManager.open(other, source.config, time_ms=clock, start_scheduler=False) as mgr:
        with pytest.raises(UnknownTopicOrPartitionError, match="'missing'"):
            mgr.restore_topic("missing")
        with pytest.raises(ConfigError, match="to_offset"):
            mgr.restore_topic("orders", to_offset=-1)
        # Another data dir owned the partitions: refused unless taken over explicitly.
        with pytest.raises(PartitionOwnedError, match=r"orders-0 .*--force-takeover"):
            mgr.restore_topic("orders")
        assert mgr.partitions("orders") == [] and not list(other.glob("orders-*"))
        mgr.restore_topic("orders", force_takeover=True)
        tip = topic_partitions(manager_tier(mgr), "orders")[0]
        owner = read_owner(manager_tier(mgr), tip)
        assert owner is not None and owner.owner == manager_owner(other)
        with pytest.raises(TopicExistsError, match="'orders' already exists"):
            mgr.restore_topic("orders")
    # The original data dir is no longer the owner: it must force the takeover back.
    with LogManager.open(source.data, source.config, time_ms=clock,
                         start_scheduler=False) as mgr, \
            pytest.raises(PartitionOwnedError, match="other"):
        mgr.restore_topic("orders")


def test_a_cut_below_the_log_start_is_refused(
        tmp_path: Path, clock: Any, request: pytest.FixtureRequest) -> None:
    source = lose_disks_after(tmp_path, tier_config("local", tmp_path, request), clock,
                              log_start="seg3")
    with LogManager.open(source.data, source.config, time_ms=clock,
                         start_scheduler=False) as mgr:
        start = source.marks["seg3"]
        with pytest.raises(OffsetOutOfRangeError, match=rf"orders-0: .* log start offset {start}"):
            mgr.restore_topic("orders", to_offset=start - 1)
        assert not list(source.data.glob("orders-*"))
        (log,) = mgr.restore_topic("orders")
        assert log.log_start_offset == start


def test_restore_all_restores_every_topic_of_the_tier(
        tmp_path: Path, clock: Any, request: pytest.FixtureRequest) -> None:
    config = tier_config("local", tmp_path, request)
    data = tmp_path / "data"
    with LogManager.open(data, config, time_ms=clock, start_scheduler=False) as mgr:
        for name in ("a", "b"):
            for lg in mgr.create_topic(name, 2, {"remote.storage.enable": True}):
                lg.append_records([Record(b"k", name.encode(), timestamp=T0)])
                lg.roll()
                lg.update_high_watermark(lg.log_end_offset)
        mgr.tier_now()
    shutil.rmtree(data)
    with LogManager.open(data, config, time_ms=clock, start_scheduler=False) as mgr:
        restored = mgr.restore_all()
        assert sorted(restored) == ["a", "b"]
        assert {(lg.topic, lg.partition, lg.log_end_offset) for logs in restored.values()
                for lg in logs} == {(t, p, 1) for t in "ab" for p in (0, 1)}
        assert [r.value for r in mgr.log("b", 1).read(0).records()] == [b"b"]
        with pytest.raises(TopicExistsError, match="a, b"):
            mgr.restore_all()
