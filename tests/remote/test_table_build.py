"""build_table (tierlog.remote.table.build): a tier written without tables gets each topic's
table, holding the reader's rows at both isolation levels below the tier's last stable offset;
a rerun is a no-op; a build stopped after k links, or SIGKILLed mid-build in another process,
completes on a rerun with every row once and every committed file present."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from support.tier_builder import BuiltTier, build_tier

from tierlog.errors import TableCatalogRequiredError, UnknownTopicOrPartitionError
from tierlog.plugins.local import create_remote_storage
from tierlog.reader import SCHEMA, RemoteTopicReader
from tierlog.remote.table.build import BuildProgress, build_table, uncovered_links
from tierlog.remote.table.catalog import TierCatalog
from tierlog.remote.table.catalogs import load_topic_table, open_catalog
from tierlog.remote.table.commit import current_files
from tierlog.remote.table.schema import ABORTED, table_identifier
from tierlog.remote.tier.object_store import RemoteTier
from tierlog.remote.tier.topics import has_table

ISOLATIONS = ("read_uncommitted", "read_committed")


@pytest.fixture
def built(tmp_path: Path) -> BuiltTier:
    """support.tier_builder's tier (orders p0-p1 with transactions, clicks p0), no tables."""
    url = (tmp_path / "tier").as_uri()
    return build_tier(tmp_path, create_remote_storage(url, {"fsync": False}), url, rounds=4)


def _tier(built: BuiltTier) -> RemoteTier:
    tier: RemoteTier = built.rsm.tier
    return tier


def _reader_rows(built: BuiltTier, topic: str) -> dict[str, dict[int, pa.Table]]:
    """What the reader returns of each partition from the segments (read before any table)."""
    reader = RemoteTopicReader(built.url)
    parts = sorted(p for t, p in built.partitions if t == topic)
    return {iso: {p: reader.read_table(topic, [p], isolation_level=iso) for p in parts}
            for iso in ISOLATIONS}


def _table_rows(built: BuiltTier, topic: str) -> pa.Table:
    tip = next(tp.tip for (t, _), tp in built.partitions.items() if t == topic)
    table = TierCatalog(_tier(built)).load_table(table_identifier(topic, tip.topic_id))
    # The files' own rows (pyiceberg's scan reads a null list of headers as an empty one).
    files = [pq.read_table(f.data_file.file_path.removeprefix("file://"))
             for f in current_files(table)]
    return pa.concat_tables(files).sort_by([("partition", "ascending"), ("offset", "ascending")])


def _check_rows(built: BuiltTier, topic: str, expected: dict[str, dict[int, pa.Table]],
                covered: dict[int, int]) -> None:
    """The table's rows are the reader's below each partition's covered end, once each, and
    its not-aborted rows the read_committed reader's."""
    rows = _table_rows(built, topic)
    for p, end in covered.items():
        mine = rows.filter(pc.equal(rows["partition"], p))
        offsets = mine["offset"].to_pylist()
        assert len(offsets) == len(set(offsets)), (topic, p)  # no row twice
        for iso in ISOLATIONS:
            want = expected[iso][p]
            want = want.filter(pc.less(want["offset"], end))
            got = mine if iso == "read_uncommitted" else mine.filter(pc.invert(mine[ABORTED]))
            assert got.drop_columns([ABORTED]).cast(SCHEMA).equals(want), (topic, p, iso)
            assert want.num_rows > 0, (topic, p, iso)


def _committed_files_exist(built: BuiltTier, topic: str) -> None:
    tip = next(tp.tip for (t, _), tp in built.partitions.items() if t == topic)
    table = TierCatalog(_tier(built)).load_table(table_identifier(topic, tip.topic_id))
    files = current_files(table)
    assert files
    for f in files:
        assert os.path.exists(f.data_file.file_path.removeprefix("file://")), f


