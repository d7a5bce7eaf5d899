"""tierlog.remote.table.convert (with .schema and .naming): a chain link of the tier becomes one
Parquet data file of its topic's table. A differential against tierlog.reader for every link
below the tier's last stable offset of support.tier_builder's tier (every codec, headers,
LogAppendTime, committed and aborted transactions spanning segments): the rows are the reader's
read_uncommitted rows, and those not aborted its read_committed rows. A link of only a
transaction marker gives a file of no rows; rows below the log start offset are left out; the
DataFile (from the writer's footer) says what the file holds; the files, committed, are a table
pyiceberg reads; damage and a misplaced table publish nothing.
"""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from pyiceberg.conversions import from_bytes
from pyiceberg.table import StaticTable, Table
from pyiceberg.types import LongType, TimestamptzType
from support.s3 import S3_ACCESS_KEY, S3_REGION, S3_SECRET
from support.tier_builder import (
    BuiltTier,
    PartitionWriter,
    StepClock,
    build_tier,
    copy_closed_segments,
)

from tierlog import Log, Record
from tierlog.errors import ConfigError, CorruptRecordError, CorruptRemoteMetadataError
from tierlog.plugins.local import create_remote_storage
from tierlog.reader import SCHEMA, ReadSplit, RemoteTopicReader
from tierlog.remote import RemoteLogMetadataManager, TopicIdPartition
from tierlog.remote.read.readable import ChainLink, segment_chain
from tierlog.remote.read.transactions import aborted_txns, last_stable_offset
from tierlog.remote.table.catalog import TierCatalog
from tierlog.remote.table.commit import ReadyFile, TableCommitter
from tierlog.remote.table.convert import TableFile, convert_link
from tierlog.remote.table.naming import DataFileName
from tierlog.remote.table.schema import (
    ABORTED,
    ARROW_SCHEMA,
    FIELD_IDS,
    ICEBERG_SCHEMA,
    OFFSET,
    TIMESTAMP,
    open_or_create_table,
    table_identifier,
)
from tierlog.remote.tier.layout import SEGMENT_SUFFIX, segment_object_key, table_key
from tierlog.remote.tier.object_store import RemoteTier

Converted = dict[tuple[str, int], list[TableFile]]


def _convert_chain(tier: RemoteTier, table: Table, tip: TopicIdPartition,
                   log_start_offset: int = 0) -> list[TableFile]:
    """Every link of the partition's chain below the tier's last stable offset, converted."""
    chain = segment_chain(tier, tip)
    stable = last_stable_offset(tier, tip, chain)
    return [convert_link(tier, table, tip, link, log_start_offset=log_start_offset,
                         aborted_txns=aborted_txns(tier, chain, link.first_offset,
                                                   link.last_offset + 1))
            for link in chain if link.last_offset < stable]


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> BuiltTier:
    """support.tier_builder's tier on the ``local`` plugin, built once for the module."""
    root = tmp_path_factory.mktemp("table_convert")
    url = (root / "tier").as_uri()
    return build_tier(root, create_remote_storage(url, {"fsync": False}), url)


@pytest.fixture(scope="module")
def catalog(built: BuiltTier) -> TierCatalog:
    return TierCatalog(built.rsm.tier)


@pytest.fixture(scope="module")
def converted(built: BuiltTier, catalog: TierCatalog) -> Converted:
    """The data files of every partition of the module's tier (converted once)."""
    return {key: _convert_chain(built.rsm.tier,
                                open_or_create_table(catalog, key[0], tp.tip.topic_id), tp.tip)
            for key, tp in sorted(built.partitions.items())}


def _rows(files: list[TableFile]) -> pa.Table:
    return pa.concat_tables(pq.read_table(f.path) for f in files)


def _as_reader(rows: pa.Table) -> pa.Table:
    return rows.drop_columns([ABORTED]).cast(SCHEMA)


