"""TierCatalog: a topic's Iceberg table kept in the tier, committed by the exclusive create of
``v<N+1>.metadata.json``. Create, load and commit; a stale base refused; a response lost after
the create landed; a stale or missing version hint; reading by path with pyiceberg's
StaticTable; two processes racing; the fixed properties (no pyiceberg retry); the coverage
maps carried forward by every commit."""

from __future__ import annotations

import multiprocessing
import threading
import uuid
from pathlib import Path
from typing import Any

import fsspec
import pyarrow.compute as pc
import pytest
import s3fs
from pyiceberg.exceptions import (
    CommitFailedException,
    CommitStateUnknownException,
    NoSuchTableError,
    TableAlreadyExistsError,
)
from pyiceberg.table import StaticTable, Table
from support.s3 import S3_ACCESS_KEY, S3_BUCKET, S3_REGION, S3_SECRET
from support.table_commits import IDENT, SCHEMA, SPEC, commit_rows, race_worker, rows

from tierlog.errors import ConfigError
from tierlog.remote.table.catalog import TierCatalog, table_location
from tierlog.remote.table.coverage import Coverage
from tierlog.remote.tier.layout import table_key
from tierlog.remote.tier.object_store import RemoteTier

KEY = table_key("clicks", "q0Vs7vGvSZ6ljmj-ZmXC1A")


def _catalog(tier: RemoteTier) -> TierCatalog:
    return TierCatalog(tier)


def _coverage(table: Table) -> Coverage:
    return Coverage.of_snapshot(table.current_snapshot(), IDENT[1])


def _offsets(table: Table, partition: int) -> list[int]:
    data = table.scan().to_arrow()
    return sorted(data.filter(pc.equal(data["partition"], partition))["offset"].to_pylist())


def _metadata_names(tier: RemoteTier) -> list[str]:
    return tier.list_names(tier.path(KEY, "metadata"))


@pytest.fixture
def catalog(tier: RemoteTier) -> TierCatalog:
    catalog = _catalog(tier)
    catalog.create_table(IDENT, SCHEMA, partition_spec=SPEC)
    return catalog


def test_create_load_commit(tier: RemoteTier) -> None:
    catalog = _catalog(tier)
    created = catalog.create_table(IDENT, SCHEMA, partition_spec=SPEC)
    assert created.location() == table_location(tier, KEY) == tier.path(KEY)
    assert created.metadata_location == tier.path(KEY, "metadata", "v1.metadata.json")
    assert tier.get_bytes(tier.path(KEY, "metadata", "version-hint.text")) == b"1"
    assert catalog.list_tables("tierlog") == [IDENT]
    commit_rows(catalog, 0, 0, 10)
    commit_rows(catalog, 1, 0, 5)

    other = _catalog(tier).load_table(IDENT)  # another catalog, as another process has
    assert other.metadata_location == tier.path(KEY, "metadata", "v3.metadata.json")
    assert _offsets(other, 0) == list(range(10))
    assert _offsets(other, 1) == list(range(5))
    assert _coverage(other).covered == {0: 10, 1: 5}
    assert catalog.latest_version(IDENT) == 3
    with pytest.raises(TableAlreadyExistsError):
        catalog.create_table(IDENT, SCHEMA, partition_spec=SPEC)
    with pytest.raises(NoSuchTableError):
        catalog.load_table(("tierlog", "absent-q0Vs7vGvSZ6ljmj-ZmXC1A"))
    with pytest.raises(NoSuchTableError, match="namespace"):
        catalog.load_table(("default", IDENT[1]))


def test_a_table_is_created_only_at_its_place_in_the_tier(tier: RemoteTier) -> None:
    with pytest.raises(ConfigError, match="location"):
        _catalog(tier).create_table(IDENT, SCHEMA, location="/somewhere/else")
    with pytest.raises(NoSuchTableError):
        _catalog(tier).create_table(("tierlog", "../escape"), SCHEMA)
    assert tier.list_names(tier.path("_tables"), dirs=True) == []


