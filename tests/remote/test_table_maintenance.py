"""TableMaintenance: snapshots expire once superseded longer than the retention (never the
current one); the sweep deletes only what no live snapshot references and is older than the
grace (data files, manifests, ``.partial`` leftovers, metadata versions beyond the newest
kept), on a local tier and on S3; the drop removes the table's prefix. A fake clock drives
every age: nothing sleeps."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
from support.clock import FakeClock
from support.s3 import S3_BUCKET, s3_client
from support.table_files import IDENT, TOPIC, TOPIC_ID, create_table, write_link

from tierlog.common.clock import system_time_ms
from tierlog.remote.table.catalog import TierCatalog
from tierlog.remote.table.commit import ReadyFile, TableCommitter, current_files
from tierlog.remote.table.maintenance import TableMaintenance, drop_table
from tierlog.remote.tier.layout import table_key
from tierlog.remote.tier.object_store import RemoteTier

GRACE_MS = 60_000
RETENTION_MS = 3_600_000


@pytest.fixture(params=["local", "s3"])
def store(request: pytest.FixtureRequest) -> Iterator[RemoteTier]:
    """An empty tier: a local directory, or a prefix of moto's S3 bucket."""
    if request.param == "local":
        yield request.getfixturevalue("tier")
    else:
        endpoint = request.getfixturevalue("s3_endpoint")
        request.getfixturevalue("s3_options")
        yield RemoteTier(s3_client(endpoint), f"{S3_BUCKET}/maint-{uuid.uuid4().hex[:12]}")


@pytest.fixture
def clock() -> FakeClock:
    """Now, for real: the files' and snapshots' times are the real clock's."""
    return FakeClock(system_time_ms())


def maintenance(catalog: TierCatalog, clock: FakeClock, **kwargs: int) -> TableMaintenance:
    return TableMaintenance(catalog.tier, catalog, IDENT, orphan_grace_ms=GRACE_MS,
                            snapshot_retention_ms=RETENTION_MS, time_ms=clock, **kwargs)


def commit_links(catalog: TierCatalog, spans: list[tuple[int, int]]) -> list[ReadyFile]:
    committer = TableCommitter(catalog, IDENT, backoff=lambda attempt: None)
    files = []
    for first, last in spans:
        files.append(write_link(catalog.tier, catalog.load_table(IDENT), 0, first, last))
        committer.commit(files[-1:], starts={0: spans[0][0]})
    return files


def path_of(tier: RemoteTier, location: str) -> str:
    return str(tier.fs._strip_protocol(location))


def exists(tier: RemoteTier, location: str) -> bool:
    return bool(tier.fs.exists(path_of(tier, location)))


def assert_reads(catalog: TierCatalog, offsets: list[int]) -> None:
    """The current snapshot reads ``offsets``, and every file it names exists."""
    table = catalog.load_table(IDENT)
    assert sorted(table.scan().to_arrow()["offset"].to_pylist()) == offsets
    for f in current_files(table):
        assert exists(catalog.tier, f.data_file.file_path)


def test_snapshots_expire_once_superseded_longer_than_the_retention(catalog, clock) -> None:
    commit_links(catalog, [(0, 4), (5, 9), (10, 14)])
    _, second, third = catalog.load_table(IDENT).metadata.snapshots
    upkeep = maintenance(catalog, clock)
    # The first was replaced when the second was committed: kept for the retention from then.
    clock.now = second.timestamp_ms + RETENTION_MS
    assert upkeep.expire_snapshots() == 0
    clock.now = third.timestamp_ms + RETENTION_MS + 1
    assert upkeep.expire_snapshots() == 2
    table = catalog.load_table(IDENT)
    assert [s.snapshot_id for s in table.metadata.snapshots] == [third.snapshot_id]
    clock.advance(10 * RETENTION_MS)
    assert upkeep.expire_snapshots() == 0  # the current snapshot stays, however old
    assert_reads(catalog, list(range(15)))


