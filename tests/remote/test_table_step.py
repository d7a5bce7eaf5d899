"""The tiering run's table step (tierlog.remote.rlm.table_step) through a LogManager: each copied
segment of a topic with ``remote.log.table.enable`` becomes a file of the topic's table, which
holds exactly the tiered rows, stops at the tier's last stable offset, survives a failed table
write without failing the copy, never holds the log's lock, follows remote retention (files
leave before the objects go) and is dropped with the topic."""

from __future__ import annotations

import re
from pathlib import Path

import fsspec
import pyarrow.compute as pc
import pytest
from support.fault_fs import fault_storage

from tierlog import Record
from tierlog.common.clock import system_time_ms
from tierlog.hookspecs import hookimpl
from tierlog.manager.log_manager import LogManager
from tierlog.plugin_manager import get_plugins
from tierlog.remote.rlm.rlm import topic_id_partition
from tierlog.remote.table.catalog import TierCatalog
from tierlog.remote.table.commit import current_files
from tierlog.remote.table.coverage import Coverage
from tierlog.remote.table.schema import table_identifier
from tierlog.remote.tier.layout import table_key
from tierlog.remote.tier.object_store import RemoteTier

TABLE = {"remote.log.table.enable": True}
#: The table step's backoff after a failure is at most this (remote.log.manager.task.retry.*).
BACKOFF_MAX_MS = 30_000


def _records(i: int, n: int = 10) -> list[Record]:
    return [Record(key=b"k%d" % (i * n + j), value=b"v-%d-" % (i * n + j) + b"x" * 40,
                   headers=[("n", b"%d" % j)]) for j in range(n)]


def _fill(log, batches: int, start: int = 0) -> None:
    for i in range(start, start + batches):
        log.append_records(_records(i), compression=("none", "zstd", "gzip")[i % 3])


def _open(tmp_path: Path, clock, url: str, manager: str, **overrides) -> LogManager:
    config = {"segment.bytes": 2048, "remote.storage.enable": True,
              "remote.storage.manager": manager, "remote.storage.url": url,
              "remote.fetch.max.wait.ms": 30_000, **overrides}
    return LogManager.open(tmp_path / "data", config, time_ms=clock, start_scheduler=False)


@pytest.fixture
def local(tmp_path, clock):
    managers = []

    def open_(**overrides) -> LogManager:
        mgr = _open(tmp_path, clock, f"file://{tmp_path}/tier", "local", **overrides)
        managers.append(mgr)
        return mgr

    yield open_
    for mgr in managers:
        mgr.close()


@pytest.fixture
def faulty(tmp_path, clock):
    with fault_storage() as faults:
        mgr = _open(tmp_path, clock, f"faulty://{tmp_path}/tier", "faulty")
        try:
            yield faults, mgr
        finally:
            faults.heal()
            mgr.close()


def _catalog(tmp_path: Path) -> TierCatalog:
    return TierCatalog(RemoteTier(fsspec.filesystem("file"), str(tmp_path / "tier")))


def _table(tmp_path: Path, log):
    return _catalog(tmp_path).load_table(table_identifier(log.topic, log.topic_id))


def _table_rows(tmp_path: Path, log) -> list[tuple[int, bytes | None, bytes | None]]:
    rows = _table(tmp_path, log).scan().to_arrow().sort_by("offset")
    return list(zip(rows["offset"].to_pylist(), rows["key"].to_pylist(),
                    rows["value"].to_pylist(), strict=True))


def _coverage(tmp_path: Path, log) -> Coverage:
    table = _table(tmp_path, log)
    return Coverage.of_snapshot(table.current_snapshot(), "test")


def _log_rows(log, start: int, end: int) -> list[tuple[int, bytes | None, bytes | None]]:
    """The data records of ``log`` in [start, end) (read_uncommitted; no control records)."""
    rows, offset = [], start
    while offset < end:
        batches = list(log.read(offset, max_bytes=1 << 16).batches())
        assert batches, f"no batches at offset {offset}"
        for batch in batches:
            if not batch.is_control:
                rows.extend((r.offset, r.key, r.value) for r in batch.records()
                            if start <= r.offset < end)
        offset = batches[-1].next_offset
    return rows


