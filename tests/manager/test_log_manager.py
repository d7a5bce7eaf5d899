"""LogManager: checkpoints, the clean-shutdown marker, recovery points, scheduled flushes,
topics and their config overrides, and parallel loading; driven by a fake clock."""

from __future__ import annotations

import json
import logging
import os

import pytest
from support.log_invariants import check_indexes
from support.process_death import die

from tierlog import Record
from tierlog.checkpoint.checkpoint_file import OffsetCheckpointFile
from tierlog.errors import ConfigError
from tierlog.manager.log_manager import LogManager, TopicExistsError, UnknownTopicOrPartitionError
from tierlog.records import build_batch

MARKER = ".kafka_cleanshutdown"
RECOVERY = "recovery-point-offset-checkpoint"
STARTS = "log-start-offset-checkpoint"
HIGHWATER = "replication-offset-checkpoint"


def _open(dirs, clock, **config):
    return LogManager.open(dirs, config, time_ms=clock, start_scheduler=False)


def _fill(log, n=20, size=100):
    for i in range(n):
        log.append_records([Record(key=b"k%d" % i, value=b"v" * size)])


def test_close_writes_checkpoints_and_the_marker_and_open_removes_it(tmp_path, clock):
    root = tmp_path / "logs"
    mgr = _open(root, clock)
    orders = mgr.create_topic("orders", 2)
    _fill(orders[0], 5)
    _fill(orders[1], 3)
    orders[1].delete_records_before(1)
    mgr.close()
    assert (root / RECOVERY).read_text() == "0\n2\norders 0 5\norders 1 3\n"
    assert OffsetCheckpointFile(root / STARTS).read() == {("orders", 0): 0, ("orders", 1): 1}
    assert OffsetCheckpointFile(root / HIGHWATER).read() == {("orders", 0): 5, ("orders", 1): 3}
    assert json.loads((root / MARKER).read_text()) == {"version": 0, "brokerEpoch": 0}
    assert not list(root.glob("*.tmp"))
    mgr = _open(root, clock)
    try:
        assert not (root / MARKER).exists()
        assert mgr.clean_shutdown == {root: True}
        log = mgr.log("orders", 1)
        assert log.recovery.clean_shutdown and log.recovery.segments_recovered == 0
        assert (log.log_start_offset, log.log_end_offset, log.high_watermark) == (1, 3, 3)
    finally:
        mgr.close()


def test_checkpoint_files_are_replaced_atomically(tmp_path, clock):
    root = tmp_path / "logs"
    mgr = _open(root, clock, **{"log.flush.offset.checkpoint.interval.ms": 1000})
    try:
        log = mgr.create_topic("t", 1)[0]
        _fill(log, 3)
        mgr.checkpoint_recovery_points()
        before = os.stat(root / RECOVERY).st_ino
        log.flush()
        clock.advance(1000)
        assert mgr.scheduler.run_due() >= 1
        # A new file renamed over the old one: a reader never sees a half-written checkpoint.
        assert os.stat(root / RECOVERY).st_ino != before
        assert OffsetCheckpointFile(root / RECOVERY).read() == {("t", 0): 3}
        assert not list(root.glob("*.tmp"))
    finally:
        mgr.close()


def test_scheduler_writes_every_checkpoint(tmp_path, clock):
    root = tmp_path / "logs"
    mgr = _open(root, clock, **{
        "log.flush.offset.checkpoint.interval.ms": 1000,
        "log.flush.start.offset.checkpoint.interval.ms": 2000,
        "replica.high.watermark.checkpoint.interval.ms": 500,
    })
    try:
        log = mgr.create_topic("t", 1)[0]
        _fill(log, 4)
        log.flush()
        log.delete_records_before(2)
        clock.advance(500)
        mgr.scheduler.run_due()
        assert OffsetCheckpointFile(root / HIGHWATER).read() == {("t", 0): 4}
        assert not (root / RECOVERY).exists() and not (root / STARTS).exists()
        clock.advance(500)
        mgr.scheduler.run_due()
        assert OffsetCheckpointFile(root / RECOVERY).read() == {("t", 0): 4}
        assert not (root / STARTS).exists()
        clock.advance(1000)
        mgr.scheduler.run_due()
        assert OffsetCheckpointFile(root / STARTS).read() == {("t", 0): 2}
    finally:
        mgr.close()


