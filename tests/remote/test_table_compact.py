"""Table compaction: ``TableCommitter.compact`` swaps a run file for its inputs in one overwrite
snapshot (coverage and rows unchanged), exactly once, redone after a tiering append and given up
(stale) when an input was replaced; ``merge_run`` writes the inputs' rows, row groups aligned to
the links, with the link list in the footer; ``plan_runs`` picks consecutive small files;
``compact_table`` leaves one file per partition and readers return the same records."""

from __future__ import annotations

import logging
import tempfile
from collections.abc import Sequence
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from pyiceberg.conversions import to_bytes
from pyiceberg.manifest import DataFile
from pyiceberg.types import LongType
from support.table_files import (
    IDENT,
    TOPIC,
    TOPIC_ID,
    coverage_of,
    interleaved,
    no_backoff,
    rows,
    table_of,
    write_link,
)
from support.table_tier import build_table_tier
from support.tier_builder import ISOLATIONS, records_of

from tierlog.errors import (
    CorruptRemoteMetadataError,
    TableChainError,
    TableCompactionStaleError,
)
from tierlog.plugins.local import create_remote_storage
from tierlog.reader import RemoteTopicReader
from tierlog.remote import TopicIdPartition
from tierlog.remote.table.catalog import TierCatalog
from tierlog.remote.table.commit import (
    CurrentFile,
    ReadyFile,
    RunFile,
    TableCommitter,
    current_files,
)
from tierlog.remote.table.compact import (
    CompactionProgress,
    compact_partition,
    compact_table,
    merge_run,
    plan_runs,
)
from tierlog.remote.table.convert import data_file
from tierlog.remote.table.coverage import Coverage
from tierlog.remote.table.naming import DataFileName
from tierlog.remote.table.run_links import KV_LINKS, RunLink, decode_links
from tierlog.remote.table.schema import ARROW_SCHEMA, FIELD_IDS, OFFSET


def scanned(catalog: TierCatalog, partition: int) -> pa.Table:
    data = table_of(catalog).scan().to_arrow()
    return data.filter(pc.equal(data["partition"], partition)).sort_by("offset")


def paths(catalog: TierCatalog, partition: int) -> list[str]:
    return [f.data_file.file_path for f in current_files(table_of(catalog), partition)]


def committed(catalog: TierCatalog, committer: TableCommitter,
              spans: Sequence[tuple[int, int]], partition: int = 0) -> list[ReadyFile]:
    table = table_of(catalog)
    files = [write_link(catalog.tier, table, partition, a, b) for a, b in spans]
    committer.commit(files, starts={partition: spans[0][0]})
    return files


def hand_run(catalog: TierCatalog, inputs: Sequence[ReadyFile], *,
             offsets: Sequence[int] | None = None) -> RunFile:
    """A run file of ``inputs`` written by hand (the committer's tests need no merge): their
    offsets' rows (or ``offsets``) under a run name of their span."""
    table = table_of(catalog)
    p, first, last = inputs[0].partition, inputs[0].first_offset, inputs[-1].last_offset
    name = DataFileName.new_run(p, first, last, len(inputs))
    location = f"{table.location().rstrip('/')}/{name.key}"
    wanted = list(range(first, last + 1)) if offsets is None else list(offsets)
    with tempfile.TemporaryDirectory() as tmp:
        local = Path(tmp) / name.name
        footers: list[pq.FileMetaData] = []
        pq.write_table(rows(p, wanted), local, store_schema=False, metadata_collector=footers)
        catalog.tier.put_file(local, str(catalog.tier.fs._strip_protocol(location)))
        size = local.stat().st_size
    return RunFile(p, first, last, data_file(table, location, footers[0], size, p),
                   tuple(f.data_file.file_path for f in inputs))


# -- TableCommitter.compact ----------------------------------------------------------------