def test_a_build_over_a_tier_without_tables_holds_the_readers_rows(built: BuiltTier) -> None:
    tier = _tier(built)
    expected = {t: _reader_rows(built, t) for t in ("orders", "clicks")}
    steps: list[BuildProgress] = []
    report = build_table(tier, "orders", progress=steps.append, batch_links=3)
    assert report.links == len(steps) == steps[-1].links_total > 3
    assert steps[-1].bytes_done == steps[-1].bytes_total == report.segment_bytes
    assert report.commits == -(-report.links // 3)  # one commit per batch of 3
    assert report.committed == report.links and report.skipped == report.remaining == 0
    # orders-1 ends in a transaction whose marker is not in the tier: its table stops there
    orders1 = built.partitions[("orders", 1)]
    assert report.covered[1] < orders1.tier_end
    assert report.covered[0] == built.partitions[("orders", 0)].tier_end
    _check_rows(built, "orders", expected["orders"], report.covered)
    aborted = _table_rows(built, "orders")[ABORTED]
    assert pc.any(aborted).as_py()  # aborted transactions' rows are there, flagged
    assert not has_table(tier, "clicks", built.partitions[("clicks", 0)].tip.topic_id)

    clicks = build_table(tier, "clicks")
    _check_rows(built, "clicks", expected["clicks"], clicks.covered)

    again = build_table(tier, "orders")  # a rerun: nothing to do, no new snapshot
    assert (again.links, again.commits, again.snapshot_id, again.covered) == (
        0, 0, report.snapshot_id, report.covered)


def test_a_build_stopped_after_k_links_completes_on_a_rerun_with_no_row_twice(
        built: BuiltTier) -> None:
    tier = _tier(built)
    expected = _reader_rows(built, "orders")
    first = build_table(tier, "orders", max_links=3, batch_links=2)
    assert (first.links, first.commits) == (3, 2) and first.remaining > 0
    rest = build_table(tier, "orders", batch_links=2)
    assert rest.links == first.remaining and rest.skipped == 0
    _check_rows(built, "orders", expected, rest.covered)
    _committed_files_exist(built, "orders")


#: The killed build: it converts with commits every 2 links and SIGKILLs itself right after
#: converting link N (published, not committed; the links before it committed up to the last
#: even one).
_KILLED = """
import os, signal, sys
import fsspec
from tierlog.remote.table.build import build_table
from tierlog.remote.tier.object_store import RemoteTier

root, kill_at = sys.argv[1], int(sys.argv[2])
def progress(step):
    if step.links_done == kill_at:
        os.kill(os.getpid(), signal.SIGKILL)
build_table(RemoteTier(fsspec.filesystem("file"), root), "orders", progress=progress,
            batch_links=2)
"""


@pytest.mark.parametrize("kill_at", [2, 3], ids=["before-first-commit", "mid-second-batch"])
def test_a_build_killed_mid_way_completes_on_a_rerun_exactly_once(built: BuiltTier,
                                                                  kill_at: int) -> None:
    tier = _tier(built)
    expected = _reader_rows(built, "orders")
    killed = subprocess.run([sys.executable, "-c", _KILLED, tier.root, str(kill_at)],
                            capture_output=True, text=True, timeout=120, check=False)
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    after_kill = build_table(tier, "orders")
    total = sum(len(uncovered_links(tier, tp.tip, None).links)
                for (t, _), tp in built.partitions.items() if t == "orders")
    committed_before = 2 * ((kill_at - 1) // 2)  # the batches committed before the kill
    assert after_kill.links == after_kill.committed == total - committed_before
    assert after_kill.skipped == 0
    _check_rows(built, "orders", expected, after_kill.covered)
    _committed_files_exist(built, "orders")
    assert build_table(tier, "orders").links == 0


def test_a_topic_the_tier_does_not_hold_is_named(built: BuiltTier) -> None:
    with pytest.raises(UnknownTopicOrPartitionError, match="nosuch"):
        build_table(_tier(built), "nosuch")
    with pytest.raises(ValueError, match="batch_links"):
        build_table(_tier(built), "orders", batch_links=0)


def test_a_table_a_users_catalog_owns_is_built_through_that_catalog_only(
        built: BuiltTier, tmp_path: Path) -> None:
    tier = _tier(built)
    catalog = open_catalog(tier, {"type": "sql", "uri": f"sqlite:///{tmp_path}/cat.db"})
    first = build_table(tier, "orders", catalog=catalog, max_links=2)
    assert first.links == 2 and first.remaining > 0
    with pytest.raises(TableCatalogRequiredError, match="is owned by the user"):
        build_table(tier, "orders")  # the bucket alone would fork the catalog's table
    rest = build_table(tier, "orders", catalog=catalog)
    assert rest.links == first.remaining and rest.skipped == 0
    assert rest.covered[0] == built.partitions[("orders", 0)].tier_end
    table = load_topic_table(tier, "orders", built.partitions[("orders", 0)].tip.topic_id)
    assert table is not None and table.current_snapshot() is not None
    assert table.current_snapshot().snapshot_id == rest.snapshot_id  # the pointer follows