def test_recovery_point_is_honoured_after_a_crash(tmp_path, clock):
    root = tmp_path / "logs"
    mgr = _open(root, clock)
    log = mgr.create_topic("t", 1, {"segment.bytes": 2048})[0]
    _fill(log, 60)
    log.flush()
    mgr.checkpoint_recovery_points()
    flushed = log.recovery_point
    _fill(log, 5)
    bases = log.segments.base_offsets()
    holding_rp = max(b for b in bases if b <= flushed)
    directory = log.directory
    # Crash: no close, no marker. Damage a flushed segment (only a re-validation would see it)
    # and the unflushed tail.
    die(mgr)
    first = directory / f"{bases[0]:020d}.log"
    damaged = bytearray(first.read_bytes())
    damaged[100] ^= 0xFF
    first.write_bytes(bytes(damaged))
    active = directory / f"{bases[-1]:020d}.log"
    with open(active, "ab") as f:
        f.write(b"\x00" * 30)
    mgr = _open(root, clock)
    try:
        log = mgr.log("t", 0)
        report = log.recovery
        assert not report.clean_shutdown
        assert report.indexes_rebuilt == [f"{b:020d}.log" for b in bases if b >= holding_rp]
        assert report.bytes_truncated == 30
        assert first.read_bytes() == bytes(damaged)  # below the recovery point: trusted
        assert log.log_end_offset == 65
        assert log.recovery_point == flushed  # only a flush moves it
        check_indexes(log)
    finally:
        mgr.close()


def test_flush_ms_through_the_scheduler(tmp_path, clock):
    root = tmp_path / "logs"
    mgr = _open(root, clock, **{"log.flush.scheduler.interval.ms": 100})
    try:
        log = mgr.create_topic("t", 1, {"flush.ms": 1000})[0]
        quiet = mgr.create_topic("quiet", 1)[0]  # default flush.ms: never forced
        _fill(log, 3)
        _fill(quiet, 3)
        clock.advance(100)
        mgr.scheduler.run_due()
        assert log.recovery_point == 0
        clock.advance(900)
        mgr.scheduler.run_due()
        assert log.recovery_point == 3 and log.last_flush_ms == clock.now
        assert quiet.recovery_point == 0
        _fill(log, 2)
        clock.advance(500)
        mgr.scheduler.run_due()
        assert log.recovery_point == 3
        clock.advance(500)
        mgr.scheduler.run_due()
        assert log.recovery_point == 5
    finally:
        mgr.close()


def test_flush_messages(tmp_path, clock):
    mgr = _open(tmp_path / "logs", clock)
    try:
        log = mgr.create_topic("t", 1, {"flush.messages": 3})[0]
        _fill(log, 2)
        assert log.recovery_point == 0
        _fill(log, 1)
        assert log.recovery_point == 3
        log.append(build_batch([Record(value=b"x")] * 4, now_ms=clock.now))
        assert log.recovery_point == 7
        _fill(log, 2)
        assert log.recovery_point == 7
    finally:
        mgr.close()


def test_create_log_and_delete_topic(tmp_path, clock):
    dirs = [tmp_path / "a", tmp_path / "b"]
    mgr = _open(dirs, clock, **{"file.delete.delay.ms": 5000})
    try:
        logs = mgr.create_topic("orders", 4)
        assert sorted(lg.directory.parent.name for lg in logs) == ["a", "a", "b", "b"]
        with pytest.raises(TopicExistsError):
            mgr.create_topic("orders", 1)
        assert mgr.log("orders", 3) is logs[3]
        mgr.create_topic("keep", 1)
        _fill(logs[0], 2)
        mgr.delete_topic("orders")
        with pytest.raises(UnknownTopicOrPartitionError):
            mgr.log("orders", 0)
        doomed = [p for d in dirs for p in d.iterdir() if p.name.endswith("-delete")]
        assert len(doomed) == 4 and all(p.name.startswith("orders-") for p in doomed)
        for d in dirs:
            assert all(tp[0] == "keep" for tp in OffsetCheckpointFile(d / RECOVERY).read())
        clock.advance(4999)
        mgr.scheduler.run_due()
        assert all(p.exists() for p in doomed)
        clock.advance(1)
        mgr.scheduler.run_due()
        assert not any(p.exists() for p in doomed)
        assert mgr.topics() == ["keep"]
    finally:
        mgr.close()


def test_topic_overrides_are_persisted_alone_and_reloaded(tmp_path, clock):
    root = tmp_path / "logs"
    mgr = _open(root, clock, **{"log.retention.ms": 1000})
    mgr.create_topic("t", 1, {"segment.bytes": 4096, "cleanup.policy": "compact,delete"})
    with pytest.raises(ConfigError, match=r"segment\.bytes"):
        mgr.create_topic("bad", 1, {"segment.bytes": "big"})
    assert "bad" not in mgr.topics() and not (root / "bad-0").exists()
    mgr.close()
    text = (root / "t-0" / "topic-config.properties").read_text()
    assert text == "cleanup.policy=compact,delete\nsegment.bytes=4096\n"
    # The broker default changes between runs; the topic keeps its own overrides only.
    mgr = _open(root, clock, **{"log.retention.ms": 5000})
    try:
        config = mgr.topic_config("t")
        assert config["segment.bytes"] == 4096
        assert config["cleanup.policy"] == ("compact", "delete")
        assert config["retention.ms"] == 5000
    finally:
        mgr.close()