def test_a_stale_base_is_refused_and_the_winner_kept(catalog: TierCatalog) -> None:
    # Both writers stage an append on v1; the first creates v2; the second is refused with
    # CommitFailedException (nothing of it lands) and can redo its commit on v2.
    first, second = catalog.load_table(IDENT), _catalog(catalog.tier).load_table(IDENT)
    first.append(rows(0, 0, 10), snapshot_properties=Coverage().advanced(0, 10).summary())
    with pytest.raises(CommitFailedException):
        second.append(rows(1, 0, 7), snapshot_properties=Coverage().advanced(1, 7).summary())
    table = catalog.load_table(IDENT)
    assert catalog.latest_version(IDENT) == 2
    assert _offsets(table, 0) == list(range(10)) and _offsets(table, 1) == []
    assert _coverage(table).covered == {0: 10}
    commit_rows(catalog, 1, 0, 7)
    assert _coverage(catalog.load_table(IDENT)).covered == {0: 10, 1: 7}


def _commit_at_once(tables: list[Table], coverage: Coverage, round_: int) -> dict[int, str]:
    """Table i appends 3 rows of partition i from the same base, both released together:
    partition -> "landed" or "refused"."""
    barrier = threading.Barrier(len(tables))
    outcomes: dict[int, str] = {}

    def commit(partition: int, table: Table) -> None:
        summary = coverage.advanced(partition, (round_ + 1) * 3).summary()
        barrier.wait(timeout=10)
        try:
            table.append(rows(partition, round_ * 3, 3), snapshot_properties=summary)
            outcomes[partition] = "landed"
        except CommitFailedException:
            outcomes[partition] = "refused"

    threads = [threading.Thread(target=commit, args=(p, t)) for p, t in enumerate(tables)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    return outcomes


def test_threads_racing_on_one_base_exactly_one_commit_lands_per_version(
        catalog: TierCatalog) -> None:
    # Each round, two writers that loaded the same version commit at once: whether the loser is
    # stopped by the requirement check or by the exclusive create, exactly one version is added.
    for round_ in range(5):
        tables = [catalog.load_table(IDENT), _catalog(catalog.tier).load_table(IDENT)]
        version = catalog.latest_version(IDENT)
        outcomes = _commit_at_once(tables, _coverage(tables[0]), round_)
        assert sorted(outcomes.values()) == ["landed", "refused"], outcomes
        winner = next(p for p, outcome in outcomes.items() if outcome == "landed")
        table = catalog.load_table(IDENT)
        assert catalog.latest_version(IDENT) == (version or 0) + 1
        assert _coverage(table).end(winner) == (round_ + 1) * 3
        # The loser's partition catches up, so the next round starts from one base again.
        commit_rows(catalog, 1 - winner, round_ * 3, 3)
    table = catalog.load_table(IDENT)
    assert _offsets(table, 0) == _offsets(table, 1) == list(range(15))


class LostResponseS3(s3fs.S3FileSystem):  # type: ignore[misc]
    """s3fs whose next exclusive create of a path containing ``lose_after`` lands on the server
    and then fails as a lost response does: with ``error`` (a timeout: outcome unknown), or
    FileExistsError (botocore retried the PUT, and the retry got the 412 of its own first)."""

    lose_after: str | None = None
    error: type[BaseException] = TimeoutError

    def pipe_file(self, path: str, value: bytes, mode: str = "overwrite", **kwargs: object
                  ) -> object:
        out = super().pipe_file(path, value, mode=mode, **kwargs)
        if mode == "create" and self.lose_after and self.lose_after in path:
            self.lose_after = None
            raise self.error(f"response to the PUT of {path} lost")
        return out


@pytest.fixture
def lossy_tier(s3_endpoint: str, s3_options: dict[str, Any]) -> RemoteTier:
    fs = LostResponseS3(key=S3_ACCESS_KEY, secret=S3_SECRET, endpoint_url=s3_endpoint,
                        client_kwargs={"region_name": S3_REGION}, skip_instance_cache=True)
    return RemoteTier(fs, f"{S3_BUCKET}/lost-{uuid.uuid4().hex[:12]}")


def test_a_lost_response_is_unknown_and_the_landed_commit_stays_whole(
        lossy_tier: RemoteTier) -> None:
    catalog = _catalog(lossy_tier)
    catalog.create_table(IDENT, SCHEMA, partition_spec=SPEC)
    commit_rows(catalog, 0, 0, 10)
    assert isinstance(lossy_tier.fs, LostResponseS3)
    lossy_tier.fs.lose_after = "v3.metadata.json"
    table = catalog.load_table(IDENT)
    with pytest.raises(CommitStateUnknownException, match=r"v3\.metadata\.json"):
        table.append(rows(0, 10, 5), snapshot_properties=_coverage(table).advanced(0, 15).summary())
    # pyiceberg deletes the manifests of a commit reported failed; an unknown one keeps them,
    # so the landed v3 reads whole, and the committer's reload finds it done.
    table = catalog.load_table(IDENT)
    assert catalog.latest_version(IDENT) == 3
    assert _offsets(table, 0) == list(range(15))
    assert commit_rows(catalog, 0, 10, 5) == 0
    assert catalog.latest_version(IDENT) == 3


def test_a_retried_create_that_finds_its_own_bytes_is_a_success(lossy_tier: RemoteTier) -> None:
    catalog = _catalog(lossy_tier)
    catalog.create_table(IDENT, SCHEMA, partition_spec=SPEC)
    assert isinstance(lossy_tier.fs, LostResponseS3)
    lossy_tier.fs.error = FileExistsError
    lossy_tier.fs.lose_after = "v2.metadata.json"
    table = catalog.load_table(IDENT)
    table.append(rows(0, 0, 4), snapshot_properties=Coverage().advanced(0, 4).summary())
    assert table.metadata_location.endswith("/v2.metadata.json")
    assert _offsets(catalog.load_table(IDENT), 0) == [0, 1, 2, 3]


@pytest.mark.parametrize("hint", [b"1", b"not a number", b"9", None])
def test_a_stale_garbled_or_missing_hint_still_finds_the_latest(catalog: TierCatalog,
                                                                hint: bytes | None) -> None:
    for i in range(3):
        commit_rows(catalog, 0, i * 2, 2)
    tier = catalog.tier
    hint_path = tier.path(KEY, "metadata", "version-hint.text")
    if hint is None:
        tier.delete(hint_path)
    else:
        tier.put_bytes(hint, hint_path)
    assert catalog.latest_version(IDENT) == 4
    table = _catalog(tier).load_table(IDENT)
    assert table.metadata_location.endswith("/v4.metadata.json")
    assert _offsets(table, 0) == list(range(6))
    # The next commit is v5 and puts the hint right.
    commit_rows(catalog, 0, 6, 2)
    assert tier.get_bytes(hint_path) == b"5"


def test_static_table_reads_the_table_by_its_path(catalog: TierCatalog) -> None:
    commit_rows(catalog, 0, 0, 10)
    commit_rows(catalog, 2, 0, 3)
    location = catalog.load_table(IDENT).location()
    static = StaticTable.from_metadata(location)
    assert static.metadata_location.endswith("/v3.metadata.json")
    assert static.scan().to_arrow().num_rows == 13
    assert _coverage(static).covered == {0: 10, 2: 3}
    # A hint that lags gives an older snapshot: still consistent, its own coverage says so.
    catalog.tier.put_bytes(b"2", catalog.tier.path(KEY, "metadata", "version-hint.text"))
    older = StaticTable.from_metadata(location)
    assert older.scan().to_arrow().num_rows == 10
    assert _coverage(older).covered == {0: 10}


def test_two_processes_racing_commit_every_row_exactly_once(tmp_path: Path) -> None:
    root = str(tmp_path / "tier")
    tier = RemoteTier(fsspec.filesystem("file"), root)
    catalog = _catalog(tier)
    catalog.create_table(IDENT, SCHEMA, partition_spec=SPEC)
    context = multiprocessing.get_context("spawn")  # fork hangs once pyarrow is loaded
    go, out = context.Event(), context.Queue()
    commits, count = 6, 5
    processes = [context.Process(target=race_worker, args=(root, p, commits, count, go, out))
                 for p in (0, 1)]
    for process in processes:
        process.start()
    go.set()
    results = dict(out.get(timeout=120) for _ in processes)
    for process in processes:
        process.join(timeout=30)
    assert all(isinstance(conflicts, int) for conflicts in results.values()), results
    table = catalog.load_table(IDENT)
    for partition in (0, 1):
        assert _offsets(table, partition) == list(range(commits * count))
    assert _coverage(table).covered == {0: commits * count, 1: commits * count}
    # One version per landed commit: the table's creation and 2 x 6 appends.
    versions = sorted(int(n[1:].split(".")[0]) for n in _metadata_names(tier)
                      if n.endswith(".metadata.json"))
    assert versions == list(range(1, 2 * commits + 2))


def test_pyiceberg_retries_are_off_and_cannot_be_turned_on(tier: RemoteTier) -> None:
    catalog = _catalog(tier)
    with pytest.raises(ConfigError, match=r"commit\.retry\.num-retries"):
        catalog.create_table(IDENT, SCHEMA, properties={"commit.retry.num-retries": "4"})
    with pytest.raises(ConfigError, match="delete-after-commit"):
        catalog.create_table(IDENT, SCHEMA, properties={
            "write.metadata.delete-after-commit.enabled": "true"})
    table = catalog.create_table(IDENT, SCHEMA, partition_spec=SPEC,
                                 properties={"commit.retry.num-retries": "0"})
    assert table.properties["commit.retry.num-retries"] == "0"
    with pytest.raises(ConfigError, match=r"commit\.retry\.num-retries"):
        table.transaction().set_properties({"commit.retry.num-retries": "3"}).commit_transaction()
    with pytest.raises(ConfigError, match=r"commit\.retry\.num-retries"):
        catalog.load_table(IDENT).transaction().remove_properties(
            "commit.retry.num-retries").commit_transaction()
    assert catalog.latest_version(IDENT) == 1
    other = catalog.load_table(IDENT).transaction().set_properties({"owner": "tierlog"})
    assert other.commit_transaction().properties["commit.retry.num-retries"] == "0"


def test_every_commit_carries_the_coverage_maps_forward(catalog: TierCatalog) -> None:
    commit_rows(catalog, 0, 0, 10)
    table = catalog.load_table(IDENT)
    # A commit that is not an append (a log start offset applied) keeps partition 0's end.
    started = _coverage(table).started(3, 40)
    table.transaction().set_properties({"owner": "tierlog"}).commit_transaction()
    table = catalog.load_table(IDENT)
    table.append(rows(3, 40, 2), snapshot_properties=started.advanced(3, 42).summary())
    commit_rows(catalog, 1, 0, 4)
    coverage = _coverage(catalog.load_table(IDENT))
    assert coverage.covered == {0: 10, 1: 4, 3: 42}
    assert coverage.start == {3: 40}
    summary = catalog.load_table(IDENT).current_snapshot().summary  # type: ignore[union-attr]
    assert summary["tierlog.covered"] == '{"0":10,"1":4,"3":42}'
    assert summary["tierlog.version"] == "1"


def test_drop_table_removes_every_object_of_the_table(catalog: TierCatalog) -> None:
    commit_rows(catalog, 0, 0, 3)
    catalog.drop_table(IDENT)
    assert not catalog.table_exists(IDENT)
    assert catalog.list_tables("tierlog") == []
    assert catalog.tier.list_names(catalog.tier.path(KEY), dirs=True) == []
    with pytest.raises(NoSuchTableError):
        catalog.drop_table(IDENT)
