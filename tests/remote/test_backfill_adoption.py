"""A topic backfilled into the tier is adopted by a LogManager (LogManager.adopt_topic): its
logs read the old offsets from the tier byte-equal, continue at the tier's end, tier their new
segments after the backfilled ones, and the backfill writer refuses the adopted partitions."""

from __future__ import annotations

import pytest
from support.backfill_rows import (
    T0,
    backfill,
    fields,
    log_batches,
    manager_config,
    rows,
    tier_batches,
)

from tierlog.checkpoint.checkpoint_file import EpochEntry
from tierlog.errors import PartitionOwnedError, TopicExistsError, UnknownTopicOrPartitionError
from tierlog.manager.log_manager import LogManager
from tierlog.records.record import Record
from tierlog.remote.ops.backfill import (
    BackfillTaskWriter,
    WriteOptions,
    new_job_id,
    task_attempt_name,
)
from tierlog.remote.tier.manifest import load_partition
from tierlog.remote.tier.topics import topic_partitions


@pytest.mark.parametrize("codec", ["none", "zstd"])
def test_an_adopted_topic_reads_the_tier_and_continues_at_its_end(tmp_path, tier, clock, codec):
    backfill(tier, "orders", [[rows(0, 70)], [rows(70, 50)]], new_topic_partitions=2,
             compression=codec, batch_bytes=300, segment_bytes=1200)
    written = {p: tier_batches(tier, "orders", p) for p in (0, 1)}
    url = f"file://{tier.root}"
    with LogManager.open(tmp_path / "data", manager_config(url), time_ms=clock,
                         start_scheduler=False) as mgr:
        logs = mgr.adopt_topic("orders")
        assert [lg.partition for lg in logs] == [0, 1]
        for p, partition_log in enumerate(logs):
            end = len(fields(written[p]))
            assert (partition_log.log_start_offset, partition_log.log_end_offset,
                    partition_log.local_log_start_offset, partition_log.high_watermark) == \
                (0, end, end, end)
            assert partition_log.topic_id == topic_partitions(tier, "orders")[p].topic_id
            assert partition_log.leader_epoch_cache.entries() == [EpochEntry(0, 0)]
            # The producer state came from the snapshot copied with the tier's last segment.
            assert partition_log.recovery.snapshots_from_remote == [end]
            assert not partition_log.recovery.errors
            got = log_batches(partition_log, 0, end)
            assert got == written[p]  # the tier's batches, byte for byte
            assert partition_log.read(0).from_remote
            info = partition_log.append_records([Record(b"new", b"after-%d" % p, timestamp=T0)])
            assert info.first_offset == end
        # Appends roll segments; the next tiering run copies them after the backfilled ones.
        for i in range(60):
            logs[0].append_records([Record(b"k", b"x" * 40, timestamp=T0 + i)])
        logs[0].update_high_watermark(logs[0].log_end_offset)
        mgr.tier_now()
        tip = topic_partitions(tier, "orders")[0]
        committed = sorted(load_partition(tier, tip)[0].committed, key=lambda m: m.start_offset)
        ends = [m.end_offset for m in committed]
        starts = [m.start_offset for m in committed]
        assert starts[1:] == [e + 1 for e in ends[:-1]]  # one contiguous chain
        assert ends[-1] > len(fields(written[0]))
        # The backfill now refuses the partitions: the LogManager owns them.
        with pytest.raises(PartitionOwnedError, match=r"orders-0 .*LogManager on "):
            backfill(tier, "orders", [[rows(200, 3)]], new_topic_partitions=2)
    # Reopened, the logs keep the tier's start and their end.
    with LogManager.open(tmp_path / "data", manager_config(url), time_ms=clock,
                         start_scheduler=False) as mgr:
        reopened = mgr.log("orders", 1)
        assert reopened.log_start_offset == 0
        assert reopened.log_end_offset == len(fields(written[1])) + 1
        assert log_batches(reopened, 0, len(fields(written[1]))) == written[1]


def test_adoption_errors_name_the_topic(tmp_path, tier, clock):
    backfill(tier, "t", [[rows(0, 5)]])
    url = f"file://{tier.root}"
    with LogManager.open(tmp_path / "data", manager_config(url), time_ms=clock,
                         start_scheduler=False) as mgr:
        with pytest.raises(UnknownTopicOrPartitionError, match="'missing'"):
            mgr.adopt_topic("missing")
        mgr.adopt_topic("t")
        with pytest.raises(TopicExistsError, match="'t'"):
            mgr.adopt_topic("t")
    with LogManager.open(tmp_path / "other", manager_config(url), time_ms=clock,
                         start_scheduler=False) as other:
        with pytest.raises(PartitionOwnedError, match="t-0"):
            other.adopt_topic("t")
        assert other.partitions("t") == []
        assert not list((tmp_path / "other").glob("t-*"))


def test_the_remote_log_manager_sweeps_old_staging_of_crashed_jobs(tmp_path, tier):
    """A crashed job's staging (tasks staged, no commit) goes at the LogManager's first attach
    once a day old; a younger job's stays (it may still be running)."""
    import os
    import time

    opts = WriteOptions(topic="t")
    jobs = []
    for _ in range(2):
        job = new_job_id()
        writer = BackfillTaskWriter(tier, job, 0, task_attempt_name(0, 0), opts, now_ms=T0)
        writer.write(rows(0, 5))
        writer.commit_message()
        jobs.append(job)
    old = tier.path(f"_staging/{jobs[0]}")
    two_days_ago = time.time() - 2 * 86400
    for path in tier.fs.find(old):  # the first job crashed two days ago
        os.utime(path, (two_days_ago, two_days_ago))
    url = f"file://{tier.root}"
    with LogManager.open(tmp_path / "data", manager_config(url),
                         time_ms=lambda: int(time.time() * 1000), start_scheduler=False) as mgr:
        mgr.create_topic("live", 1, {"remote.storage.enable": True})
    assert tier.list_names(tier.path("_staging"), dirs=True) == [jobs[1]]