def test_tiering_writes_exactly_the_tiered_rows_to_the_table(local, tmp_path):
    mgr = local()
    log = mgr.create_topic("orders", 1, config=TABLE)[0]
    _fill(log, 30)
    result = mgr.tier_now()["orders-0"]
    assert result.copied and result.errors == [] and result.table_errors == []
    end = log.highest_offset_in_remote + 1
    assert result.table_covered == end
    assert _table_rows(tmp_path, log) == _log_rows(log, 0, end)
    files = current_files(_table(tmp_path, log), 0)
    assert [(f.first_offset, f.last_offset) for f in files] == [
        (m.start_offset, m.end_offset) for m in result.copied]

    _fill(log, 10, start=30)  # the next run continues where the table ends
    again = mgr.tier_now()["orders-0"]
    assert again.copied and again.table_errors == []
    end = log.highest_offset_in_remote + 1
    assert again.table_covered == end
    assert _table_rows(tmp_path, log) == _log_rows(log, 0, end)
    assert mgr.tier_now()["orders-0"].table_covered == end  # nothing new: nothing committed
    assert len(list(_table(tmp_path, log).snapshots())) == 2


def test_a_topic_without_the_config_gets_no_table(local, tmp_path):
    mgr = local()
    log = mgr.create_topic("orders", 1)[0]
    _fill(log, 20)
    result = mgr.tier_now()["orders-0"]
    assert result.copied and result.table_covered is None and result.table_errors == []
    assert not (tmp_path / "tier" / table_key(log.topic, log.topic_id)).exists()


def test_the_table_stops_at_the_tiers_last_stable_offset_and_the_next_run_continues(
        local, tmp_path):
    mgr = local()
    log = mgr.create_topic("orders", 1, config=TABLE)[0]
    _fill(log, 8)
    txn_first = log.log_end_offset
    log.append_records(_records(100), producer_id=7, producer_epoch=0, base_sequence=0,
                       transactional=True)
    _fill(log, 12, start=8)  # segments roll while the transaction is open
    log.append_marker(7, 0, commit=False)  # its marker lands in the active segment
    result = mgr.tier_now()["orders-0"]
    # Every closed segment is copied, but the tier's producer snapshot still has the
    # transaction open: the table stops before the link holding its first offset.
    assert log.highest_offset_in_remote >= txn_first and result.table_errors == []
    covered = result.table_covered
    assert covered is not None and 0 < covered <= txn_first
    links = [(m.start_offset, m.end_offset) for m in result.copied]
    assert any(first <= txn_first <= last and first == covered for first, last in links)
    assert _table_rows(tmp_path, log) == _log_rows(log, 0, covered)

    _fill(log, 12, start=20)  # the marker's segment closes and is copied
    again = mgr.tier_now()["orders-0"]
    end = log.highest_offset_in_remote + 1
    assert again.table_errors == [] and again.table_covered == end
    assert _table_rows(tmp_path, log) == _log_rows(log, 0, end)
    aborted = _table(tmp_path, log).scan(selected_fields=("offset", "aborted")).to_arrow()
    flagged = {o for o, a in zip(aborted["offset"].to_pylist(), aborted["aborted"].to_pylist(),
                                 strict=True) if a}
    assert flagged == set(range(txn_first, txn_first + 10))


def test_a_failed_table_write_keeps_the_copy_and_the_next_run_fills_the_table(
        faulty, tmp_path, clock):
    faults, mgr = faulty
    log = mgr.create_topic("orders", 1, config=TABLE)[0]
    _fill(log, 20)
    # Every write under _tables/ fails (a hang nobody releases raises TimeoutError at once).
    for method in ("put_file", "pipe_file"):
        faults.hang(method, where="_tables", timeout=0.001)
    result = mgr.tier_now()["orders-0"]
    assert result.copied and result.errors == []
    assert log.highest_offset_in_remote == result.copied[-1].end_offset
    assert len(result.table_errors) == 1 and "table step" in result.table_errors[0]
    tip = topic_id_partition(log)
    listed = mgr.remote_log_manager.rlmm.list_remote_log_segments(tip)
    assert [m.start_offset for m in listed] == [m.start_offset for m in result.copied]

    faults.heal()
    mgr.tier_now()  # the step backs off: nothing is tried before its backoff passes
    clock.advance(BACKOFF_MAX_MS)
    again = mgr.tier_now()["orders-0"]
    end = log.highest_offset_in_remote + 1
    assert again.table_errors == [] and again.table_covered == end
    assert _table_rows(tmp_path, log) == _log_rows(log, 0, end)


