"""A topic table in a user's own catalog (remote.log.table.catalog.*, tierlog.remote.table.catalogs):
a topic naming a SQL catalog (sqlite) is tiered by a LogManager; its table is in that catalog,
located at the topic's place in the tier, with no tier-catalog metadata; ``_pointer.json``
names the catalog's current metadata, so tierlog.reader with only the bucket reads the table's
rows (the same as the segments'), a stale pointer still reads right, and bucket-only writers
(restore's cut, scrub --repair) refuse to change it behind its catalog; a LogManager restore
told the topic's catalog cuts it there, and deleting the topic drops it from the catalog."""

from __future__ import annotations

import json
from pathlib import Path

import fsspec
import pytest
from pyiceberg.catalog import load_catalog

from tierlog import Record
from tierlog.errors import ConfigError, CorruptRemoteMetadataError, TableCatalogRequiredError
from tierlog.manager.log_manager import LogManager
from tierlog.reader import RemoteTopicReader
from tierlog.reader._table import TableRead
from tierlog.remote.ops.scrub import FindingKind, scrub_tier
from tierlog.remote.table.catalog import TierCatalog, table_location
from tierlog.remote.table.catalogs import (
    POINTER,
    load_topic_table,
    open_catalog,
    open_topic_table,
    read_pointer,
    writer_catalog,
)
from tierlog.remote.table.commit import current_files
from tierlog.remote.table.schema import table_identifier
from tierlog.remote.tier.layout import table_key
from tierlog.remote.tier.object_store import RemoteTier

TABLE = {"remote.log.table.enable": True}


def _catalog_props(tmp_path: Path) -> dict[str, str]:
    return {"type": "sql", "uri": f"sqlite:///{tmp_path}/cat.db"}


def _topic_config(tmp_path: Path) -> dict[str, object]:
    return {**TABLE, **{f"remote.log.table.catalog.{k}": v
                        for k, v in _catalog_props(tmp_path).items()}}


def _records(i: int, n: int = 10) -> list[Record]:
    return [Record(key=b"k%d" % (i * n + j), value=b"v-%d-" % (i * n + j) + b"x" * 40)
            for j in range(n)]


def _broker_config(tmp_path: Path) -> dict[str, object]:
    return {"segment.bytes": 2048, "remote.storage.enable": True,
            "remote.storage.manager": "local", "remote.storage.url": f"file://{tmp_path}/tier",
            "remote.fetch.max.wait.ms": 30_000}


@pytest.fixture
def tiered(tmp_path, clock):
    """A topic of a SQL catalog, 30 batches tiered (its table written by the table step)."""
    mgr = LogManager.open(tmp_path / "data", _broker_config(tmp_path), time_ms=clock,
                          start_scheduler=False)
    try:
        log = mgr.create_topic("orders", 1, config=_topic_config(tmp_path))[0]
        for i in range(30):
            log.append_records(_records(i))
        result = mgr.tier_now()["orders-0"]
        assert result.copied and result.errors == [] and result.table_errors == []
        yield mgr, log, result
    finally:
        mgr.close()


def _tier(tmp_path: Path) -> RemoteTier:
    return RemoteTier(fsspec.filesystem("file"), str(tmp_path / "tier"))


def _offsets(table) -> list[int]:
    return sorted(table.scan().to_arrow()["offset"].to_pylist())


def test_the_table_is_in_the_users_catalog_at_the_topics_place_in_the_tier(tiered, tmp_path):
    _, log, result = tiered
    tier = _tier(tmp_path)
    identifier = table_identifier(log.topic, log.topic_id)
    users = load_catalog("tierlog", **_catalog_props(tmp_path)).load_table(identifier)
    key = table_key(log.topic, log.topic_id)
    assert users.location() == table_location(tier, key)
    assert users.metadata_location.startswith(tier.path(key, "metadata") + "/")
    assert users.properties["commit.retry.num-retries"] == "0"
    end = log.highest_offset_in_remote + 1
    assert result.table_covered == end
    assert _offsets(users) == list(range(end))
    # the tier's own catalog has no table: no v<N>.metadata.json
    assert not TierCatalog(tier).table_exists(identifier)
    assert not list((tmp_path / "tier" / key / "metadata").glob("v*.metadata.json"))
    pointer = read_pointer(tier, log.topic, log.topic_id)
    assert pointer is not None
    assert pointer.metadata_location == users.metadata_location
    assert pointer.identifier == identifier and pointer.catalog_impl == "SqlCatalog"