def test_a_compaction_swaps_its_inputs_for_the_run_in_one_snapshot(catalog, committer) -> None:
    inputs = committed(catalog, committer, [(0, 9), (10, 19), (20, 29), (30, 39)])
    committed(catalog, committer, [(0, 4)], partition=1)
    before = coverage_of(catalog)
    rows_before = scanned(catalog, 0)
    version = catalog.latest_version(IDENT)
    run = hand_run(catalog, inputs[:3])
    result = committer.compact(run)
    assert catalog.latest_version(IDENT) == version + 1  # one snapshot
    snapshot = table_of(catalog).current_snapshot()
    assert result.snapshot_id == snapshot.snapshot_id
    assert snapshot.summary.operation.value == "overwrite"
    assert result.added == (run.data_file.file_path,)
    assert result.removed == run.replaces
    assert paths(catalog, 0) == [run.data_file.file_path, inputs[3].data_file.file_path]
    assert [(f.first_offset, f.last_offset, f.links, f.is_run)
            for f in current_files(table_of(catalog), 0)] == [(0, 29, 3, True),
                                                             (30, 39, 1, False)]
    assert coverage_of(catalog) == result.coverage == before
    assert scanned(catalog, 0).equals(rows_before)
    assert scanned(catalog, 1)["offset"].to_pylist() == list(range(5))
    # A redo after an unknown outcome finds its run current: nothing to do.
    again = committer.compact(run)
    assert again.snapshot_id is None and catalog.latest_version(IDENT) == version + 1


@pytest.mark.parametrize("change", ["apply_start", "repair", "compact"])
def test_a_compaction_whose_input_was_replaced_is_stale(catalog, committer, change) -> None:
    inputs = committed(catalog, committer, [(0, 9), (10, 19), (20, 29)])
    table = table_of(catalog)
    run = hand_run(catalog, inputs)
    if change == "apply_start":  # retention rewrote the first link's file
        committer.apply_start(0, 5, rewritten=write_link(catalog.tier, table, 0, 5, 9))
    elif change == "repair":  # scrub converted the middle link again
        committer.repair([write_link(catalog.tier, table, 0, 10, 19)])
    else:  # another compaction merged the last two first
        committer.compact(hand_run(catalog, inputs[1:]))
    version = catalog.latest_version(IDENT)
    current = paths(catalog, 0)
    with pytest.raises(TableCompactionStaleError,
                       match=r"compact p0 \[0, 29\]: its input .* is no longer a current file"):
        committer.compact(run)
    assert catalog.latest_version(IDENT) == version and paths(catalog, 0) == current


def test_a_compaction_that_lost_to_an_append_is_redone(catalog, committer) -> None:
    inputs = committed(catalog, committer, [(0, 9), (10, 19)])
    table = table_of(catalog)
    racing_catalog, fs = interleaved(catalog)
    racing = TableCommitter(racing_catalog, IDENT, backoff=no_backoff)
    appended = write_link(catalog.tier, table, 0, 20, 29)
    fs.before_commit = lambda: committer.commit([appended])  # tiering lands in between
    run = hand_run(catalog, inputs)
    result = racing.compact(run)
    assert result.conflicts == 1 and result.removed == run.replaces
    assert paths(catalog, 0) == [run.data_file.file_path, appended.data_file.file_path]
    assert coverage_of(catalog) == Coverage({0: 30}, {0: 0})  # the append's end kept
    assert scanned(catalog, 0)["offset"].to_pylist() == list(range(30))


@pytest.mark.parametrize(("case", "message"), [
    ("gap", r"its inputs \[\(0, 9\), \(20, 29\)\] are not consecutive"),
    ("count", r"it holds 19 rows, its inputs 20"),
    ("span", r"its inputs span \[0, 19\]"),
    ("bounds", r"its offset bounds \(0, 20\) are not its inputs' \(0, 19\)"),
])
def test_a_run_that_does_not_hold_its_inputs_is_refused(catalog, committer, case,
                                                        message) -> None:
    inputs = committed(catalog, committer, [(0, 9), (10, 19), (20, 29)])
    if case == "gap":
        run = hand_run(catalog, [inputs[0], inputs[2]], offsets=[*range(10), *range(20, 30)])
        run = RunFile(0, 0, 29, run.data_file, run.replaces)
    elif case == "count":
        run = hand_run(catalog, inputs[:2], offsets=range(19))
    elif case == "span":
        good = hand_run(catalog, inputs[:2])
        run = RunFile(0, 0, 20, good.data_file, good.replaces)
    else:
        run = hand_run(catalog, inputs[:2], offsets=[*range(10), *range(11, 20), 20])
    version = catalog.latest_version(IDENT)
    with pytest.raises(TableChainError, match=message):
        committer.compact(run)
    assert catalog.latest_version(IDENT) == version


# -- merge_run -------------------------------------------------------------------------------