def test_appends_go_on_while_the_table_step_runs(faulty, tmp_path):
    faults, mgr = faulty
    log = mgr.create_topic("orders", 1, config=TABLE)[0]
    _fill(log, 20)
    # The step's first write of the table (creating it) hangs until released.
    hang = faults.hang("pipe_file", where="_tables")
    rlm = mgr.remote_log_manager
    assert rlm.submit_tiering([log]) == ["orders-0"]
    try:
        assert hang.wait_entered(30), "the table step never wrote"
        # The step is inside a write of the table now: the log's lock is free, appends go on.
        assert log.lock.acquire(blocking=False), "the table step holds the log's lock"
        log.lock.release()
        before = log.log_end_offset
        _fill(log, 5, start=20)
        assert log.log_end_offset == before + 50
        assert rlm.tiering_in_flight() == ["orders-0"]
    finally:
        hang.release()
    assert rlm.await_tiering(timeout_s=60)
    assert _coverage(tmp_path, log).end(0) == log.highest_offset_in_remote + 1


def test_remote_retention_removes_a_segments_file_before_its_objects(local, tmp_path, clock):
    from support.plugins.audit import AuditPlugin

    seen: list[tuple[int, bool]] = []

    class DeleteAudit(AuditPlugin):
        @hookimpl
        def tierlog_remote_segment_deleted(self, event):
            # The segment's objects are gone now: its file must have left the table already.
            files = current_files(_table(tmp_path, log), 0)
            seen.append((event.metadata.start_offset,
                         any(f.first_offset == event.metadata.start_offset for f in files)))

    host = get_plugins()
    host.register(DeleteAudit(), name="delete-audit")
    try:
        mgr = local(**{"local.retention.bytes": 0, "retention.ms": 100_000})
        log = mgr.create_topic("orders", 1, config=TABLE)[0]
        _fill(log, 30)
        first = mgr.tier_now()["orders-0"]
        assert first.table_covered == log.highest_offset_in_remote + 1
        clock.advance(200_000)  # every tiered segment is past retention.ms now
        _fill(log, 10, start=30)
        result = mgr.tier_now()["orders-0"]
    finally:
        host.unregister(name="delete-audit")
    assert result.deleted_remote and result.table_errors == []
    assert seen == [(m.start_offset, False) for m in result.deleted_remote]
    coverage = _coverage(tmp_path, log)
    assert coverage.start[0] == log.log_start_offset > 0
    files = current_files(_table(tmp_path, log), 0)
    assert files and all(f.last_offset >= log.log_start_offset for f in files)
    rows = _table_rows(tmp_path, log)
    assert rows == _log_rows(log, files[0].first_offset, coverage.end(0))


def test_delete_records_inside_a_file_rewrites_it_so_no_reader_sees_rows_below_the_start(
        local, tmp_path):
    from pyiceberg.table import StaticTable

    mgr = local()
    log = mgr.create_topic("orders", 1, config=TABLE)[0]
    _fill(log, 30)
    assert mgr.tier_now()["orders-0"].table_errors == []
    old = current_files(_table(tmp_path, log), 0)[1]
    start = old.first_offset + 3
    assert start < old.last_offset
    log.delete_records_before(start)  # DeleteRecords, inside a tiered segment
    result = mgr.tier_now()["orders-0"]
    assert result.table_errors == []
    table = _table(tmp_path, log)
    plain = StaticTable.from_metadata(table.metadata_location).scan().to_arrow().sort_by("offset")
    rows = list(zip(plain["offset"].to_pylist(), plain["key"].to_pylist(),
                    plain["value"].to_pylist(), strict=True))
    end = _coverage(tmp_path, log).end(0)
    assert rows == _log_rows(log, start, end) and rows[0][0] == start
    files = current_files(table, 0)
    paths = [f.data_file.file_path for f in files]
    assert old.data_file.file_path not in paths
    assert (files[0].first_offset, files[0].last_offset) == (old.first_offset, old.last_offset)
    assert _coverage(tmp_path, log).start[0] == start