def test_a_bucket_only_reader_reads_the_table_through_the_pointer(tiered, tmp_path):
    _, log, _ = tiered
    tier = _tier(tmp_path)
    table = load_topic_table(tier, log.topic, log.topic_id)
    assert table is not None
    users = load_catalog("tierlog", **_catalog_props(tmp_path)).load_table(
        table_identifier(log.topic, log.topic_id))
    assert table.current_snapshot().snapshot_id == users.current_snapshot().snapshot_id
    read = TableRead.open(tier, log.topic, log.topic_id, batch_rows=1000)
    assert read.plan is not None and read.plan.snapshot_id == users.current_snapshot().snapshot_id
    reader = RemoteTopicReader((tmp_path / "tier").as_uri())
    got = reader.read_table("orders")
    segments = reader.read_table("orders", use_table=False)
    assert got.num_rows == log.highest_offset_in_remote + 1
    assert got.equals(segments)


def test_a_stale_pointer_still_reads_every_row(tiered, tmp_path):
    mgr, log, _ = tiered
    tier = _tier(tmp_path)
    stale = (tmp_path / "tier" / table_key(log.topic, log.topic_id) / POINTER).read_bytes()
    for i in range(30, 45):
        log.append_records(_records(i))
    again = mgr.tier_now()["orders-0"]
    assert again.copied and again.table_errors == []
    fresh = read_pointer(tier, log.topic, log.topic_id)
    assert fresh is not None and json.loads(stale)["metadataLocation"] != \
        fresh.metadata_location
    (tmp_path / "tier" / table_key(log.topic, log.topic_id) / POINTER).write_bytes(stale)
    read = TableRead.open(tier, log.topic, log.topic_id, batch_rows=1000)
    assert read.plan is not None
    assert read.plan.split(0, 0, log.highest_offset_in_remote + 1).tail  # the tail reads more
    reader = RemoteTopicReader((tmp_path / "tier").as_uri())
    got = reader.read_table("orders")
    assert got.num_rows == log.highest_offset_in_remote + 1
    assert got.equals(reader.read_table("orders", use_table=False))


def test_bucket_only_writers_refuse_a_user_catalogs_table(tiered, tmp_path):
    _, log, _ = tiered
    tier = _tier(tmp_path)
    with pytest.raises(TableCatalogRequiredError, match="'tierlog' \\(SqlCatalog\\)"):
        writer_catalog(tier, log.topic, log.topic_id)
    # given the topic's properties, the writer opens the user's catalog and its table
    catalog = writer_catalog(tier, log.topic, log.topic_id, _catalog_props(tmp_path))
    assert not isinstance(catalog, TierCatalog)
    assert _offsets(open_topic_table(tier, catalog, log.topic, log.topic_id)) == \
        list(range(log.highest_offset_in_remote + 1))


def test_a_user_catalog_table_with_pyicebergs_retry_on_is_refused(tmp_path):
    tier = _tier(tmp_path)
    catalog = open_catalog(tier, _catalog_props(tmp_path))
    identifier = table_identifier("orders", "AAAAAAAAAAAAAAAAAAAAAA")
    table = open_topic_table(tier, catalog, "orders", "AAAAAAAAAAAAAAAAAAAAAA")
    assert table.properties["commit.retry.num-retries"] == "0"
    with table.transaction() as tx:
        tx.set_properties({"commit.retry.num-retries": "4"})
    assert catalog.load_table(identifier).properties["commit.retry.num-retries"] == "4"
    with pytest.raises(ConfigError, match=r"commit\.retry\.num-retries"):
        open_topic_table(tier, catalog, "orders", "AAAAAAAAAAAAAAAAAAAAAA")


def test_a_catalog_that_cannot_be_opened_names_its_keys_not_values(tmp_path):
    with pytest.raises(ConfigError, match=r"remote\.log\.table\.catalog") as e:
        open_catalog(_tier(tmp_path), {"type": "no-such-kind", "token": "s3cret"})
    assert "s3cret" not in str(e.value) and "token" in str(e.value)