def test_partitions_load_in_parallel_and_recover(tmp_path, clock, caplog):
    dirs = [tmp_path / "a", tmp_path / "b"]
    mgr = _open(dirs, clock)
    logs = mgr.create_topic("t", 8, {"segment.bytes": 4096})
    for log in logs:
        _fill(log, 40)
    ends = {(lg.topic, lg.partition): lg.log_end_offset for lg in logs}
    die(mgr)  # crash: no checkpoints, no marker
    caplog.set_level(logging.DEBUG, logger="tierlog.log.loader")  # a line per segment recovered
    mgr = _open(dirs, clock, **{"num.recovery.threads.per.data.dir": 2})
    try:
        assert {tp: lg.log_end_offset for tp, lg in mgr.logs().items()} == ends
        assert all(not lg.recovery.clean_shutdown for lg in mgr.logs().values())
        threads = {r.threadName for r in caplog.records if "recovering segment" in r.message}
        assert len(threads) > 1 and all(t.startswith("tierlog-load") for t in threads)
    finally:
        mgr.close()


def test_truncation_deletes_segment_files_after_the_delay(tmp_path, clock):
    mgr = _open(tmp_path / "logs", clock, **{"file.delete.delay.ms": 1000})
    try:
        log = mgr.create_topic("t", 1, {"segment.bytes": 2048})[0]
        _fill(log, 60)
        doomed_base = log.segments.base_offsets()[-1]
        log.truncate_to(doomed_base - 1)
        deleted = sorted(p.name for p in log.directory.glob("*.deleted"))
        assert f"{doomed_base:020d}.log.deleted" in deleted
        clock.advance(1000)
        mgr.scheduler.run_due()
        assert not list(log.directory.glob("*.deleted"))
    finally:
        mgr.close()


def test_old_producer_snapshots_are_pruned_after_the_recovery_point_checkpoint(tmp_path, clock):
    mgr = _open(tmp_path / "logs", clock)
    try:
        log = mgr.create_topic("t", 1, {"segment.bytes": 2048})[0]
        for i in range(60):
            log.append(build_batch([Record(value=b"v" * 100)], producer_id=3, producer_epoch=0,
                                   base_sequence=i, now_ms=clock.now))
        bases = log.segments.base_offsets()
        snapshots = sorted(int(p.name[:20]) for p in log.directory.glob("*.snapshot"))
        assert snapshots == bases[1:]
        log.flush(bases[2] + 1)
        mgr.checkpoint_recovery_points()
        # Kept: from the segment holding the recovery point (and the last two segments) on.
        assert log.min_snapshots_offset_to_retain == bases[2] < bases[-2]
        remaining = sorted(int(p.name[:20]) for p in log.directory.glob("*.snapshot"))
        assert remaining == [b for b in bases[1:] if b >= bases[2]]
    finally:
        mgr.close()


def test_marker_is_removed_before_loading_so_a_failed_load_counts_as_unclean(tmp_path, clock):
    """KAFKA-10471: a crash (here: an error) while loading must not leave the marker behind."""
    root = tmp_path / "logs"
    mgr = _open(root, clock)
    _fill(mgr.create_topic("t", 1)[0], 5)
    mgr.close()
    bogus = root / "t-0" / "not-an-offset.log"
    bogus.write_bytes(b"")
    with pytest.raises(Exception, match=r"not-an-offset\.log"):
        _open(root, clock)
    assert not (root / MARKER).exists()
    bogus.unlink()
    mgr = _open(root, clock)
    try:
        assert not mgr.log("t", 0).recovery.clean_shutdown
        assert mgr.log("t", 0).log_end_offset == 5
    finally:
        mgr.close()


def test_flush_up_to_an_offset_moves_the_recovery_point_there(tmp_path, clock):
    mgr = _open(tmp_path / "logs", clock)
    try:
        log = mgr.create_topic("t", 1, {"segment.bytes": 2048})[0]
        _fill(log, 40)
        log.flush(25)
        assert log.recovery_point == 25
        log.flush(10)  # never backwards
        assert log.recovery_point == 25
        log.flush(10_000)  # capped at the log end
        assert log.recovery_point == log.log_end_offset == 40
        mgr.checkpoint_recovery_points()
        assert OffsetCheckpointFile(tmp_path / "logs" / RECOVERY).read() == {("t", 0): 40}
    finally:
        mgr.close()
