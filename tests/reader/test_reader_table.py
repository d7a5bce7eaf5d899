"""tierlog.reader through a topic's table (reader/_table): the offsets the table covers come from
its Parquet files, the rest from the segments, and the rows are the segments' own. A
differential over support.table_tier's tier (every codec, headers, LogAppendTime, committed and
aborted transactions spanning segments, the last link of each partition left uncovered): the
table path == ``use_table=False`` == ``Log.read``'s records, at both isolation levels, on whole
topics and for a sample of start/end pairs (support.table_differential: in each state, as built,
after a log start offset, after a restore cut, each partition starts and ends at each key mark,
link edges, coverage end, stable end, log start, cut; and random pairs of those +-1 and a stride
of 7; benchmarks/bench_table_differential.py checks every pair); with column subsets and
filters; a table that cannot be read falls back to the segments with one warning.
"""

from __future__ import annotations

import logging
import random
from pathlib import Path

import pyarrow as pa
import pytest
from support.table_differential import (
    Tally,
    boundaries,
    check_reads,
    key_marks,
    sample_reads,
    states,
)
from support.table_tier import TableTier, apply_log_start, build_table_tier, cut_table
from support.tier_builder import ISOLATIONS, records_of

from tierlog.errors import CorruptRecordError
from tierlog.plugins.local import create_remote_storage
from tierlog.reader import SCHEMA, RemoteTopicReader
from tierlog.remote.tier.layout import SEGMENT_SUFFIX, segment_object_key, table_key

TABLE_LOGGER = "tierlog.reader._table"
#: Reads of random pairs in the sampled differential, per state and isolation level (about
#: 20 ms each), beside those that start and end at each key mark.
SAMPLED_EXTRA = 8


def _build(root: Path, rounds: int = 6, uncovered: int = 1) -> TableTier:
    url = (root / "tier").as_uri()
    return build_table_tier(root, create_remote_storage(url, {"fsync": False}), url,
                            uncovered_links=uncovered, rounds=rounds)


@pytest.fixture(scope="module")
def tt(tmp_path_factory: pytest.TempPathFactory) -> TableTier:
    """The module's tier with its tables, the last link of each partition not in them."""
    return _build(tmp_path_factory.mktemp("reader_table"))


@pytest.fixture
def fresh(tmp_path: Path) -> TableTier:
    """A smaller tier of the test's own, to change."""
    return _build(tmp_path, rounds=3)


def _assert_same(tt: TableTier, topic: str, isolation: str, **options: object) -> pa.Table:
    """The table path, the segments and Log.read agree on a whole-topic read."""
    reader = RemoteTopicReader(tt.url)
    got = reader.read_table(topic, isolation_level=isolation, **options)  # type: ignore[arg-type]
    segments = reader.read_table(topic, isolation_level=isolation,  # type: ignore[arg-type]
                                 use_table=False, **options)
    assert got.equals(segments), (topic, isolation)
    return got


@pytest.mark.parametrize("isolation", ISOLATIONS)
def test_whole_topics_equal_the_segments_and_log_read(tt: TableTier, isolation: str) -> None:
    for topic in ("orders", "clicks"):
        got = _assert_same(tt, topic, isolation)
        assert records_of(got) == tt.expected(topic, isolation), topic
    # the table holds part of each partition, the tail the rest
    for p in (0, 1):
        assert 0 < tt.covered("orders", p) < tt.tier_end("orders", p)
    assert 0 < tt.covered("clicks", 0) < tt.tier_end("clicks", 0)


def test_sampled_starts_and_ends_in_every_state(fresh: TableTier) -> None:
    # support.table_differential's check over a sample; bench_table_differential runs every
    # pair of the same boundary set. Each state, both levels; each partition starts and ends
    # at each of its key marks (log start, link edges, coverage end, stable end, tier end, cut).
    rng = random.Random(23)
    total = Tally()
    seen: set[tuple[str, str]] = set()
    for state, cuts in states(fresh, "orders"):
        for isolation in ISOLATIONS:
            keys = {p: key_marks(fresh, "orders", p, isolation, cuts.get(p)) for p in (0, 1)}
            marks = {p: boundaries(fresh, "orders", p, isolation, cuts.get(p)) for p in (0, 1)}
            reads = sample_reads(marks, keys, SAMPLED_EXTRA, rng)
            for p in (0, 1):
                assert {r[p][0] for r in reads} >= keys[p] <= {r[p][1] for r in reads}
            total.add(check_reads(fresh, "orders", isolation, reads, label=state,
                                  segments_every=4))
            seen.add((state, isolation))
    assert total.mismatches == []
    assert len(seen) == 8 and total.reads >= 8 * SAMPLED_EXTRA
    assert fresh.log_starts[("orders", 0)] > 0 and cuts


