"""``tierlog restore`` end to end with real directories, and a Spark-written (backfilled)
topic restored to a point in time through the same path as any tiered topic."""

from __future__ import annotations

import shutil

import fsspec
import pytest
from support.backfill_rows import backfill, fields, log_batches, rows, tier_batches
from support.cli_runner import tierlog, user_error
from support.restore_world import T0, lose_disks_after, raw_batches, tier_config

from tierlog.cli.restore import parse_timestamp
from tierlog.manager.log_manager import LogManager
from tierlog.remote.tier.manifest import load_partition
from tierlog.remote.tier.object_store import RemoteTier
from tierlog.remote.tier.topics import topic_partitions


def test_restore_cli_rebuilds_a_lost_data_dir(tmp_path, clock, request):
    source = lose_disks_after(tmp_path, tier_config("local", tmp_path, request), clock)
    url = source.config["remote.storage.url"]
    cut = source.marks["after-marker"]
    args = ("restore", url, "--data-dir", source.data, "--topic", "orders", "--to-offset", cut,
            "--topic-config", "retention.ms=86400000", "--set", "segment.bytes=1048576")
    tier = tmp_path / "tier"
    before = {p: p.read_bytes() for p in tier.rglob("*") if p.is_file()}
    done = tierlog(*args)  # the cut deletes from the tier: a dry run printing the plan
    assert f"orders-0: cut at offset {cut} (log start 0); deletes 3 segments" in done.stdout
    assert "dry run: nothing was restored or deleted" in done.stdout
    assert {p: p.read_bytes() for p in tier.rglob("*") if p.is_file()} == before
    assert not list(source.data.glob("orders-*"))
    done = tierlog(*args, "--execute")
    assert "orders-0: deleted 3 segments" in done.stdout
    assert f"orders-0: offsets 0-{cut - 1} (log start 0, end {cut};" in done.stdout
    assert "restored 1 topic (1 partition)" in done.stdout
    assert "B/s" not in done.stderr  # no progress bar when stderr is not a terminal
    with LogManager.open(source.data, source.config, time_ms=clock,
                         start_scheduler=False) as mgr:
        log = mgr.log("orders", 0)
        assert log.log_end_offset == cut and log.topic_id == source.topic_id
        assert mgr.topic_overrides("orders")["retention.ms"] == 86_400_000
        assert raw_batches(log, 0, cut) == [b for b in source.batches
                                            if int.from_bytes(b[:8], "big") < cut]
    # Into the data dir that now holds it: refused, one line naming the topic.
    line = user_error("restore", url, "--data-dir", source.data, "--topic", "orders")
    assert "'orders' already exists" in line
    line = user_error("restore", url, "--data-dir", tmp_path / "other", "--topic", "orders")
    assert "--force-takeover" in line
    line = user_error("restore", url, "--data-dir", tmp_path / "x", "--topic", "nope")
    assert "holds no topic 'nope'" in line
    line = user_error("restore", url, "--data-dir", tmp_path / "y", "--all", "--to-offset", "3")
    assert "--to-offset needs --topic" in line


def test_restore_cli_all_with_a_time_and_a_takeover(tmp_path, clock, request):
    source = lose_disks_after(tmp_path, tier_config("local", tmp_path, request), clock)
    url = source.config["remote.storage.url"]
    cut = source.marks["seg3"]
    when = parse_timestamp(str(T0 + cut - 1))
    done = tierlog("restore", url, "--data-dir", tmp_path / "other", "--all", "--quiet",
                   "--to-timestamp", when, "--force-takeover", "--execute")
    assert f"orders-0: offsets 0-{cut - 1}" in done.stdout
    assert "B/s" not in done.stderr and "it/s" not in done.stderr  # --quiet: no bar
    assert "taking over from LogManager on" in done.stderr  # the takeover is logged


def test_iso_timestamps_are_utc_unless_zoned():
    assert parse_timestamp("2023-11-14T22:13:20") == 1_700_000_000_000
    assert parse_timestamp("2023-11-14T23:13:20+01:00") == 1_700_000_000_000
    assert parse_timestamp("1700000000000") == 1_700_000_000_000
    from tierlog.cli._common import CliError

    with pytest.raises(CliError, match="ISO 8601"):
        parse_timestamp("yesterday")


def test_a_backfilled_topic_is_restored_to_a_point_in_time(tmp_path, clock):
    tier = RemoteTier(fsspec.filesystem("file"), str(tmp_path / "tier"))
    backfill(tier, "events", [[rows(0, 90)]], compression="zstd", batch_bytes=300,
             segment_bytes=1200)
    written = tier_batches(tier, "events", 0)
    bases = [fields([b])[0][0] for b in written]
    cut = bases[len(bases) // 2] + 1  # inside a batch: the cut is that batch's start
    config = {"remote.storage.manager": "local", "remote.storage.url": f"file://{tier.root}",
              "segment.bytes": 2048}
    with LogManager.open(tmp_path / "data", config, time_ms=clock,
                         start_scheduler=False) as mgr:
        (log,) = mgr.restore_topic("events", to_offset=cut, execute=True)
        assert log.log_end_offset == cut - 1
        assert log_batches(log, 0, cut - 1) == [b for b, base in zip(written, bases, strict=True)
                                                if base < cut - 1]
        tip = topic_partitions(tier, "events")[0]
        committed = load_partition(tier, tip)[0].committed
        assert max((m.end_offset for m in committed), default=-1) < cut - 1
        from tierlog.records.record import Record

        info = log.append_records([Record(b"k", b"after", timestamp=T0)])
        assert info.first_offset == cut - 1


def test_restoring_the_same_dir_again_after_losing_it_needs_no_takeover(tmp_path, clock,
                                                                       request):
    source = lose_disks_after(tmp_path, tier_config("local", tmp_path, request), clock)
    with LogManager.open(source.data, source.config, time_ms=clock,
                         start_scheduler=False) as mgr:
        mgr.restore_topic("orders")
    shutil.rmtree(source.data)
    with LogManager.open(source.data, source.config, time_ms=clock,
                         start_scheduler=False) as mgr:
        (log,) = mgr.restore_topic("orders")
        assert log.log_end_offset == source.tier_end