def test_a_failed_table_commit_keeps_the_segments_retention_would_delete(
        faulty, tmp_path, clock):
    faults, mgr = faulty
    log = mgr.create_topic("orders", 1, config={**TABLE, "retention.ms": 100_000,
                                                "local.retention.bytes": 0})[0]
    _fill(log, 20)
    assert mgr.tier_now()["orders-0"].table_errors == []
    clock.advance(200_000)
    for method in ("put_file", "pipe_file"):
        faults.hang(method, where="_tables", timeout=0.001)
    result = mgr.tier_now()["orders-0"]
    assert result.deleted_remote == [] and log.log_start_offset == 0
    assert any("segments stay" in e for e in result.table_errors)
    faults.heal()
    clock.advance(BACKOFF_MAX_MS)
    again = mgr.tier_now()["orders-0"]
    assert again.deleted_remote and again.table_errors == []
    assert _coverage(tmp_path, log).start[0] == log.log_start_offset > 0


def test_deleting_the_topic_drops_its_table(local, tmp_path):
    mgr = local()
    log = mgr.create_topic("orders", 2, config=TABLE)[0]
    _fill(log, 20)
    assert mgr.tier_now()["orders-0"].table_covered
    where = tmp_path / "tier" / table_key(log.topic, log.topic_id)
    assert where.is_dir()
    mgr.delete_topic("orders")
    assert not where.exists()


def test_every_partition_of_a_topic_fills_one_table(local, tmp_path):
    mgr = local()
    logs = mgr.create_topic("orders", 3, config=TABLE)
    for i, log in enumerate(logs):
        _fill(log, 10 + 5 * i)
    results = mgr.tier_now()
    coverage = _coverage(tmp_path, logs[0])
    rows = _table(tmp_path, logs[0]).scan().to_arrow().sort_by([("partition", "ascending"),
                                                                ("offset", "ascending")])
    for log in logs:
        end = log.highest_offset_in_remote + 1
        assert results[log.directory.name].table_errors == []
        assert results[log.directory.name].table_covered == coverage.end(log.partition) == end
        mine = rows.filter(pc.equal(rows["partition"], log.partition))
        assert list(zip(mine["offset"].to_pylist(), mine["key"].to_pylist(),
                        mine["value"].to_pylist(), strict=True)) == _log_rows(log, 0, end)
    # Partitions whose runs reach the commit together share a snapshot: never more than one each.
    assert len(list(_table(tmp_path, logs[0]).snapshots())) <= len(logs)


def test_a_committing_run_expires_the_tables_old_snapshots_at_most_hourly(local, tmp_path, clock):
    clock.now = system_time_ms()  # pyiceberg stamps snapshots with the wall clock
    mgr = local()
    [log] = mgr.create_topic("orders", 1, config={
        **TABLE, "remote.log.table.snapshot.retention.ms": 1000})
    for round_ in range(3):
        _fill(log, 10, start=10 * round_)
        assert mgr.tier_now()["orders-0"].table_errors == []
        clock.advance(2000)
    # The first commit's upkeep found nothing to expire; the next two were within the hour.
    assert len(_table(tmp_path, log).snapshots()) == 3
    clock.advance(3_600_000)
    _fill(log, 10, start=30)
    assert mgr.tier_now()["orders-0"].table_errors == []
    # Every snapshot superseded more than a second ago is gone; the rows all stay.
    assert len(_table(tmp_path, log).snapshots()) == 1
    end = log.highest_offset_in_remote + 1
    assert _table_rows(tmp_path, log) == _log_rows(log, 0, end)


# -- run files (a compaction's merged files): the table follows them too ---------------------