def test_a_pointer_naming_metadata_elsewhere_is_refused(tmp_path):
    tier = _tier(tmp_path)
    where = tmp_path / "tier" / table_key("orders", "AAAAAAAAAAAAAAAAAAAAAA")
    where.mkdir(parents=True)
    (where / POINTER).write_text(json.dumps({
        "catalog": "x", "identifier": ["tierlog", "t"],
        "metadataLocation": f"{tmp_path}/elsewhere/metadata/v1.metadata.json"}))
    with pytest.raises(CorruptRemoteMetadataError, match="outside the table"):
        load_topic_table(tier, "orders", "AAAAAAAAAAAAAAAAAAAAAA")


def test_scrub_checks_a_user_catalogs_table_and_refuses_to_repair_it(tiered, tmp_path):
    _, log, _ = tiered
    tier = _tier(tmp_path)
    kinds = {FindingKind.TABLE_MISSING_FILE, FindingKind.TABLE_DAMAGED_FILE,
             FindingKind.TABLE_STRAY_FILE, FindingKind.TABLE_TILING}
    report = scrub_tier(tier, topic="orders", grace_ms=10**12)
    assert report.tables == 1
    assert [f for f in report.findings if f.kind in kinds] == []
    table = load_topic_table(tier, log.topic, log.topic_id)
    assert table is not None
    gone = current_files(table, 0)[-1].data_file.file_path
    Path(gone).unlink()
    [finding] = [f for f in scrub_tier(tier, topic="orders", grace_ms=10**12).findings
                 if f.kind in kinds]
    assert finding.kind is FindingKind.TABLE_DAMAGED_FILE
    repaired = scrub_tier(tier, topic="orders", grace_ms=10**12, repair=True)
    assert repaired.repairs == []
    assert any("'tierlog' (SqlCatalog)" in note and "not repaired" in note
               for note in repaired.notes)
    assert not Path(gone).exists()  # nothing was written behind the catalog's back


def test_deleting_the_topic_drops_the_table_from_the_users_catalog(tiered, tmp_path):
    mgr, log, _ = tiered
    identifier = table_identifier(log.topic, log.topic_id)
    users = load_catalog("tierlog", **_catalog_props(tmp_path))
    assert users.table_exists(identifier)
    mgr.delete_topic("orders")
    assert not users.table_exists(identifier)
    assert not (tmp_path / "tier" / table_key(log.topic, log.topic_id)).exists()


def _restore(tmp_path: Path, data: str, clock, cut: int, config: dict[str, object]) -> int:
    """Restore ``orders`` to ``cut`` into a new data dir (the disks lost), taking it over."""
    mgr = LogManager.open(tmp_path / data, _broker_config(tmp_path), time_ms=clock,
                          start_scheduler=False)
    try:
        (log,) = mgr.restore_topic("orders", to_offset=cut, config=config, execute=True,
                                   force_takeover=True)
        return log.log_end_offset
    finally:
        mgr.close()


def test_a_restore_cuts_the_table_through_the_users_catalog(tiered, tmp_path, clock):
    mgr, log, _ = tiered
    identifier = table_identifier(log.topic, log.topic_id)
    cut = (log.highest_offset_in_remote + 1) // 20 * 10  # a batch boundary, mid-tier
    mgr.close()
    # a restore that is not told the topic's catalog refuses before the tier is cut
    with pytest.raises(TableCatalogRequiredError, match="SqlCatalog"):
        _restore(tmp_path, "restored", clock, cut, {"remote.storage.enable": True})
    users = load_catalog("tierlog", **_catalog_props(tmp_path))
    assert _offsets(users.load_table(identifier)) == list(range(log.highest_offset_in_remote + 1))
    assert _restore(tmp_path, "again", clock, cut, _topic_config(tmp_path)) == cut
    table = users.load_table(identifier)
    assert _offsets(table) == list(range(cut))
    pointer = read_pointer(_tier(tmp_path), log.topic, log.topic_id)
    assert pointer is not None and pointer.metadata_location == table.metadata_location
