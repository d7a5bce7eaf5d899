"""tierlog.reader over a tier built from real Logs on the ``local`` plugin: every field of
every record, every codec, read_committed from the tier alone, offset/timestamp pushdown
through the remote indexes (fewer bytes fetched), splits, and failures named clearly."""

from __future__ import annotations

import pickle
from pathlib import Path

import pyarrow as pa
import pytest
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import _parse_datatype_json_string
from support.tier_builder import (
    CODECS,
    ISOLATIONS,
    BuiltTier,
    StepClock,
    build_tier,
    copy_closed_segments,
    records_of,
)

from tierlog.errors import CorruptRecordError, OffsetOutOfRangeError, RemoteStorageError
from tierlog.plugins.local import create_remote_storage
from tierlog.reader import SCHEMA, ReadSplit, RemoteTopicReader, read_split
from tierlog.records import iter_batches
from tierlog.remote import (
    LogSegmentData,
    RemoteLogMetadataManager,
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemoteLogSegmentState,
    TopicIdPartition,
)


@pytest.fixture
def reader(tier: BuiltTier) -> RemoteTopicReader:
    return RemoteTopicReader(tier.url)


def _offsets(rows: list[tuple[int, object]]) -> list[tuple[int, int]]:
    return [(p, r.offset) for p, r in rows]  # type: ignore[attr-defined]


def test_lists_what_the_tier_holds(tier: BuiltTier, reader: RemoteTopicReader) -> None:
    assert reader.list_topics() == ["clicks", "orders"]
    assert reader.list_partitions("orders") == [0, 1]
    assert reader.list_partitions("nope") == []
    built = tier.partitions[("orders", 1)].segments
    listed = reader.list_segments("orders", 1)
    assert [(s.segment_id, s.start_offset, s.end_offset) for s in listed] == \
        [(s.segment_id, s.start_offset, s.end_offset) for s in built]
    assert all(s.max_timestamp_ms > 0 and s.segment_size_in_bytes > 0 for s in listed)


def test_every_codec_is_in_the_tier(tier: BuiltTier) -> None:
    log = tier.partitions[("orders", 0)].writer.log
    codecs = {b.compression for s in log.segments.values()
              for b in iter_batches(s.log.path.read_bytes())}
    assert codecs == set(range(len(CODECS)))


@pytest.mark.parametrize("isolation", ISOLATIONS)
@pytest.mark.parametrize("topic", ["orders", "clicks"])
def test_read_returns_exactly_the_appended_records(
    tier: BuiltTier, reader: RemoteTopicReader, topic: str, isolation: str
) -> None:
    table = reader.read_table(topic, isolation_level=isolation)
    assert table.schema == SCHEMA
    assert records_of(table) == tier.expected(topic, isolation)
    assert set(table.column("topic").to_pylist()) == {topic}
    assert set(table.column("timestampType").to_pylist()) == {tier.timestamp_types[topic]}


def test_schema_is_sparks_kafka_schema_exactly() -> None:
    ddl = ('{"type":"struct","fields":['
           '{"name":"key","type":"binary","nullable":true,"metadata":{}},'
           '{"name":"value","type":"binary","nullable":true,"metadata":{}},'
           '{"name":"topic","type":"string","nullable":true,"metadata":{}},'
           '{"name":"partition","type":"integer","nullable":true,"metadata":{}},'
           '{"name":"offset","type":"long","nullable":true,"metadata":{}},'
           '{"name":"timestamp","type":"timestamp","nullable":true,"metadata":{}},'
           '{"name":"timestampType","type":"integer","nullable":true,"metadata":{}},'
           '{"name":"headers","type":{"type":"array","elementType":{"type":"struct","fields":['
           '{"name":"key","type":"string","nullable":true,"metadata":{}},'
           '{"name":"value","type":"binary","nullable":true,"metadata":{}}]},'
           '"containsNull":true},"nullable":true,"metadata":{}}]}')
    spark_schema = to_arrow_schema(_parse_datatype_json_string(ddl), timezone="UTC")
    assert SCHEMA.equals(spark_schema)
    assert SCHEMA.field("headers").type.value_field.name == \
        spark_schema.field("headers").type.value_field.name
    assert SCHEMA.field("key").type == pa.binary()  # not large_binary