def test_rows_are_the_readers_at_both_isolation_levels(built: BuiltTier,
                                                       converted: Converted) -> None:
    reader = RemoteTopicReader(built.url)
    aborted_rows = 0
    for (topic, partition), files in converted.items():
        rows = _rows(files)
        end = files[-1].last_offset + 1
        uncommitted = reader.read_table(topic, [partition], ending_offsets={partition: end})
        committed = reader.read_table(topic, [partition], ending_offsets={partition: end},
                                      isolation_level="read_committed")
        assert rows.num_rows == uncommitted.num_rows > 0, (topic, partition)
        assert _as_reader(rows).equals(uncommitted), (topic, partition)
        kept = rows.filter(pc.invert(rows[ABORTED]))
        assert _as_reader(kept).equals(committed), (topic, partition)
        aborted_rows += rows.num_rows - kept.num_rows
    assert aborted_rows > 0  # aborted transactions are in the tier, spanning segments
    # orders-1 ends with a transaction whose marker is not in the tier: the table stops there
    orders1 = built.partitions[("orders", 1)]
    assert converted[("orders", 1)][-1].last_offset < orders1.tier_end - 1


def test_every_link_has_one_file_named_for_it(built: BuiltTier, converted: Converted) -> None:
    for (topic, partition), files in converted.items():
        tip = built.partitions[(topic, partition)].tip
        links = segment_chain(built.rsm.tier, tip)[:len(files)]
        for link, f in zip(links, files, strict=True):
            name = DataFileName.parse(f.path)
            assert (name.partition, name.first_offset, name.last_offset, name.segment_id) == (
                partition, link.first_offset, link.last_offset, link.segment.segment_id)
            assert (f.partition, f.first_offset, f.last_offset, f.segment_id) == (
                partition, link.first_offset, link.last_offset, link.segment.segment_id)
            assert f.path == f"{built.rsm.tier.root}/{table_key(topic, tip.topic_id)}/{name.key}"


def test_headers_and_log_append_time_survive_parquet(converted: Converted) -> None:
    orders = _rows(converted[("orders", 0)]).to_pylist()
    with_headers = next(r for r in orders if r["headers"])
    assert with_headers["headers"] == [{"key": "trace", "value": with_headers["headers"][0]
                                        ["value"]}, {"key": "empty", "value": b""},
                                       {"key": "null", "value": None}]
    assert any(r["headers"] is None for r in orders)
    assert any(r["key"] is None for r in orders) and any(r["value"] is None for r in orders)
    assert {r["timestampType"] for r in orders} == {0}
    clicks = _rows(converted[("clicks", 0)])
    assert set(clicks["timestampType"].to_pylist()) == {1}  # LogAppendTime: the batch's time
    assert clicks["timestamp"][0].as_py().year == 2023


def test_the_files_schema_and_metadata(converted: Converted) -> None:
    f = converted[("orders", 0)][1]
    parquet = pq.ParquetFile(f.path)
    assert parquet.schema_arrow.remove_metadata().equals(ARROW_SCHEMA.remove_metadata())
    ids = {field.name: int(field.metadata[b"PARQUET:field_id"])
           for field in parquet.schema_arrow}
    assert ids == FIELD_IDS
    kv = parquet.metadata.metadata
    assert kv[b"tierlog.version"] == b"1"
    assert kv[b"tierlog.segmentId"] == f.segment_id.encode()
    assert (int(kv[b"tierlog.firstOffset"]), int(kv[b"tierlog.lastOffset"])) == (
        f.first_offset, f.last_offset)
    assert int(kv[b"tierlog.records"]) == f.records == parquet.metadata.num_rows
    assert b"ARROW:schema" not in kv  # store_schema=False: readers see plain binary
    column = parquet.metadata.row_group(0).column(0)
    assert column.compression == "ZSTD"
    assert column.has_offset_index


def test_the_data_file_is_built_from_the_footer(converted: Converted) -> None:
    for files in converted.values():
        for f in files:
            rows = pq.read_table(f.path)
            df = f.data_file
            assert df.file_path == f.path
            assert df.record_count == f.records == rows.num_rows
            assert df.file_size_in_bytes == Path(f.path).stat().st_size
            assert df.partition[0] == f.partition
            if not f.records:
                continue
            offsets = rows[OFFSET]
            assert from_bytes(LongType(), df.lower_bounds[FIELD_IDS[OFFSET]]) == \
                pc.min(offsets).as_py()
            assert from_bytes(LongType(), df.upper_bounds[FIELD_IDS[OFFSET]]) == \
                pc.max(offsets).as_py()
            stamps = rows[TIMESTAMP].cast(pa.int64())
            assert from_bytes(TimestamptzType(), df.lower_bounds[FIELD_IDS[TIMESTAMP]]) == \
                pc.min(stamps).as_py()