COMPACTION = {**TABLE, "remote.log.table.compaction.enable": True,
              "remote.log.table.compaction.target.bytes": 1 << 20,
              "remote.log.table.compaction.max.links": 4,
              "remote.log.table.compaction.interval.ms": 60_000}


def _merge_all(tmp_path: Path, log):
    """The partition's current files merged into one run file (committed); the link spans
    it replaced."""
    from support.table_runs import merge

    from tierlog.remote.table.commit import TableCommitter

    links = [(f.first_offset, f.last_offset) for f in current_files(_table(tmp_path, log), 0)]
    assert len(links) >= 4
    committer = TableCommitter(_catalog(tmp_path), table_identifier(log.topic, log.topic_id))
    merge(RemoteTier(fsspec.filesystem("file"), str(tmp_path / "tier")), committer,
          topic_id_partition(log))
    assert [f.is_run for f in current_files(_table(tmp_path, log), 0)] == [True]
    return links


def _generic_rows(tmp_path: Path, log) -> list[tuple[int, bytes | None, bytes | None]]:
    """The table's rows as a generic Iceberg reader sees them (no tierlog start filter)."""
    from pyiceberg.table import StaticTable

    plain = StaticTable.from_metadata(_table(tmp_path, log).metadata_location)
    rows = plain.scan().to_arrow().sort_by("offset")
    return list(zip(rows["offset"].to_pylist(), rows["key"].to_pylist(),
                    rows["value"].to_pylist(), strict=True))


def test_remote_retention_inside_a_run_file_unmerges_it_and_keeps_no_row_below_the_start(
        local, tmp_path, clock):
    mgr = local(**{"local.retention.bytes": 0, "retention.ms": 100_000})
    log = mgr.create_topic("orders", 1, config=TABLE)[0]
    _fill(log, 15)
    assert mgr.tier_now()["orders-0"].table_errors == []
    clock.advance(60_000)  # the later segments' records are a minute younger
    _fill(log, 15, start=15)
    assert mgr.tier_now()["orders-0"].table_errors == []
    links = _merge_all(tmp_path, log)
    clock.advance(50_000)  # only the first minute's segments are past retention.ms
    result = mgr.tier_now()["orders-0"]
    assert result.table_errors == [] and result.deleted_remote
    start = log.log_start_offset
    assert links[0][0] < start <= links[-1][1]  # strictly inside the run
    assert start in {first for first, _ in links}  # retention starts at a segment's base
    coverage = _coverage(tmp_path, log)
    assert coverage.start[0] == start
    files = current_files(_table(tmp_path, log), 0)
    assert not any(f.is_run for f in files)
    kept = [span for span in links if span[1] >= start]
    assert [(f.first_offset, f.last_offset) for f in files][:len(kept)] == kept
    rows = _generic_rows(tmp_path, log)
    assert rows == _log_rows(log, start, coverage.end(0)) and rows[0][0] == start


def test_delete_records_inside_a_run_file_unmerges_it_and_keeps_no_row_below_the_start(
        local, tmp_path):
    mgr = local()
    log = mgr.create_topic("orders", 1, config=TABLE)[0]
    _fill(log, 30)
    assert mgr.tier_now()["orders-0"].table_errors == []
    links = _merge_all(tmp_path, log)
    start = links[2][0] + 3  # inside the run's third link: the first two are wholly below
    assert start < links[2][1]
    log.delete_records_before(start)
    result = mgr.tier_now()["orders-0"]
    assert result.table_errors == []
    coverage = _coverage(tmp_path, log)
    assert coverage.start[0] == start
    files = current_files(_table(tmp_path, log), 0)
    assert not any(f.is_run for f in files)
    assert [(f.first_offset, f.last_offset) for f in files] == links[2:]
    rows = _generic_rows(tmp_path, log)
    assert rows == _log_rows(log, start, coverage.end(0)) and rows[0][0] == start


