"""The table follows a restore (tierlog.remote.ops.restore_table, DESIGN §6): a topic tiered with
its table, its disks lost, restored to a cut: the table's rows are then the restored log's own
(``Log.read``: every data record below the cut, the aborted flag as read_committed drops them),
the cut segment's prefix converted into the file in place of the cut link's, coverage ending at
the cut; a cut inside a run file unmerges it first; a fork to a new topic starts no table; a
restore without a cut keeps the table, and an adopting owner's tiering continues it from its
covered end.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from support.backfill_rows import backfill
from support.backfill_rows import rows as backfill_rows
from support.restore_world import Source, lose_disks_after, tier_config
from support.table_tier import convert_partition, ready

from tierlog import Log, Record
from tierlog.manager.log_manager import LogManager
from tierlog.plugins.local import create_remote_storage
from tierlog.remote.ops.restore import plan_restore
from tierlog.remote.ops.restore_table import cut_tables
from tierlog.remote.ops.scrub import FindingKind, scrub_tier
from tierlog.remote.read.readable import segment_chain
from tierlog.remote.table.catalog import TierCatalog
from tierlog.remote.table.commit import TableCommitter, current_files
from tierlog.remote.table.coverage import Coverage
from tierlog.remote.table.naming import DataFileName
from tierlog.remote.table.schema import open_or_create_table, table_identifier
from tierlog.remote.tier.object_store import RemoteTier
from tierlog.remote.tier.topics import topic_partitions

TOPIC = "orders"


@pytest.fixture
def source(request: pytest.FixtureRequest, tmp_path: Path, clock: Any) -> Source:
    """``orders`` tiered to a local tier, its table holding every stable link, disks lost."""
    src = lose_disks_after(tmp_path, tier_config("local", tmp_path, request), clock)
    tier = source_tier(src)
    tip = topic_partitions(tier, TOPIC)[0]
    catalog = TierCatalog(tier)
    table = open_or_create_table(catalog, TOPIC, tip.topic_id)
    files = convert_partition(tier, table, tip)
    TableCommitter(catalog, table_identifier(TOPIC, tip.topic_id)).commit(
        [ready(f) for f in files], starts={0: segment_chain(tier, tip)[0].first_offset})
    return src


def source_tier(source: Source) -> RemoteTier:
    tier: RemoteTier = create_remote_storage(source.config["remote.storage.url"], {}).tier
    return tier


def table_rows(tier: RemoteTier, topic_id: str) -> list[tuple[int, bytes, bool]]:
    """(offset, key, aborted) of the table's rows of partition 0, in offset order."""
    table = TierCatalog(tier).load_table(table_identifier(TOPIC, topic_id))
    rows = table.scan(selected_fields=("offset", "key", "aborted")).to_arrow().to_pylist()
    return sorted((r["offset"], r["key"], r["aborted"]) for r in rows)


def log_rows(log: Log, end: int) -> list[tuple[int, bytes, bool]]:
    """(offset, key, aborted) of the log's data records below ``end``, from ``Log.read``:
    aborted when read_committed leaves it out."""
    committed = {r.offset for r in _read(log, end, "read_committed")}
    return [(r.offset, r.key, r.offset not in committed)
            for r in _read(log, end, "read_uncommitted")]


def _read(log: Log, end: int, isolation: str) -> list[Record]:
    """The data records ``Log.read`` returns below ``end`` at ``isolation``."""
    found: list[Record] = []
    offset = log.log_start_offset
    while offset < end:
        info = log.read(offset, max_bytes=1 << 16, isolation=isolation, max_offset=end)
        batches = list(info.batches())
        if not batches:
            break
        found += [r for r in info.records() if r.offset < end]
        offset = batches[-1].next_offset
    return found


def coverage(tier: RemoteTier, topic_id: str) -> Coverage:
    table = TierCatalog(tier).load_table(table_identifier(TOPIC, topic_id))
    return Coverage.of_snapshot(table.current_snapshot(), "t")


@pytest.mark.parametrize("mark", ["after-marker", "seg3"])
def test_a_cut_cuts_the_table_to_the_restored_logs_rows(source: Source, clock: Any,
                                                         mark: str) -> None:
    cut = source.marks[mark]
    with LogManager.open(source.data, source.config, time_ms=clock,
                         start_scheduler=False) as mgr:
        tier = source_tier(source)
        assert coverage(tier, source.topic_id).end(0) > cut
        (log,) = mgr.restore_topic(TOPIC, to_offset=cut, execute=True)
        assert log.log_end_offset == cut
        assert coverage(tier, source.topic_id).end(0) == cut
        rows = table_rows(tier, source.topic_id)
        assert rows == log_rows(log, cut)
        assert any(aborted for _, _, aborted in rows)  # the flag is checked, not vacuous
        table = TierCatalog(tier).load_table(table_identifier(TOPIC, source.topic_id))
        last = current_files(table, 0)[-1]
        assert last.last_offset == cut - 1
        if log.local_log_start_offset < cut:  # the cut fell inside a segment: its prefix's file
            prefix = max(segment_chain(tier, topic_partitions(tier, TOPIC)[0]),
                         key=lambda link: link.last_offset).segment
            assert DataFileName.parse(last.data_file.file_path).segment_id == prefix.segment_id
    kinds = {f.kind for f in scrub_tier(tier, topic=TOPIC, grace_ms=10**12).findings}
    assert not kinds & {FindingKind.TABLE_MISSING_FILE, FindingKind.TABLE_DAMAGED_FILE,
                        FindingKind.TABLE_STRAY_FILE, FindingKind.TABLE_TILING}