def test_committed_files_are_a_table_pyiceberg_reads(built: BuiltTier, catalog: TierCatalog,
                                                     converted: Converted) -> None:
    for (topic, partition), files in converted.items():
        if topic != "orders":
            continue
        tip = built.partitions[(topic, partition)].tip
        TableCommitter(catalog, table_identifier(topic, tip.topic_id),
                       backoff=lambda _attempt: None).commit(
            [ReadyFile(f.partition, f.first_offset, f.last_offset, f.data_file)
             for f in files], starts={partition: files[0].first_offset})
    identifier = table_identifier("orders", built.partitions[("orders", 0)].tip.topic_id)
    table = catalog.load_table(identifier)
    assert table.schema() == ICEBERG_SCHEMA
    for partition in (0, 1):
        expected = _rows(converted[("orders", partition)]).cast(ARROW_SCHEMA)
        scanned = table.scan(row_filter=f"partition = {partition}").to_arrow()
        scanned = scanned.sort_by(OFFSET).cast(ARROW_SCHEMA)
        assert scanned.drop_columns(["headers"]).equals(expected.drop_columns(["headers"]))
        # pyiceberg 0.12 reads a null list of structs as [] (apache/iceberg-python#3833); the
        # file holds the null (pyarrow and Spark read it), so only the empty lists may differ.
        assert scanned["headers"].to_pylist() == [
            h or [] for h in expected["headers"].to_pylist()]
        committed = table.scan(row_filter=f"partition = {partition} and aborted = false")
        assert committed.to_arrow().num_rows == pc.sum(pc.invert(expected[ABORTED])).as_py()
    by_path = StaticTable.from_metadata(table.location())
    assert by_path.scan().to_arrow().num_rows == sum(
        f.records for p in (0, 1) for f in converted[("orders", p)])


def test_rows_below_the_log_start_offset_are_left_out(built: BuiltTier,
                                                      catalog: TierCatalog) -> None:
    tip = built.partitions[("orders", 0)].tip
    table = open_or_create_table(catalog, "orders", tip.topic_id)
    chain = segment_chain(built.rsm.tier, tip)
    link = chain[2]
    cut = link.first_offset + 5
    f = convert_link(built.rsm.tier, table, tip, link, log_start_offset=cut,
                     aborted_txns=aborted_txns(built.rsm.tier, chain, cut, link.last_offset + 1))
    rows = pq.read_table(f.path)
    expected = RemoteTopicReader(built.url).read_table(
        "orders", [0], starting_offsets={0: cut}, ending_offsets={0: link.last_offset + 1})
    assert _as_reader(rows).equals(expected)
    assert 0 < f.records == rows.num_rows and pc.min(rows[OFFSET]).as_py() >= cut
    # The file still covers the link: the chain continues from its first offset.
    assert (f.first_offset, f.last_offset) == (link.first_offset, link.last_offset)
    past = convert_link(built.rsm.tier, table, tip, link, log_start_offset=link.last_offset + 1,
                        aborted_txns=())
    assert past.records == 0 == pq.read_table(past.path).num_rows


TOPIC_ID = "Zx0bLW4yT9i7Qm1nX2pV3w"


def _marker_tier(tmp_path: Path) -> tuple[RemoteTier, TopicIdPartition, list[ChainLink]]:
    """``events-0``: an aborted transaction's batch, its ABORT marker alone in the next
    segment, then a plain record; every segment tiered."""
    url = (tmp_path / "tier").as_uri()
    rsm = create_remote_storage(url, {"fsync": False})
    log = Log.open(tmp_path / "logs" / "events-0", {}, time_ms=StepClock(), topic_id=TOPIC_ID)
    writer = PartitionWriter(log)
    stamps = itertools.count(1_700_000_000_000)
    writer.append_txn(7, [Record(key=b"k", value=b"v" * 10, timestamp=next(stamps))
                          for _ in range(3)], "lz4")
    log.roll()
    writer.end_txn(7, commit=False)
    log.roll()
    writer.append([Record(key=None, value=b"after", timestamp=next(stamps))])
    log.roll()
    tip = TopicIdPartition(TOPIC_ID, "events", 0)
    copy_closed_segments(log, tip, rsm, RemoteLogMetadataManager(rsm.tier))
    log.close()
    return rsm.tier, tip, segment_chain(rsm.tier, tip)