def test_a_read_of_covered_offsets_reads_the_tables_files(fresh: TableTier) -> None:
    # Damage the .log object of a covered segment: the table path never reads it.
    link = fresh.files[("orders", 0)][1]
    md = next(s for s in fresh.built.partitions[("orders", 0)].segments
              if s.start_offset == link.first_offset)
    path = fresh.tier.path(segment_object_key(md, SEGMENT_SUFFIX))
    size = len(fresh.tier.get_bytes(path))
    fresh.tier.fs.pipe_file(path, b"\x00" * size)
    reader = RemoteTopicReader(fresh.url)
    options = {"starting_offsets": {0: link.first_offset},
               "ending_offsets": {0: link.last_offset + 1}}
    for isolation in ISOLATIONS:
        got = reader.read_table("orders", [0], isolation_level=isolation, **options)
        want = [(p, r) for p, r in fresh.expected("orders", isolation, [0])
                if link.first_offset <= r.offset <= link.last_offset]
        assert records_of(got) == want and want
        with pytest.raises(CorruptRecordError):
            reader.read_table("orders", [0], isolation_level=isolation, use_table=False,
                              **options)


@pytest.mark.parametrize("isolation", ISOLATIONS)
def test_after_a_log_start_offset_inside_a_file(fresh: TableTier, isolation: str) -> None:
    files = fresh.files[("orders", 0)]
    inside = files[1].first_offset + 2  # file 0 goes, file 1 straddles it
    result = apply_log_start(fresh, "orders", 0, inside)
    assert result.removed == (files[0].path,)
    got = _assert_same(fresh, "orders", isolation)
    assert records_of(got) == fresh.expected("orders", isolation)
    assert min(r.offset for p, r in records_of(got) if p == 0) >= inside


def test_a_log_start_the_table_has_not_applied_yet(fresh: TableTier) -> None:
    # DeleteRecords recorded in the tier, the table's start not yet moved: the filter on the
    # offsets still leaves the deleted rows out.
    from tierlog.remote import RemoteLogMetadataManager

    offset = fresh.files[("orders", 1)][1].first_offset + 1
    RemoteLogMetadataManager(fresh.tier).update_log_start_offset(fresh.tip("orders", 1), offset)
    fresh.log_starts[("orders", 1)] = offset
    for isolation in ISOLATIONS:
        got = _assert_same(fresh, "orders", isolation)
        assert records_of(got) == fresh.expected("orders", isolation)


@pytest.mark.parametrize("isolation", ISOLATIONS)
def test_after_a_restore_cut(fresh: TableTier, isolation: str) -> None:
    files = fresh.files[("orders", 0)]
    cut_table(fresh, "orders", 0, files[1].first_offset + 3)  # file 1 goes whole, and later
    assert fresh.covered("orders", 0) == files[1].first_offset
    got = _assert_same(fresh, "orders", isolation)
    assert records_of(got) == fresh.expected("orders", isolation)


@pytest.mark.parametrize("columns", [["offset"], ["value", "key", "offset"],
                                     ["headers", "partition"], ["timestamp", "timestampType",
                                                                "topic"], SCHEMA.names[::-1]])
def test_column_subsets_in_the_callers_order(tt: TableTier, columns: list[str]) -> None:
    for isolation in ISOLATIONS:
        got = _assert_same(tt, "orders", isolation, columns=columns)
        assert got.schema.names == columns
        full = RemoteTopicReader(tt.url).read_table("orders", isolation_level=isolation,
                                                    use_table=False)
        assert got.equals(full.select(columns))


def test_columns_without_headers_and_unknown_columns(tt: TableTier) -> None:
    reader = RemoteTopicReader(tt.url)
    got = reader.read_table("orders", columns=["key", "offset"], include_headers=False)
    assert got.schema.names == ["key", "offset"]
    with pytest.raises(ValueError, match="'aborted'"):
        reader.read_table("orders", columns=["offset", "aborted"])
    with pytest.raises(ValueError, match="'offset' is asked for twice"):
        reader.read_table("orders", columns=["offset", "offset"])
    with pytest.raises(ValueError, match="include_headers=False"):
        reader.read_table("orders", columns=["headers"], include_headers=False)


