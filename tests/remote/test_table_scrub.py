"""``tierlog scrub`` of a tier whose topics have tables (tierlog.remote.ops.scrub_table): a table
that follows its segments reports nothing; each way a table can disagree with its segments is
one finding naming the partition, offsets and file; ``--repair`` converts a missing or damaged
file's segment again and puts it in the table (coverage unchanged), after which the table's rows
are the segments' own again; ``--deep`` counts the segment's records against the file's rows.
The damage is made with pyiceberg and the tier's own objects, as a bug or an operator could.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from pyiceberg.manifest import DataFile
from support.cli_runner import tierlog
from support.table_runs import merge, tamper
from support.table_tier import TableTier, apply_log_start, build_table_tier, ready

from tierlog.plugins.local import create_remote_storage
from tierlog.remote.ops.scrub import FindingKind, ScrubReport, scrub_tier
from tierlog.remote.read.readable import segment_chain
from tierlog.remote.read.transactions import aborted_txns
from tierlog.remote.table.commit import CurrentFile, ReadyFile, current_files
from tierlog.remote.table.convert import (
    KV_FIRST_OFFSET,
    KV_RECORDS,
    KV_VERSION,
    convert_link,
    data_file,
)
from tierlog.remote.table.coverage import Coverage
from tierlog.remote.table.naming import DataFileName
from tierlog.remote.table.run_links import KV_LINKS, decode_links
from tierlog.remote.tier.layout import table_key

TOPIC = "orders"
TABLE_KINDS = {FindingKind.TABLE_MISSING_FILE, FindingKind.TABLE_DAMAGED_FILE,
               FindingKind.TABLE_STRAY_FILE, FindingKind.TABLE_TILING}


@pytest.fixture
def tt(tmp_path: Path) -> TableTier:
    """orders (2 partitions) with every stable link in its table."""
    url = (tmp_path / "tier").as_uri()
    return build_table_tier(tmp_path, create_remote_storage(url, {"fsync": False}), url,
                            rounds=3, topics=(TOPIC,))


def scrub(tt: TableTier, **kwargs: bool) -> ScrubReport:
    return scrub_tier(tt.tier, topic=TOPIC, grace_ms=10**12, **kwargs)


def table_findings(report: ScrubReport) -> list:
    return [f for f in report.findings if f.kind in TABLE_KINDS]


def table_ok(report: ScrubReport) -> bool:
    """Whether every table finding was repaired (the builder's tier has findings of its own
    that are not the table's)."""
    return not [f for f in report.unrepaired() if f.kind in TABLE_KINDS]


def local(tt: TableTier, path: str) -> Path:
    """The local file of a table data file's location."""
    name = DataFileName.parse(path)
    return Path(tt.tier.path(table_key(TOPIC, tt.topic_id(TOPIC)), name.key))


def rows(tt: TableTier, partition: int) -> list[int]:
    """The offsets of the partition's rows in the table's current snapshot."""
    table = tt.table(TOPIC).scan(row_filter=f"partition == {partition}",
                                 selected_fields=("offset",)).to_arrow()
    return sorted(table["offset"].to_pylist())


def drop_file(tt: TableTier, path: str) -> None:
    """A snapshot that loses one data file and keeps the coverage (a bug's table)."""
    table = tt.table(TOPIC)
    coverage = Coverage.of_snapshot(table.current_snapshot(), "t")
    victim = next(f.data_file for f in current_files(table) if f.data_file.file_path == path)
    tx = table.transaction()
    with tx.update_snapshot(snapshot_properties=coverage.summary()).overwrite() as producer:
        producer.delete_data_file(victim)
    tx.commit_transaction()


def copied_as(tt: TableTier, source: str, name: DataFileName) -> DataFile:
    """The bytes of the data file ``source`` published under ``name``, and its DataFile."""
    table = tt.table(TOPIC)
    target = local(tt, f"{table.location()}/{name.key}")
    shutil.copyfile(local(tt, source), target)
    return data_file(table, f"{table.location()}/{name.key}", pq.read_metadata(target),
                     target.stat().st_size, name.partition)


def test_a_table_that_follows_its_segments_reports_nothing(tt: TableTier) -> None:
    report = scrub(tt, deep=True)
    assert report.tables == 1
    assert table_findings(report) == [], report.findings
    assert report.to_dict()["tables"] == 1


def test_a_file_the_table_lost_is_found_and_repair_adds_it_again(tt: TableTier) -> None:
    lost = tt.files[(TOPIC, 0)][0]
    before = rows(tt, 0)
    drop_file(tt, lost.path)
    report = scrub(tt)
    [finding] = table_findings(report)
    assert finding.kind is FindingKind.TABLE_MISSING_FILE
    assert finding.partition == f"{TOPIC}-0-{tt.topic_id(TOPIC)}"
    assert finding.offsets == (lost.first_offset, lost.last_offset)
    assert finding.segment_id == lost.segment_id
    assert not table_ok(report)

    repaired = scrub(tt, repair=True)
    assert [r.finding.kind for r in repaired.repairs] == [FindingKind.TABLE_MISSING_FILE]
    assert "added the file" in repaired.repairs[0].action
    assert table_ok(repaired)
    assert table_findings(scrub(tt, deep=True)) == []
    assert rows(tt, 0) == before
    coverage = Coverage.of_snapshot(tt.table(TOPIC).current_snapshot(), "t")
    assert coverage.end(0) == tt.covered(TOPIC, 0)


def test_a_truncated_file_is_found_and_repair_replaces_it(tt: TableTier) -> None:
    damaged = tt.files[(TOPIC, 1)][0]
    before = rows(tt, 1)
    path = local(tt, damaged.path)
    path.write_bytes(path.read_bytes()[:-100])
    [finding] = table_findings(scrub(tt))
    assert finding.kind is FindingKind.TABLE_DAMAGED_FILE
    assert finding.object == damaged.path
    assert finding.offsets == (damaged.first_offset, damaged.last_offset)
    assert "bytes" in finding.detail

    repaired = scrub(tt, repair=True)
    assert "replaced the file" in repaired.repairs[0].action
    assert table_ok(repaired)
    current = [f.data_file.file_path for f in current_files(tt.table(TOPIC), 1)]
    assert damaged.path not in current
    assert table_findings(scrub(tt, deep=True)) == []
    assert rows(tt, 1) == before


def test_the_cli_names_a_lost_file_and_repairs_it(tt: TableTier) -> None:
    lost = tt.files[(TOPIC, 1)][0]
    drop_file(tt, lost.path)
    args = ("scrub", tt.url, "--topic", TOPIC, "--quiet", "--grace-ms", str(10**12))
    found = tierlog(*args, check=False)
    assert found.returncode == 1
    assert (f"table_missing_file: {TOPIC}-1-{tt.topic_id(TOPIC)}, segment {lost.segment_id}, "
            f"offsets {lost.first_offset}..{lost.last_offset}") in found.stdout
    assert ", 1 table: " in found.stdout
    report = json.loads(tierlog(*args, "--repair", "--json", check=False).stdout)
    assert report["tables"] == 1
    [repair] = [r for r in report["repairs"] if r["finding"]["kind"].startswith("table_")]
    assert repair["action"].startswith("converted the segment again and added the file")
    assert table_findings(scrub(tt)) == []


def test_a_missing_object_is_a_damaged_file(tt: TableTier) -> None:
    gone = tt.files[(TOPIC, 0)][-1]
    local(tt, gone.path).unlink()
    [finding] = table_findings(scrub(tt))
    assert finding.kind is FindingKind.TABLE_DAMAGED_FILE
    assert "missing" in finding.detail
    assert table_ok(scrub(tt, repair=True))
    assert table_findings(scrub(tt)) == []


def test_a_file_holding_another_links_rows_is_found_by_its_metadata(tt: TableTier) -> None:
    a, b = tt.files[(TOPIC, 0)][:2]
    name = DataFileName.new(0, a.first_offset, a.last_offset, a.segment_id)
    impostor = copied_as(tt, b.path, name)  # b's bytes under a's name, same size recorded
    tt.committer(TOPIC).repair([ReadyFile(0, a.first_offset, a.last_offset, impostor)])
    [finding] = table_findings(scrub(tt))
    assert finding.kind is FindingKind.TABLE_DAMAGED_FILE
    assert "tierlog.segmentId" in finding.detail and b.segment_id in finding.detail
    assert table_ok(scrub(tt, repair=True))
    assert table_findings(scrub(tt, deep=True)) == []


def test_a_file_of_a_segment_not_committed_is_stray(tt: TableTier) -> None:
    a = tt.files[(TOPIC, 0)][0]
    before = rows(tt, 0)
    name = DataFileName.new(0, a.first_offset, a.last_offset, "NotASegmentAtAll000000")
    stray = copied_as(tt, a.path, name)
    tt.committer(TOPIC).repair([ReadyFile(0, a.first_offset, a.last_offset, stray)])
    report = scrub(tt)
    assert {f.kind for f in table_findings(report)} == {FindingKind.TABLE_STRAY_FILE,
                                                       FindingKind.TABLE_MISSING_FILE}
    [found] = report.of_kind(FindingKind.TABLE_STRAY_FILE)
    assert found.segment_id == "NotASegmentAtAll000000"
    assert "not committed" in found.detail
    scrub(tt, repair=True)  # the link's file converted again replaces the stray one
    assert table_findings(scrub(tt)) == []
    assert rows(tt, 0) == before


def test_coverage_past_every_file_is_a_tiling_gap(tt: TableTier) -> None:
    table = tt.table(TOPIC)
    coverage = Coverage.of_snapshot(table.current_snapshot(), "t")
    end = tt.tier_end(TOPIC, 1) + 10
    tx = table.transaction()
    with tx.update_snapshot(snapshot_properties=coverage.advanced(1, end).summary()
                            ).merge_append():
        pass
    tx.commit_transaction()
    findings = table_findings(scrub(tt))
    tiling = [f for f in findings if f.kind is FindingKind.TABLE_TILING]
    assert [f.offsets for f in tiling] == [(tt.tier_end(TOPIC, 1), end - 1)]
    # The links up to the tier's end are committed: each is missing its file (repairable).
    chain = segment_chain(tt.tier, tt.tip(TOPIC, 1))
    assert [f.offsets for f in findings if f.kind is FindingKind.TABLE_MISSING_FILE] == [
        (link.first_offset, link.last_offset) for link in chain
        if link.first_offset >= tt.covered(TOPIC, 1)]
    assert tiling[0].partition == f"{TOPIC}-1-{tt.topic_id(TOPIC)}"
    after = scrub(tt, repair=True)
    assert not table_ok(after)  # a human's call: the coverage itself is wrong
    assert after.repairs == []  # the missing links hold a transaction with no outcome yet
    assert any("last stable offset" in note for note in after.notes)
    assert table_findings(scrub(tt)) == findings


def test_deep_counts_the_segments_records_against_the_rows(tt: TableTier) -> None:
    tip = tt.tip(TOPIC, 0)
    chain = segment_chain(tt.tier, tip)
    link = chain[1]
    short = convert_link(tt.tier, tt.table(TOPIC), tip, link,
                         aborted_txns=aborted_txns(tt.tier, chain, link.first_offset,
                                                   link.last_offset + 1),
                         log_start_offset=link.first_offset + 5)  # 5 rows short, consistent
    tt.committer(TOPIC).repair([ready(short)])
    assert table_findings(scrub(tt)) == []
    [finding] = table_findings(scrub(tt, deep=True))
    assert finding.kind is FindingKind.TABLE_DAMAGED_FILE
    assert finding.offsets == (link.first_offset, link.last_offset)
    assert "data records" in finding.detail
    assert table_ok(scrub(tt, deep=True, repair=True))
    assert table_findings(scrub(tt, deep=True)) == []


def test_deep_counts_a_file_straddling_the_start_from_the_start(tt: TableTier) -> None:
    straddled = tt.files[(TOPIC, 0)][1]
    apply_log_start(tt, TOPIC, 0, straddled.first_offset + 7)  # the file stays, rows filtered
    table = tt.table(TOPIC)
    assert current_files(table, 0)[0].data_file.file_path == straddled.path
    assert table_findings(scrub(tt, deep=True)) == []


def test_a_topic_without_a_table_is_not_checked(tmp_path: Path) -> None:
    url = (tmp_path / "tier").as_uri()
    tt = build_table_tier(tmp_path, create_remote_storage(url, {"fsync": False}), url,
                          rounds=2, topics=())
    assert scrub(tt).tables == 0


# -- run files (a compaction's merged files) -----------------------------------------------


def merged(tt: TableTier, partition: int = 0) -> CurrentFile:
    """The partition's files merged into one run file (committed)."""
    return merge(tt.tier, tt.committer(TOPIC), tt.tip(TOPIC, partition))


def _links(kv: dict[str, str]) -> list[list]:
    return json.loads(kv[KV_LINKS])


def _with_links(kv: dict[str, str], links: list[list]) -> dict[str, str]:
    return {**kv, KV_LINKS: json.dumps(links)}


def _shift_records(kv: dict[str, str]) -> dict[str, str]:
    """One row moved from a link to the one before it in the list (the total kept)."""
    links = _links(kv)
    j = next(j for j in range(1, len(links)) if links[j][3] > 0)
    links[j - 1][3] += 1
    links[j][3] -= 1
    return _with_links(kv, links)


def _foreign(kv: dict[str, str]) -> dict[str, str]:
    links = _links(kv)
    links[1][0] = "NotASegmentAtAll000000"
    return _with_links(kv, links)


#: How a run file's footer is damaged, what scrub finds, and a word of the finding's detail.
RUN_DAMAGE = {
    "version": (lambda kv: {**kv, KV_VERSION: "1"}, {FindingKind.TABLE_DAMAGED_FILE},
                "tierlog.version"),
    "first offset": (lambda kv: {**kv, KV_FIRST_OFFSET: "1"}, {FindingKind.TABLE_DAMAGED_FILE},
                     "tierlog.firstOffset"),
    "records": (lambda kv: {**kv, KV_RECORDS: "7"}, {FindingKind.TABLE_DAMAGED_FILE},
                "tierlog.records"),
    "link list": (lambda kv: {**kv, KV_LINKS: "[not json"}, {FindingKind.TABLE_DAMAGED_FILE},
                  "link list cannot be read"),
    "no link list": (lambda kv: {k: v for k, v in kv.items() if k != KV_LINKS},
                     {FindingKind.TABLE_DAMAGED_FILE}, "without its tierlog.links"),
    "a link's records": (_shift_records, {FindingKind.TABLE_DAMAGED_FILE}, "row groups of link"),
    "one link fewer": (lambda kv: _with_links(kv, _links(kv)[:-1]),
                       {FindingKind.TABLE_DAMAGED_FILE, FindingKind.TABLE_MISSING_FILE},
                       "its name says"),
    "a foreign segment": (_foreign, {FindingKind.TABLE_STRAY_FILE,
                                     FindingKind.TABLE_MISSING_FILE}, "NotASegmentAtAll"),
}


def test_a_compacted_table_that_follows_its_segments_reports_nothing(tt: TableTier) -> None:
    before = rows(tt, 0), rows(tt, 1)
    run = merged(tt)
    assert run.links == len(tt.files[(TOPIC, 0)]) >= 3
    p1 = tt.files[(TOPIC, 1)]
    merge(tt.tier, tt.committer(TOPIC), tt.tip(TOPIC, 1), p1[1].first_offset, p1[-1].last_offset)
    assert (rows(tt, 0), rows(tt, 1)) == before
    assert table_findings(scrub(tt, deep=True)) == []


@pytest.mark.parametrize("damage", sorted(RUN_DAMAGE))
def test_a_damaged_run_file_is_found_and_repair_unmerges_it(tt: TableTier, damage: str
                                                            ) -> None:
    change, kinds, word = RUN_DAMAGE[damage]
    before = rows(tt, 0)
    run = tamper(tt.tier, tt.committer(TOPIC), tt.tip(TOPIC, 0), merged(tt), change)
    findings = table_findings(scrub(tt))
    assert {f.kind for f in findings} == kinds, findings
    assert any(word in f.detail or word in (f.segment_id or "") for f in findings), findings
    for f in findings:
        assert f.partition == f"{TOPIC}-0-{tt.topic_id(TOPIC)}"
        if f.kind is FindingKind.TABLE_DAMAGED_FILE:
            assert f.object == run.data_file.file_path
            assert f.offsets == (run.first_offset, run.last_offset)
    assert not table_ok(scrub(tt, deep=True))

    repaired = scrub(tt, repair=True)
    assert table_ok(repaired), repaired.findings
    assert repaired.repairs and all("unmerged the run file" in r.action
                                    for r in repaired.repairs)
    assert [(f.first_offset, f.last_offset, f.is_run)
            for f in current_files(tt.table(TOPIC), 0)] == [
        (f.first_offset, f.last_offset, False) for f in tt.files[(TOPIC, 0)]]
    assert table_findings(scrub(tt, deep=True)) == []
    assert rows(tt, 0) == before


def test_a_truncated_run_file_is_found_and_repair_unmerges_it(tt: TableTier) -> None:
    before = rows(tt, 0)
    run = merged(tt)
    path = local(tt, run.data_file.file_path)
    path.write_bytes(path.read_bytes()[:-100])
    [finding] = table_findings(scrub(tt))
    assert finding.kind is FindingKind.TABLE_DAMAGED_FILE and "bytes" in finding.detail
    assert finding.object == run.data_file.file_path
    assert table_ok(scrub(tt, repair=True))
    assert table_findings(scrub(tt, deep=True)) == []
    assert rows(tt, 0) == before


def test_deep_counts_each_link_of_a_run_against_its_segment(tt: TableTier) -> None:
    run = merged(tt)
    listed = decode_links(pq.read_metadata(local(tt, run.data_file.file_path)).metadata[
        KV_LINKS.encode()], "run")
    j = next(j for j, k in enumerate(listed) if k.records > 1)
    group = listed[j].first_row_group

    def fewer(kv: dict[str, str]) -> dict[str, str]:  # consistent: only deep can tell
        links = _links(kv)
        links[j][3] -= 1
        return _with_links({**kv, KV_RECORDS: str(int(kv[KV_RECORDS]) - 1)}, links)

    tamper(tt.tier, tt.committer(TOPIC), tt.tip(TOPIC, 0), run, fewer,
           rows=lambda g, t: t.slice(1) if g == group else t)
    assert table_findings(scrub(tt)) == []
    [finding] = table_findings(scrub(tt, deep=True))
    assert finding.kind is FindingKind.TABLE_DAMAGED_FILE
    assert "data records" in finding.detail and listed[j].segment_id in finding.detail
    assert table_ok(scrub(tt, deep=True, repair=True))
    assert table_findings(scrub(tt, deep=True)) == []