def test_a_link_of_only_a_marker_gets_a_file_of_no_rows(tmp_path: Path) -> None:
    tier, tip, chain = _marker_tier(tmp_path)
    assert [(link.first_offset, link.last_offset) for link in chain] == [(0, 2), (3, 3), (4, 4)]
    table = open_or_create_table(TierCatalog(tier), "events", TOPIC_ID)
    files = _convert_chain(tier, table, tip)
    assert [f.records for f in files] == [3, 0, 1]
    empty = files[1]
    assert pq.read_table(empty.path).schema.remove_metadata().equals(
        ARROW_SCHEMA.remove_metadata())
    assert empty.data_file.record_count == 0 and empty.data_file.partition[0] == 0
    assert [r[ABORTED] for f in files for r in pq.read_table(f.path).to_pylist()] == [
        True, True, True, False]
    TableCommitter(TierCatalog(tier), table_identifier("events", TOPIC_ID),
                   backoff=lambda _attempt: None).commit(
        [ReadyFile(f.partition, f.first_offset, f.last_offset, f.data_file) for f in files],
        starts={0: 0})
    scanned = TierCatalog(tier).load_table(table_identifier("events", TOPIC_ID)).scan()
    assert scanned.to_arrow().sort_by(OFFSET)[OFFSET].to_pylist() == [0, 1, 2, 4]


def _data_files(tier: RemoteTier) -> list[str]:
    return [name for name in tier.fs.find(tier.path("_tables")) if name.endswith(".parquet")]


def test_a_damaged_segment_publishes_nothing(tmp_path: Path) -> None:
    tier, tip, chain = _marker_tier(tmp_path)
    table = open_or_create_table(TierCatalog(tier), "events", TOPIC_ID)
    path = tier.path(segment_object_key(chain[0].segment, SEGMENT_SUFFIX))
    data = bytearray(tier.get_bytes(path))
    data[-3] ^= 0xFF  # inside the batch's records: its CRC fails
    tier.fs.pipe_file(path, bytes(data))
    with pytest.raises(CorruptRecordError, match="CRC"):
        convert_link(tier, table, tip, chain[0], aborted_txns=())
    assert _data_files(tier) == []


def test_a_table_not_at_the_topics_place_is_refused(tmp_path: Path) -> None:
    tier, tip, chain = _marker_tier(tmp_path)
    other = open_or_create_table(TierCatalog(tier), "events", "AAAAAAAAAAAAAAAAAAAAAA")
    with pytest.raises(ConfigError, match="events-AAAAAAAAAAAAAAAAAAAAAA"):
        convert_link(tier, other, tip, chain[0], aborted_txns=())
    assert _data_files(tier) == []


def test_open_or_create_table_creates_once(tmp_path: Path) -> None:
    tier, _tip, _chain = _marker_tier(tmp_path)
    first = open_or_create_table(TierCatalog(tier), "events", TOPIC_ID)
    again = open_or_create_table(TierCatalog(tier), "events", TOPIC_ID)
    assert again.metadata.table_uuid == first.metadata.table_uuid
    assert first.name() == table_identifier("events", TOPIC_ID) == (
        "tierlog", f"events-{TOPIC_ID}")
    assert first.properties["commit.retry.num-retries"] == "0"
    assert [f.name for f in first.spec().fields] == ["partition"]
    assert first.location() == tier.path(table_key("events", TOPIC_ID))