@pytest.mark.parametrize("mark", ["after-marker", "seg3"])
def test_a_cut_inside_a_run_file_unmerges_it_first(source: Source, clock: Any,
                                                   mark: str) -> None:
    from support.table_runs import merge

    cut = source.marks[mark]
    tier = source_tier(source)
    tip = topic_partitions(tier, TOPIC)[0]
    catalog = TierCatalog(tier)
    run = merge(tier, TableCommitter(catalog, table_identifier(TOPIC, tip.topic_id)), tip)
    assert run.first_offset < cut <= run.last_offset
    with LogManager.open(source.data, source.config, time_ms=clock,
                         start_scheduler=False) as mgr:
        (log,) = mgr.restore_topic(TOPIC, to_offset=cut, execute=True)
        assert coverage(tier, source.topic_id).end(0) == cut
        assert table_rows(tier, source.topic_id) == log_rows(log, cut)
        files = current_files(catalog.load_table(table_identifier(TOPIC, tip.topic_id)), 0)
        assert not any(f.is_run for f in files) and files[-1].last_offset == cut - 1
    kinds = {f.kind for f in scrub_tier(tier, topic=TOPIC, grace_ms=10**12).findings}
    assert not kinds & {FindingKind.TABLE_MISSING_FILE, FindingKind.TABLE_DAMAGED_FILE,
                        FindingKind.TABLE_STRAY_FILE, FindingKind.TABLE_TILING}


def test_a_restore_run_again_cuts_the_table_once(source: Source, clock: Any) -> None:
    cut = source.marks["after-marker"]
    with LogManager.open(source.data, source.config, time_ms=clock,
                         start_scheduler=False) as mgr:
        tier = source_tier(source)
        mgr.restore_topic(TOPIC, to_offset=cut, execute=True)
        table = TierCatalog(tier).load_table(table_identifier(TOPIC, source.topic_id))
        snapshot = table.current_snapshot()
        plan = plan_restore(mgr.remote_log_manager.rlmm, mgr.remote_log_manager.rsm, TOPIC,
                            time_ms=clock, to_offset=cut, owners=None)
        cut_tables(tier, plan.partitions)
        again = TierCatalog(tier).load_table(table_identifier(TOPIC, source.topic_id))
        assert again.current_snapshot().snapshot_id == snapshot.snapshot_id


def test_a_fork_to_a_new_topic_starts_no_table(source: Source, clock: Any) -> None:
    cut = source.marks["after-marker"]
    with LogManager.open(source.data, source.config, time_ms=clock,
                         start_scheduler=False) as mgr:
        tier = source_tier(source)
        before = coverage(tier, source.topic_id)
        (log,) = mgr.restore_topic(TOPIC, to_offset=cut, to_topic="orders-fork")
        assert not TierCatalog(tier).table_exists(table_identifier("orders-fork", log.topic_id))
        assert coverage(tier, source.topic_id) == before  # the source's table is untouched


def test_a_restore_without_a_cut_keeps_the_table(source: Source, clock: Any) -> None:
    with LogManager.open(source.data, source.config, time_ms=clock,
                         start_scheduler=False) as mgr:
        tier = source_tier(source)
        before = coverage(tier, source.topic_id)
        table = TierCatalog(tier).load_table(table_identifier(TOPIC, source.topic_id))
        snapshot = table.current_snapshot().snapshot_id
        (log,) = mgr.restore_topic(TOPIC)
        assert coverage(tier, source.topic_id) == before
        again = TierCatalog(tier).load_table(table_identifier(TOPIC, source.topic_id))
        assert again.current_snapshot().snapshot_id == snapshot
        assert table_rows(tier, source.topic_id) == log_rows(log, before.end(0))


def test_an_adopting_owners_tiering_continues_the_table_from_covered(
        request: pytest.FixtureRequest, tmp_path: Path, clock: Any) -> None:
    config = tier_config("local", tmp_path, request)
    tier = create_remote_storage(config["remote.storage.url"], {}).tier
    backfill(tier, TOPIC, [[backfill_rows(0, 80)]])  # Spark's write: no owner
    topic_id = topic_partitions(tier, TOPIC)[0].topic_id
    open_or_create_table(TierCatalog(tier), TOPIC, topic_id)
    backfill(tier, TOPIC, [[backfill_rows(80, 40)]])  # the backfill fills the table
    first = coverage(tier, topic_id).end(0)
    assert first == 120
    table = TierCatalog(tier).load_table(table_identifier(TOPIC, topic_id))
    history = [s.snapshot_id for s in table.snapshots()]
    with LogManager.open(tmp_path / "data", config, time_ms=clock,
                         start_scheduler=False) as mgr:
        (log,) = mgr.adopt_topic(TOPIC, config={"remote.log.table.enable": True})
        for i in range(3):
            log.append_records([Record(key=b"k%d" % i, value=b"v" * 100) for _ in range(20)])
            log.roll()
        log.update_high_watermark(log.log_end_offset)
        result = mgr.tier_now()[f"{TOPIC}-0"]
        assert not result.errors and not result.table_errors
        end = log.highest_offset_in_remote + 1
        assert end == 180
        assert coverage(tier, topic_id).end(0) == end
        table = TierCatalog(tier).load_table(table_identifier(TOPIC, topic_id))
        assert [s.snapshot_id for s in table.snapshots()][:len(history)] == history  # kept
        assert table_rows(tier, topic_id) == log_rows(log, end)  # each record once