def test_nulls_and_headers_survive(tier: BuiltTier, reader: RemoteTopicReader) -> None:
    rows = reader.read_table("orders", [0]).to_pylist()
    assert any(r["key"] is None for r in rows)
    assert any(r["value"] is None for r in rows)
    assert any(r["value"] == b"" for r in rows)
    with_headers = [r["headers"] for r in rows if r["headers"]]
    assert {"key": "null", "value": None} in with_headers[0]
    assert any(r["headers"] is None for r in rows)  # no headers: null, as Spark's source


def test_read_committed_drops_aborted_open_and_control_records(
    tier: BuiltTier, reader: RemoteTopicReader
) -> None:
    committed = reader.read_table("orders", isolation_level="read_committed").to_pylist()
    uncommitted = reader.read_table("orders").to_pylist()
    keys = {r["key"] for r in committed}
    assert b"long-abort" not in keys  # its ABORT marker is three segments later
    assert not any(k and k.startswith(b"tx-2000") for k in keys)
    assert any(k and k.startswith(b"tx-1000") for k in keys)
    assert {b"open", b"after-open", b"long-abort"} <= {r["key"] for r in uncommitted}
    tp = tier.partitions[("orders", 1)]
    open_txn = next(t for t in tp.writer.txns if t.producer_id == 3001)
    assert reader.offset_range("orders", 1, isolation_level="read_committed") == \
        (0, open_txn.first_offset)
    assert reader.offset_range("orders", 1) == (0, tp.tier_end)
    markers = {t.marker_offset for t in tp.writer.txns}
    assert not markers & {r["offset"] for r in uncommitted if r["partition"] == 1}


def _log_bytes(splits: list[ReadSplit]) -> int:
    return sum(s.size_in_bytes for s in splits)


@pytest.mark.parametrize("isolation", ISOLATIONS)
def test_offset_bounds_start_inside_a_segment_and_read_fewer_bytes(
    tier: BuiltTier, reader: RemoteTopicReader, isolation: str
) -> None:
    segments = tier.partitions[("orders", 0)].segments
    start = segments[2].end_offset - 1  # the offset index has an entry before it
    end = segments[4].start_offset + 1
    full = reader.plan("orders", [0], isolation_level=isolation)
    bounded = reader.plan("orders", [0], starting_offsets={0: start}, ending_offsets={0: end},
                          isolation_level=isolation)
    assert len(bounded) == 3 and bounded[0].byte_start > 0
    assert bounded[-1].byte_end < segments[4].segment_size_in_bytes
    assert _log_bytes(bounded) < _log_bytes(full) // 2
    reader.stats.reset()
    rows = records_of(reader.read_table("orders", [0], starting_offsets={0: start},
                                        ending_offsets={0: end}, isolation_level=isolation))
    assert rows == [(p, r) for p, r in tier.expected("orders", isolation, [0])
                    if start <= r.offset < end]
    bounded_bytes = reader.stats.bytes
    reader.stats.reset()
    reader.read_table("orders", [0], isolation_level=isolation)
    assert bounded_bytes < reader.stats.bytes // 2