def test_the_sweep_deletes_orphans_only_past_the_grace(store, clock) -> None:
    catalog = TierCatalog(store)
    table = create_table(catalog)
    commit_links(catalog, [(0, 4), (5, 9)])
    location = path_of(store, table.location())
    # What crashed writers leave: a file never committed, a lost commit's manifest and
    # manifest list, and a local publish's partial object.
    orphan = write_link(store, table, 0, 10, 14).data_file.file_path
    leftovers = [f"{location}/metadata/{uuid.uuid4()}-m0.avro",
                 f"{location}/metadata/snap-1-0-{uuid.uuid4()}.avro",
                 f"{location}/data/p0/{'0' * 18}10-{'0' * 18}14-seg-0badf00d.parquet.partial"]
    for path in leftovers:
        store.fs.pipe_file(path, b"left over")
    upkeep = maintenance(catalog, clock)
    young = upkeep.run()
    assert young.deleted == () and young.kept_young == 4
    clock.advance(GRACE_MS + 60_000)
    report = upkeep.run()
    assert sorted(report.deleted) == sorted([path_of(store, orphan), *leftovers])
    assert report.kept_young == 0
    assert not any(store.fs.exists(p) for p in report.deleted)
    assert_reads(catalog, list(range(10)))
    assert upkeep.run().deleted == ()  # nothing else was an orphan


def test_files_a_change_removed_stay_while_a_snapshot_names_them(catalog, clock) -> None:
    old, kept = commit_links(catalog, [(0, 9), (10, 19)])
    TableCommitter(catalog, IDENT).apply_start(0, 10)  # retention removed the first link
    before = catalog.load_table(IDENT).metadata.snapshots[-2]
    upkeep = maintenance(catalog, clock)
    clock.advance(GRACE_MS + 60_000)  # the file is old: only the live snapshots keep it
    assert upkeep.run().deleted == ()
    assert exists(catalog.tier, old.data_file.file_path)
    older = catalog.load_table(IDENT).scan(snapshot_id=before.snapshot_id).to_arrow()
    assert older.num_rows == 20  # a read planned before the change still works
    clock.advance(RETENTION_MS)
    report = upkeep.run()
    assert report.expired_snapshots == 2  # both appends; the current one stays
    assert path_of(catalog.tier, old.data_file.file_path) in report.deleted
    assert not exists(catalog.tier, old.data_file.file_path)
    assert exists(catalog.tier, kept.data_file.file_path)
    assert_reads(catalog, list(range(10, 20)))


def test_metadata_versions_beyond_the_newest_kept_go_after_the_grace(catalog, clock) -> None:
    commit_links(catalog, [(i, i) for i in range(5)])  # v1 (the creation) to v6
    tier = catalog.tier
    metadata = tier.path(table_key(TOPIC, TOPIC_ID), "metadata")
    upkeep = maintenance(catalog, clock, keep_versions=3)
    assert not [p for p in upkeep.run().deleted if p.endswith(".metadata.json")]
    clock.advance(GRACE_MS + 60_000)
    deleted = [p.rsplit("/", 1)[1] for p in upkeep.run().deleted]
    assert sorted(n for n in deleted if n.endswith(".metadata.json")) == [
        "v1.metadata.json", "v2.metadata.json", "v3.metadata.json"]
    names = tier.list_names(metadata)
    assert [n for n in names if n.endswith(".metadata.json")] == [
        "v4.metadata.json", "v5.metadata.json", "v6.metadata.json"]
    assert "version-hint.text" in names
    # The table still loads, with or without its hint, and the next commit is v7.
    tier.delete(f"{metadata}/version-hint.text")
    assert catalog.latest_version(IDENT) == 6
    commit_links(catalog, [(5, 9)])
    assert catalog.latest_version(IDENT) == 7
    assert_reads(catalog, list(range(10)))


def test_drop_deletes_the_table_and_everything_under_it(catalog) -> None:
    commit_links(catalog, [(0, 4)])
    other = create_table(catalog, "AAAAAAAAAAAAAAAAAAAAAA").name()
    drop_table(catalog.tier, TOPIC, TOPIC_ID)
    assert not catalog.table_exists(IDENT)
    assert not catalog.tier.fs.exists(catalog.tier.path(table_key(TOPIC, TOPIC_ID)))
    drop_table(catalog.tier, TOPIC, TOPIC_ID)  # nothing left: nothing to do
    assert catalog.list_tables("tierlog") == [other]