@pytest.mark.parametrize("isolation", ISOLATIONS)
def test_filters_on_offsets_and_timestamps(tt: TableTier, isolation: str) -> None:
    full = RemoteTopicReader(tt.url).read_table("orders", isolation_level=isolation,
                                                use_table=False)
    stamps = sorted(full["timestamp"].to_pylist())
    middle = int(stamps[len(stamps) // 3].timestamp() * 1000)
    covered = tt.covered("orders", 0)
    for options in ({"min_offset": covered - 5, "max_offset": covered + 5},
                    {"min_offset": 3, "max_offset": 40},
                    {"min_timestamp": middle},
                    {"min_timestamp": middle, "max_offset": covered},
                    {"starting_timestamp": middle},
                    {"ending_timestamp": middle, "min_offset": 10}):
        got = _assert_same(tt, "orders", isolation, **options)
        assert got.num_rows > 0, options


def _assert_one_warning(caplog: pytest.LogCaptureFixture, *words: str) -> None:
    warnings = [r for r in caplog.records
                if r.name == TABLE_LOGGER and r.levelno == logging.WARNING]
    assert len(warnings) == 1, [r.getMessage() for r in warnings]
    for word in words:
        assert word in warnings[0].getMessage()


def test_corrupt_table_metadata_falls_back_with_one_warning(
        fresh: TableTier, caplog: pytest.LogCaptureFixture) -> None:
    metadata = fresh.tier.path(table_key("orders", fresh.topic_id("orders")), "metadata")
    newest = max((p for p in fresh.tier.fs.ls(metadata, detail=False)
                  if p.endswith(".metadata.json")), key=lambda p: int(p.rsplit("/v", 1)[1]
                                                                      .split(".")[0]))
    fresh.tier.fs.pipe_file(newest, b"{not json")
    caplog.set_level(logging.WARNING, TABLE_LOGGER)
    got = _assert_same(fresh, "orders", "read_committed")
    assert records_of(got) == fresh.expected("orders", "read_committed")
    warnings = [r for r in caplog.records if r.name == TABLE_LOGGER]
    assert len(warnings) == 1 and "orders-" in warnings[0].getMessage()
    assert "cannot be read" in warnings[0].getMessage()


def _data_file(tt: TableTier, index: int) -> str:
    """The tier path of partition 0's ``index``-th data file of ``orders``."""
    key = table_key("orders", tt.topic_id("orders"))
    return tt.tier.path(key, tt.files[("orders", 0)][index].path.split(f"{key}/", 1)[1])


@pytest.mark.parametrize("isolation", ISOLATIONS)
def test_a_missing_data_file_falls_back_to_the_segments(
        fresh: TableTier, isolation: str, caplog: pytest.LogCaptureFixture) -> None:
    fresh.tier.fs.rm_file(_data_file(fresh, 1))
    caplog.set_level(logging.WARNING, TABLE_LOGGER)
    got = RemoteTopicReader(fresh.url).read_table("orders", isolation_level=isolation)
    assert records_of(got) == fresh.expected("orders", isolation)
    _assert_one_warning(caplog, "orders-", "FileNotFoundError")


@pytest.mark.parametrize("isolation", ISOLATIONS)
def test_a_damaged_data_file_falls_back_to_the_segments(
        fresh: TableTier, isolation: str, caplog: pytest.LogCaptureFixture) -> None:
    # The pages of partition 0's second file are damaged (its footer is intact, so the scan
    # fails, not the planning): partition 0 comes from the segments from the first offset the
    # table part had not returned, none twice; partition 1 too (one warning for the read).
    path = _data_file(fresh, 1)
    data = bytearray(fresh.tier.get_bytes(path))
    data[4:len(data) // 2] = b"\xff" * (len(data) // 2 - 4)
    fresh.tier.fs.pipe_file(path, bytes(data))
    caplog.set_level(logging.WARNING, TABLE_LOGGER)
    got = RemoteTopicReader(fresh.url).read_table("orders", isolation_level=isolation)
    assert records_of(got) == fresh.expected("orders", isolation)
    _assert_one_warning(caplog, "orders-")


def test_a_topic_without_a_table_reads_the_segments_without_a_warning(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    url = (tmp_path / "tier").as_uri()
    built = build_table_tier(tmp_path, create_remote_storage(url, {"fsync": False}), url,
                             rounds=2, topics=("orders",))
    caplog.set_level(logging.DEBUG, TABLE_LOGGER)
    got = RemoteTopicReader(url).read_table("clicks", isolation_level="read_committed")
    assert records_of(got) == built.expected("clicks", "read_committed")
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


def test_a_tier_on_s3_reads_its_table(tmp_path: Path, s3_options: dict[str, str]) -> None:
    from support.s3 import S3_BUCKET

    from tierlog.plugins.s3 import create_remote_storage as create_s3_storage

    url = f"s3://{S3_BUCKET}/reader-table-{tmp_path.name}"
    s3 = build_table_tier(tmp_path, create_s3_storage(url, s3_options), url, rounds=2,
                          topics=("orders",))
    # the files are read through the s3 filesystem: a damaged covered segment is not read
    link = s3.files[("orders", 0)][0]
    md = next(s for s in s3.built.partitions[("orders", 0)].segments
              if s.start_offset == link.first_offset)
    path = s3.tier.path(segment_object_key(md, SEGMENT_SUFFIX))
    s3.tier.fs.pipe_file(path, b"\x00" * len(s3.tier.get_bytes(path)))
    reader = RemoteTopicReader(url, s3_options)
    for isolation in ISOLATIONS:
        got = reader.read_table("orders", [0], isolation_level=isolation,
                                ending_offsets={0: link.last_offset + 1})
        assert records_of(got) == [(p, r) for p, r in s3.expected("orders", isolation, [0])
                                   if r.offset <= link.last_offset]