def test_row_filters_prune_and_filter(tier: BuiltTier, reader: RemoteTopicReader) -> None:
    expected = tier.expected("orders", "read_uncommitted")
    ts = sorted(r.timestamp for _, r in expected)[len(expected) * 2 // 3]
    got = records_of(reader.read_table("orders", min_offset=50, max_offset=200,
                                       min_timestamp=ts))
    assert got == [(p, r) for p, r in expected
                   if 50 <= r.offset <= 200 and r.timestamp >= ts]
    assert _log_bytes(reader.plan("orders", min_timestamp=ts)) < \
        _log_bytes(reader.plan("orders")) // 2


@pytest.mark.parametrize("split_bytes", [1 << 20, 500])
@pytest.mark.parametrize("isolation", ISOLATIONS)
def test_timestamps_resolve_like_offsets_for_times(
    tier: BuiltTier, isolation: str, split_bytes: int
) -> None:
    reader = RemoteTopicReader(tier.url, split_bytes=split_bytes)
    log = tier.partitions[("orders", 0)].writer.log
    expected = [r for _, r in tier.expected("orders", isolation, [0])]
    stamps = sorted({r.timestamp for r in expected})
    for start_ts, end_ts in ((stamps[40], stamps[180]), (stamps[0] - 5, stamps[100] + 1),
                             (stamps[150] + 1, None), (stamps[120], stamps[121]),
                             (stamps[90], stamps[20])):
        first = log.offset_for_timestamp(start_ts)
        stop = log.offset_for_timestamp(end_ts) if end_ts is not None else None
        assert first is not None
        got = [r for _, r in records_of(reader.read_table(
            "orders", [0], starting_timestamp=start_ts, ending_timestamp=end_ts,
            isolation_level=isolation))]
        assert got == [r for r in expected if r.offset >= first
                       and (stop is None or r.offset < stop)], (start_ts, end_ts)
    assert reader.read_table("orders", [0], starting_timestamp=stamps[-1] + 1).num_rows == 0
    plan = reader.plan("orders", [0], starting_timestamp=stamps[200])
    assert plan[0].seek_timestamp == stamps[200]
    assert all(s.seek_timestamp is None for s in plan[1:])
    assert _log_bytes(plan) < _log_bytes(reader.plan("orders", [0])) // 3


@pytest.mark.parametrize("isolation", ISOLATIONS)
def test_large_segments_split_into_batch_aligned_picklable_splits(
    tier: BuiltTier, isolation: str
) -> None:
    small = RemoteTopicReader(tier.url, split_bytes=600)
    splits = small.plan("orders", isolation_level=isolation)
    assert len(splits) > 2 * sum(len(tp.segments) for (t, _), tp in tier.partitions.items()
                                 if t == "orders")
    rows = []
    for split in splits:
        copy = pickle.loads(pickle.dumps(split))
        assert copy == split
        rows += [b for b in read_split(copy)]
    assert records_of(pa.Table.from_batches(rows, schema=SCHEMA)) == \
        tier.expected("orders", isolation)


def test_small_batch_rows(tier: BuiltTier, reader: RemoteTopicReader) -> None:
    batches = list(reader.read("clicks", batch_rows=7))
    assert len(batches) > 5 and all(b.num_rows <= 10 for b in batches)


def test_reupload_of_overlapping_segments_is_read_once(tmp_path: Path) -> None:
    url = (tmp_path / "tier").as_uri()
    rsm = create_remote_storage(url, {"fsync": False})
    built = build_tier(tmp_path, rsm, url, rounds=2, open_txn_at_end=False)
    tp = built.partitions[("orders", 0)]
    # A new leader uploads the same offsets again under new segment ids.
    copy_closed_segments(tp.writer.log, tp.tip, rsm, RemoteLogMetadataManager(rsm.tier))
    reader = RemoteTopicReader(url)
    assert len(reader.list_segments("orders", 0)) == len(tp.segments)
    assert records_of(reader.read_table("orders", [0])) == \
        built.expected("orders", "read_uncommitted", [0])


def test_offsets_out_of_range_and_bad_arguments(reader: RemoteTopicReader,
                                                tier: BuiltTier) -> None:
    with pytest.raises(ValueError, match="isolation level"):
        reader.plan("orders", isolation_level="read_dirty")
    with pytest.raises(ValueError, match="ending offset"):
        reader.plan("orders", ending_offsets="earliest")
    end = tier.partitions[("orders", 0)].tier_end
    # A start past the end fails as in Spark's Kafka source (issue 13; it read nothing before).
    with pytest.raises(OffsetOutOfRangeError, match=rf"orders-0: starting offset {end + 100} "
                                                    rf"is past the end of the read, {end}"):
        reader.read_table("orders", [0], starting_offsets=end + 100)
    assert reader.read_table("orders", [0], starting_offsets=end).num_rows == 0
    assert reader.read_table("orders", [0], starting_offsets="latest").num_rows == 0
    assert records_of(reader.read_table("orders", [0], ending_offsets={0: 5})) == \
        [(p, r) for p, r in tier.expected("orders", "read_uncommitted", [0]) if r.offset < 5]


def test_deleted_head_fails_unless_data_loss_is_allowed(tmp_path: Path) -> None:
    url = (tmp_path / "tier").as_uri()
    rsm = create_remote_storage(url, {"fsync": False})
    built = build_tier(tmp_path, rsm, url, rounds=2, open_txn_at_end=False)
    first = built.partitions[("orders", 0)].segments[0]
    rlmm = RemoteLogMetadataManager(rsm.tier)
    clock = StepClock(first.event_timestamp_ms + 1000)
    for state in (RemoteLogSegmentState.DELETE_SEGMENT_STARTED,
                  RemoteLogSegmentState.DELETE_SEGMENT_FINISHED):
        rlmm.update_remote_log_segment_metadata(RemoteLogSegmentMetadataUpdate(
            remote_log_segment_id=first.remote_log_segment_id, event_timestamp_ms=clock(),
            state=state))
    rsm.delete_log_segment_data(first)
    with pytest.raises(OffsetOutOfRangeError, match=r"starting offset 0 is below the earliest"):
        RemoteTopicReader(url).plan("orders", [0], starting_offsets={0: 0})
    lenient = RemoteTopicReader(url, fail_on_data_loss=False)
    got = records_of(lenient.read_table("orders", [0], starting_offsets={0: 0}))
    assert got == [(p, r) for p, r in built.expected("orders", "read_uncommitted", [0])
                   if r.offset > first.end_offset]


def test_read_committed_needs_the_producer_snapshot(tmp_path: Path) -> None:
    url = (tmp_path / "tier").as_uri()
    rsm = create_remote_storage(url, {"fsync": False})
    built = build_tier(tmp_path, rsm, url, rounds=1, open_txn_at_end=False)
    last = built.partitions[("clicks", 0)].segments[-1]
    snapshot = rsm.object_path(last, ".snapshot")
    rsm.fs.rm_file(snapshot)
    reader = RemoteTopicReader(url)
    assert reader.read_table("clicks").num_rows == 100  # read_uncommitted does not need it
    with pytest.raises(RemoteStorageError, match=r"producer snapshot .*\.snapshot is missing"):
        reader.read_table("clicks", isolation_level="read_committed")


def test_corrupt_segment_bytes_are_detected(tmp_path: Path) -> None:
    url = (tmp_path / "tier").as_uri()
    rsm = create_remote_storage(url, {"fsync": False})
    built = build_tier(tmp_path, rsm, url, rounds=1, open_txn_at_end=False)
    md = built.partitions[("clicks", 0)].segments[0]
    path = Path(rsm.object_path(md, ".log"))
    data = bytearray(path.read_bytes())
    data[200] ^= 0xFF
    path.write_bytes(bytes(data))
    with pytest.raises(CorruptRecordError, match="crc"):
        RemoteTopicReader(url).read_table("clicks")


def test_reads_a_segment_written_by_kafka(kafka_logdir: Path, tmp_path: Path) -> None:
    """Kafka 3.7's own ``.log``, ``.index`` and ``.timeindex`` as one remote segment."""
    part = kafka_logdir / "__consumer_offsets-6"
    stem = part / "00000000000000000000"
    data = Path(f"{stem}.log").read_bytes()
    batches = list(iter_batches(data))
    expected = [r for b in batches if not b.is_control for r in b.records()]
    url = (tmp_path / "tier").as_uri()
    rsm = create_remote_storage(url, {"fsync": False})
    rlmm = RemoteLogMetadataManager(rsm.tier)
    tip = TopicIdPartition("gSnfpEbtQfSDpxM2lhEn9A", "__consumer_offsets", 6)
    md = RemoteLogSegmentMetadata(
        remote_log_segment_id=RemoteLogSegmentId.generate(tip), start_offset=0,
        end_offset=batches[-1].last_offset, max_timestamp_ms=max(b.max_timestamp for b in batches),
        event_timestamp_ms=1, segment_size_in_bytes=len(data), segment_leader_epochs={0: 0},
        txn_idx_empty=True)
    rlmm.add_remote_log_segment_metadata(md)
    rsm.copy_log_segment_data(md, LogSegmentData(
        log_segment=Path(f"{stem}.log"), offset_index=Path(f"{stem}.index"),
        time_index=Path(f"{stem}.timeindex"), transaction_index=None,
        producer_snapshot_index=part / "00000000000000000013.snapshot",
        leader_epoch_index=b"0\n1\n0 0\n"))
    rlmm.update_remote_log_segment_metadata(RemoteLogSegmentMetadataUpdate(
        remote_log_segment_id=md.remote_log_segment_id, event_timestamp_ms=2,
        state=RemoteLogSegmentState.COPY_SEGMENT_FINISHED))
    reader = RemoteTopicReader(url)
    for isolation in ISOLATIONS:
        got = records_of(reader.read_table("__consumer_offsets", isolation_level=isolation))
        assert got == [(6, r) for r in expected]
    tail = reader.plan("__consumer_offsets", starting_offsets=5)
    assert tail[0].byte_start == batches[3].position  # Kafka's index entry (3, 4730)
    assert [r.offset for _, r in records_of(reader.read_table(
        "__consumer_offsets", starting_offsets=5))] == list(range(5, 13))
    stamp = batches[7].max_timestamp
    window = reader.read_table("__consumer_offsets", starting_timestamp=stamp - 1,
                               ending_timestamp=batches[11].max_timestamp)
    assert window.column("offset").to_pylist() == [7, 8, 9, 10]