@pytest.mark.parametrize(("path", "fields"), [
    ("data/p3/00000000000000000010-00000000000000000019-ab-c_d-0123abcd.parquet",
     (3, 10, 19, "ab-c_d", "0123abcd")),
    ("s3://b/t/_tables/x-y/data/p0/00000000000000000000-00000000000000000000-s-ffffffff.parquet",
     (0, 0, 0, "s", "ffffffff")),
    ("data/p2/00000000000000000000-00000000000000000299.r3-0bde4395.parquet",
     (2, 0, 299, None, "0bde4395", 3)),
    # A segment id may look like a run's mark: it is still a link's file.
    ("data/p0/00000000000000000000-00000000000000000009-r3-0123abcd.parquet",
     (0, 0, 9, "r3", "0123abcd")),
])
def test_data_file_names_round_trip(path: str, fields: tuple[Any, ...]) -> None:
    name = DataFileName.parse(path)
    assert (name.partition, name.first_offset, name.last_offset, name.segment_id,
            name.attempt, name.links)[:len(fields)] == fields
    assert name.is_run == (name.segment_id is None)
    assert path.endswith(name.key)
    fresh = DataFileName.new(3, 10, 19, "ab-c_d")
    assert DataFileName.parse(fresh.key) == fresh and fresh.attempt != DataFileName.new(
        3, 10, 19, "ab-c_d").attempt
    run = DataFileName.new_run(3, 10, 99, 4)
    assert DataFileName.parse(run.key) == run and run.is_run and run.links == 4


@pytest.mark.parametrize("path", [
    "data/partition=0/00000000000000000000-00000000000000000009-s-0123abcd.parquet",
    "data/p0/0-9-s-0123abcd.parquet",
    "data/p0/00000000000000000009-00000000000000000000-s-0123abcd.parquet",
    "data/p0/00000000000000000000-00000000000000000009-s-0123ABCD.parquet",
    "data/p0/00000000000000000000-00000000000000000009-s-0123abcd.avro",
    "data/p0/00000000000000000000-00000000000000000009.r0-0123abcd.parquet",
    "data/p0/00000000000000000000-00000000000000000009.r1001-0123abcd.parquet",
    "data/p0/00000000000000000000-00000000000000000009.r2.parquet",
])
def test_other_names_are_not_data_files(path: str) -> None:
    with pytest.raises(CorruptRemoteMetadataError,
                       match=r"not a table data file|not an offset|a run holds"):
        DataFileName.parse(path)


def test_marking_aborted_rows_needs_read_uncommitted() -> None:
    with pytest.raises(ValueError, match=r"mark_aborted .* read_uncommitted"):
        ReadSplit(url="file:///t", storage_options={}, topic="t", partition=0, log_path="x",
                  byte_start=0, byte_end=1, start_offset=0, end_offset=1,
                  isolation_level="read_committed", mark_aborted=True)


def test_converts_and_commits_on_s3(s3_tier: BuiltTier, s3_endpoint: str) -> None:
    tier = s3_tier.rsm.tier
    catalog = TierCatalog(tier)
    tip = s3_tier.partitions[("orders", 0)].tip
    files = _convert_chain(tier, open_or_create_table(catalog, "orders", tip.topic_id), tip)
    assert all(f.path.startswith(f"s3://{tier.root}/_tables/") for f in files)
    identifier = table_identifier("orders", tip.topic_id)
    TableCommitter(catalog, identifier, backoff=lambda _attempt: None).commit(
        [ReadyFile(f.partition, f.first_offset, f.last_offset, f.data_file) for f in files],
        starts={0: files[0].first_offset})
    rows = catalog.load_table(identifier).scan().to_arrow().sort_by(OFFSET)
    options = {"endpoint_url": s3_endpoint, "key": S3_ACCESS_KEY, "secret": S3_SECRET,
               "client_kwargs": {"region_name": S3_REGION}}
    end = {0: files[-1].last_offset + 1}
    reader = RemoteTopicReader(s3_tier.url, options)
    expected = reader.read_table("orders", [0], ending_offsets=end)
    committed = reader.read_table("orders", [0], ending_offsets=end,
                                  isolation_level="read_committed")
    assert rows[OFFSET].to_pylist() == expected["offset"].to_pylist()
    assert rows["value"].to_pylist() == expected["value"].to_pylist()
    kept = rows.filter(pc.invert(rows[ABORTED]))
    assert kept[OFFSET].to_pylist() == committed["offset"].to_pylist()