def tip_of(partition: int = 0) -> TopicIdPartition:
    return TopicIdPartition(TOPIC_ID, TOPIC, partition)


def tier_path(catalog: TierCatalog, location: str) -> str:
    return str(catalog.tier.fs._strip_protocol(location))


def read_file(catalog: TierCatalog, location: str) -> pq.ParquetFile:
    return pq.ParquetFile(tier_path(catalog, location))


def rows_of(catalog: TierCatalog, files: Sequence[CurrentFile]) -> pa.Table:
    """The files' rows, concatenated in offset order, as the table's schema has them."""
    return pa.concat_tables([read_file(catalog, f.data_file.file_path).read().cast(ARROW_SCHEMA)
                             for f in files])


def test_a_merge_writes_its_inputs_rows_with_one_row_group_per_link(catalog,
                                                                    committer) -> None:
    table = table_of(catalog)
    spans = [(0, 9, range(10)), (10, 19, []), (20, 24, [20, 22, 24]), (25, 39, range(25, 40))]
    files = [write_link(catalog.tier, table, 0, a, b, offsets=o, segment_id=f"seg{a}")
             for a, b, o in spans]
    committer.commit(files, starts={0: 0})
    inputs = current_files(table_of(catalog), 0)
    want = rows_of(catalog, inputs)
    run = merge_run(catalog.tier, table_of(catalog), tip_of(), inputs)
    assert (run.partition, run.first_offset, run.last_offset) == (0, 0, 39)
    assert run.replaces == tuple(f.data_file.file_path for f in inputs)
    assert DataFileName.parse(run.data_file.file_path).links == 4
    merged = read_file(catalog, run.data_file.file_path)
    assert merged.read().cast(ARROW_SCHEMA).equals(want)
    kv = {k.decode(): v.decode() for k, v in merged.metadata.metadata.items()}
    assert {k: v for k, v in kv.items() if k != KV_LINKS} == {
        "tierlog.version": "2", "tierlog.firstOffset": "0", "tierlog.lastOffset": "39",
        "tierlog.records": "28"}
    links = decode_links(kv[KV_LINKS], "run")
    # The 0-row link has no row group: its first is the next link's.
    assert links == (RunLink("seg0", 0, 9, 10, 0), RunLink("seg10", 10, 19, 0, 1),
                     RunLink("seg20", 20, 24, 3, 1), RunLink("seg25", 25, 39, 15, 2))
    assert [merged.metadata.row_group(g).num_rows for g in range(merged.num_row_groups)] == [
        10, 3, 15]
    assert run.data_file.record_count == 28
    assert run.data_file.file_size_in_bytes == catalog.tier.size(
        tier_path(catalog, run.data_file.file_path))
    committer.compact(run)
    columns = ["offset", "key", "value", "aborted"]
    assert scanned(catalog, 0).select(columns).to_pylist() == want.select(columns).to_pylist()