def test_the_step_compacts_one_run_per_interval_and_only_when_enabled(local, tmp_path, clock):
    mgr = local()
    on = mgr.create_topic("orders", 1, config=COMPACTION)[0]
    off = mgr.create_topic("plain", 1, config=TABLE)[0]
    for log in (on, off):
        _fill(log, 30)
    results = mgr.tier_now()
    assert results["orders-0"].table_errors == [] and results["orders-0"].table_compacted == 1
    assert results["plain-0"].table_errors == [] and results["plain-0"].table_compacted == 0

    def runs(log) -> list[int]:
        return [f.links for f in current_files(_table(tmp_path, log), 0) if f.is_run]

    first = runs(on)
    assert len(first) == 1 and 2 <= first[0] <= 4 and runs(off) == []  # max.links: 4
    _fill(on, 10, start=30)  # a commit within the interval: no second compaction yet
    again = mgr.tier_now()["orders-0"]
    assert again.table_errors == [] and again.table_compacted == 0 and runs(on) == first
    clock.advance(60_000)  # due again: a run with nothing new to tier still compacts
    due = mgr.tier_now()
    assert due["orders-0"].table_errors == [] and due["orders-0"].table_compacted == 1
    assert len(runs(on)) == 2 and all(2 <= k <= 4 for k in runs(on))
    assert runs(off) == [] and due["plain-0"].table_compacted == 0
    end = on.highest_offset_in_remote + 1
    assert _coverage(tmp_path, on).end(0) == end
    assert _generic_rows(tmp_path, on) == _log_rows(on, 0, end)


def test_compaction_needs_the_table():
    from tierlog import LogConfig
    from tierlog.config import check_topic_config
    from tierlog.errors import ConfigError

    config = LogConfig({"remote.storage.enable": True})
    assert not config["remote.log.table.compaction.enable"]
    assert config["remote.log.table.compaction.target.bytes"] == 536_870_912
    assert config["remote.log.table.compaction.max.links"] == 16
    assert config["remote.log.table.compaction.interval.ms"] == 3_600_000
    with pytest.raises(ConfigError, match=re.escape("remote.log.table.compaction.enable")):
        check_topic_config(LogConfig({"remote.storage.enable": True,
                                      "remote.log.table.compaction.enable": True}))
    check_topic_config(LogConfig(COMPACTION | {"remote.storage.enable": True}))
    for key, bad in (("remote.log.table.compaction.max.links", 1),
                     ("remote.log.table.compaction.max.links", 1001),
                     ("remote.log.table.compaction.target.bytes", 1000),
                     ("remote.log.table.compaction.interval.ms", -1)):
        with pytest.raises(ConfigError, match=re.escape(key)):
            LogConfig({key: bad})


def test_a_failed_compaction_is_the_steps_error_and_backs_it_off_never_the_copies(
        faulty, tmp_path, clock):
    faults, mgr = faulty
    log = mgr.create_topic("orders", 1, config=COMPACTION)[0]
    _fill(log, 30)
    # The merge's upload of its run file fails (its local file is tierlog-run-*).
    faults.hang("put_file", where="tierlog-run-", timeout=0.001)
    result = mgr.tier_now()["orders-0"]
    assert result.copied and result.errors == []
    end = log.highest_offset_in_remote + 1
    assert result.table_covered == end and result.table_compacted == 0  # the commit landed
    assert len(result.table_errors) == 1 and "table step" in result.table_errors[0]
    assert not any(f.is_run for f in current_files(_table(tmp_path, log), 0))

    faults.heal()
    assert mgr.tier_now()["orders-0"].table_compacted == 0  # backing off
    clock.advance(BACKOFF_MAX_MS)  # the retry comes after the backoff, not the interval
    again = mgr.tier_now()["orders-0"]
    assert again.table_errors == [] and again.table_compacted == 1
    assert _generic_rows(tmp_path, log) == _log_rows(log, 0, end)


def test_the_tables_own_target_size_wins_over_the_topics(local, tmp_path, clock):
    mgr = local()
    log = mgr.create_topic("orders", 1, config=COMPACTION)[0]
    _fill(log, 30)
    assert mgr.tier_now()["orders-0"].table_compacted == 1  # the topic's 1 MiB target
    with _table(tmp_path, log).transaction() as tx:
        tx.set_properties({"write.target-file-size-bytes": "100"})  # every file is big now
    clock.advance(60_000)
    result = mgr.tier_now()["orders-0"]
    assert result.table_errors == [] and result.table_compacted == 0