def test_a_run_merges_again_with_the_files_after_it(catalog, committer) -> None:
    table = table_of(catalog)
    files = [write_link(catalog.tier, table, 0, a, a + 4, segment_id=f"s{a}")
             for a in range(0, 30, 5)]
    committer.commit(files, starts={0: 0})
    first = merge_run(catalog.tier, table, tip_of(),
                      current_files(table_of(catalog), 0)[1:4])
    committer.compact(first)  # [0, 4] stays a link file, [5, 19] a run
    inputs = current_files(table_of(catalog), 0)
    assert [(f.first_offset, f.links, f.is_run) for f in inputs] == [
        (0, 1, False), (5, 3, True), (20, 1, False), (25, 1, False)]
    want = rows_of(catalog, inputs)
    run = merge_run(catalog.tier, table_of(catalog), tip_of(), inputs)
    merged = read_file(catalog, run.data_file.file_path)
    assert merged.read().cast(ARROW_SCHEMA).equals(want)
    links = decode_links(merged.metadata.metadata[KV_LINKS.encode()], "run")
    assert [(k.segment_id, k.first_offset, k.last_offset, k.records, k.first_row_group)
            for k in links] == [(f"s{a}", a, a + 4, 5, a // 5) for a in range(0, 30, 5)]
    result = committer.compact(run)
    assert len(result.removed) == 4
    assert [(f.first_offset, f.last_offset, f.links) for f in current_files(
        table_of(catalog), 0)] == [(0, 29, 6)]
    assert scanned(catalog, 0)["offset"].to_pylist() == list(range(30))


def test_a_merge_of_a_run_without_its_link_list_is_refused(catalog, committer) -> None:
    inputs = committed(catalog, committer, [(0, 9), (10, 19), (20, 29)])
    committer.compact(hand_run(catalog, inputs[:2]))  # a run file with no tierlog.links
    files = current_files(table_of(catalog), 0)
    assert [f.is_run for f in files] == [True, False]
    with pytest.raises(CorruptRemoteMetadataError, match=r"\.r2-.*: a run file without its "
                                                         r"tierlog.links list"):
        merge_run(catalog.tier, table_of(catalog), tip_of(), files)
    assert catalog.tier.fs.glob(tier_path(catalog, table_of(catalog).location())
                                + "/data/p0/*.r3-*.parquet") == []  # nothing published


def test_a_merge_of_files_that_are_not_consecutive_is_refused(catalog, committer) -> None:
    committed(catalog, committer, [(0, 9), (10, 19), (20, 29)])
    files = current_files(table_of(catalog), 0)
    with pytest.raises(TableChainError, match=r"files \[\(0, 9\), \(20, 29\)\] of partitions "
                                              r"\[0\] are not consecutive"):
        merge_run(catalog.tier, table_of(catalog), tip_of(), [files[0], files[2]])


def test_a_partitions_stale_run_is_counted_and_left_for_the_sweep(catalog, committer,
                                                                 caplog) -> None:
    committed(catalog, committer, [(0, 9), (10, 19), (20, 29), (30, 39), (40, 49)])
    racing_catalog, fs = interleaved(catalog)
    racing = TableCommitter(racing_catalog, IDENT, backoff=no_backoff)
    repaired = write_link(catalog.tier, table_of(catalog), 0, 10, 19)
    fs.before_commit = lambda: committer.repair([repaired])  # scrub lands in between
    report = compact_partition(catalog.tier, racing, tip_of(), target_bytes=1 << 20,
                               max_links=3)
    assert (report.runs, report.stale, report.files_removed) == (1, 1, 2)
    current = current_files(table_of(catalog), 0)
    assert [(f.first_offset, f.last_offset, f.is_run) for f in current] == [
        (0, 9, False), (10, 19, False), (20, 29, False), (30, 49, True)]
    assert current[1].data_file.file_path == repaired.data_file.file_path
    # One warning names the stale run (the INFO of its lost attempt may be captured too, when
    # an earlier test left tierlog's loggers at INFO).
    stale = [r for r in caplog.records
             if "compact p0 [0, 29]" in r.getMessage() and r.levelno >= logging.WARNING]
    assert [r.levelno for r in stale] == [logging.WARNING]
    assert "left for the sweep" in stale[0].getMessage()
    orphans = {p.rsplit("/", 1)[-1] for p in catalog.tier.fs.glob(
        tier_path(catalog, table_of(catalog).location()) + "/data/p0/*.r3-*.parquet")}
    assert len(orphans) == 1  # the stale run's file, for the sweep
    # The next compaction plans again from the table as it is (one run at most here).
    again = compact_partition(catalog.tier, committer, tip_of(), target_bytes=1 << 20,
                              max_links=3, max_runs=1)
    assert (again.runs, again.stale) == (1, 0)
    assert [(f.first_offset, f.last_offset) for f in current_files(table_of(catalog), 0)] == [
        (0, 29), (30, 49)]
    assert scanned(catalog, 0)["offset"].to_pylist() == list(range(50))


# -- plan_runs ----------------------------------------------------------------------------------


def fake(first: int, last: int, size: int, *, links: int = 1, lower: int | None = None
         ) -> CurrentFile:
    """A current file of partition 0 of ``size`` bytes whose rows start at ``lower`` (by
    default its first offset)."""
    lower = first if lower is None else lower
    df = DataFile.from_args(file_path=f"f{first}", file_size_in_bytes=size,
                            lower_bounds={FIELD_IDS[OFFSET]: to_bytes(LongType(), lower)},
                            upper_bounds={FIELD_IDS[OFFSET]: to_bytes(LongType(), last)})
    return CurrentFile(0, first, last, df, links, links > 1)


def spans_of(runs: list[list[CurrentFile]]) -> list[list[int]]:
    return [[f.first_offset for f in run] for run in runs]


def chain(*sizes: int) -> list[CurrentFile]:
    return [fake(i * 10, i * 10 + 9, size) for i, size in enumerate(sizes)]


@pytest.mark.parametrize(("files", "start", "target", "max_links", "expected"), [
    # greedy up to the target's bytes
    (chain(30, 30, 30, 30, 30), None, 100, 16, [[0, 10, 20], [30, 40]]),
    # up to max_links links (a run's links count)
    (chain(10, 10, 10, 10, 10), None, 100, 2, [[0, 10], [20, 30]]),
    ([fake(0, 29, 10, links=3), *[fake(30 + 10 * i, 39 + 10 * i, 10) for i in range(3)]],
     None, 100, 4, [[0, 30], [40, 50]]),
    # a big file (>= 0.75 target) breaks a group; a lone small file is no run
    (chain(10, 10, 80, 10, 75, 10, 10), None, 100, 16, [[0, 10], [50, 60]]),
    # nothing picked when the files are big
    (chain(75, 90, 200), None, 100, 16, []),
    # the start's straddler (rows below the start) is never in a run ...
    ([fake(0, 9, 10, lower=3), *chain(10, 10, 10)[1:]], 5, 100, 16, [[10, 20]]),
    # ... but a rewritten one (its rows start at the start) and a 0-row file may be
    ([fake(0, 9, 10, lower=5), *chain(10, 10, 10)[1:]], 5, 100, 16, [[0, 10, 20]]),
])
def test_plan_runs(files, start, target, max_links, expected) -> None:
    runs = plan_runs(files, start=start, target_bytes=target, max_links=max_links)
    assert spans_of(runs) == expected


def test_plan_runs_refuses_a_bad_bound() -> None:
    with pytest.raises(ValueError, match="2 to 1000 links"):
        plan_runs(chain(1, 1), start=None, target_bytes=100, max_links=1)


# -- compact_table ------------------------------------------------------------------------------


def test_compact_table_leaves_one_file_per_partition_and_the_same_records(tmp_path,
                                                                          caplog) -> None:
    url = (tmp_path / "tier").as_uri()
    tt = build_table_tier(tmp_path, create_remote_storage(url, {"fsync": False}), url,
                          rounds=3, topics=("orders",))
    reader = RemoteTopicReader(tt.url)
    before = {iso: reader.read_table("orders", isolation_level=iso) for iso in ISOLATIONS}
    files = {p: current_files(tt.table("orders"), p) for p in (0, 1)}
    assert all(len(f) >= 3 for f in files.values())
    snapshot = tt.table("orders").current_snapshot().snapshot_id
    dry = compact_table(tt.url, "orders", target_bytes=1 << 20, max_links=1000, dry_run=True)
    assert dry.runs == 0 and tt.table("orders").current_snapshot().snapshot_id == snapshot
    assert dry.planned == [(p, files[p][0].first_offset, files[p][-1].last_offset,
                            len(files[p])) for p in (0, 1)]
    seen: list[CompactionProgress] = []
    report = compact_table(tt.url, "orders", target_bytes=1 << 20, max_links=1000,
                           progress=seen.append)
    assert (report.runs, report.stale) == (2, 0)
    assert report.files_removed == sum(len(f) for f in files.values())
    assert report.bytes_read == sum(f.data_file.file_size_in_bytes
                                    for fs in files.values() for f in fs)
    assert [(s.runs_done, s.runs_total) for s in seen] == [(1, 2), (2, 2)]
    for p in (0, 1):
        (run,) = current_files(tt.table("orders"), p)
        assert (run.first_offset, run.last_offset, run.links, run.is_run) == (
            files[p][0].first_offset, files[p][-1].last_offset, len(files[p]), True)
    caplog.set_level(logging.WARNING, "tierlog.reader._table")  # a fallback to the segments
    for iso in ISOLATIONS:
        got = RemoteTopicReader(tt.url).read_table("orders", isolation_level=iso)
        assert got.equals(before[iso]), iso
        assert records_of(got) == tt.expected("orders", iso)
    assert [r.getMessage() for r in caplog.records if r.name == "tierlog.reader._table"] == []
    again = compact_table(tt.url, "orders", target_bytes=1 << 20, max_links=1000)
    assert again.runs == 0 and again.planned == []
