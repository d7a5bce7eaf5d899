"""TableCommitter: each change of a topic's table is one snapshot carrying the coverage maps
forward, redone on a reloaded table when another commit won or the outcome was lost. Group
commit across partitions; covered files skipped; gaps and overlaps refused; two committers
interleaved keep every row exactly once; a lost response (S3) recovered; the log start
(retention, DeleteRecords) and the restore cut move coverage and files together."""

from __future__ import annotations

import uuid
from typing import Any

import pyarrow.compute as pc
import pytest
import s3fs
from support.s3 import S3_ACCESS_KEY, S3_BUCKET, S3_REGION, S3_SECRET
from support.table_files import (
    IDENT,
    coverage_of,
    create_table,
    interleaved,
    no_backoff,
    table_of,
    write_link,
)

from tierlog.errors import TableChainError, TableCommitConflictError, TableCoverageError
from tierlog.remote.table.catalog import TierCatalog
from tierlog.remote.table.commit import ReadyFile, TableCommitter, current_files
from tierlog.remote.table.coverage import Coverage
from tierlog.remote.tier.object_store import RemoteTier


def offsets(catalog: TierCatalog, partition: int) -> list[int]:
    data = table_of(catalog).scan().to_arrow()
    return sorted(data.filter(pc.equal(data["partition"], partition))["offset"].to_pylist())


def links(catalog: TierCatalog, partition: int) -> list[tuple[int, int]]:
    return [(f.first_offset, f.last_offset) for f in current_files(table_of(catalog), partition)]


def assert_current_files_exist(catalog: TierCatalog) -> None:
    tier = catalog.tier
    for f in current_files(table_of(catalog)):
        assert tier.size(str(tier.fs._strip_protocol(f.data_file.file_path))) > 0


def test_one_snapshot_commits_every_ready_file_across_partitions(catalog, committer) -> None:
    table = table_of(catalog)
    ready = [write_link(catalog.tier, table, p, first, first + 4)
             for p in (2, 0, 1) for first in (5, 0)]  # any order: sorted per partition
    ready.append(write_link(catalog.tier, table, 3, 0, 2, offsets=[]))  # only control records
    result = committer.commit(ready, starts={0: 0, 1: 0, 2: 0, 3: 0})
    assert catalog.latest_version(IDENT) == 2  # the creation, then one commit
    assert result.snapshot_id == table_of(catalog).current_snapshot().snapshot_id
    assert result.conflicts == 0 and result.skipped == ()
    assert sorted(result.added) == sorted(f.data_file.file_path for f in ready)
    assert coverage_of(catalog) == result.coverage == Coverage({0: 10, 1: 10, 2: 10, 3: 3},
                                                            {0: 0, 1: 0, 2: 0, 3: 0})
    for p in (0, 1, 2):
        assert offsets(catalog, p) == list(range(10))
        assert links(catalog, p) == [(0, 4), (5, 9)]
    assert links(catalog, 3) == [(0, 2)]  # the 0-row file holds its link


def test_files_the_table_covers_are_skipped(catalog, committer) -> None:
    table = table_of(catalog)
    first = [write_link(catalog.tier, table, 0, 0, 4), write_link(catalog.tier, table, 1, 0, 4)]
    committer.commit(first, starts={0: 0, 1: 0})
    # A retry after a crash converted link [0, 4] again (a new attempt's file) and the next.
    again = write_link(catalog.tier, table, 0, 0, 4)
    following = write_link(catalog.tier, table, 0, 5, 9)
    result = committer.commit([again, following, *first])
    assert result.skipped == (again, first[0], first[1])
    assert result.added == (following.data_file.file_path,)
    assert offsets(catalog, 0) == list(range(10)) and offsets(catalog, 1) == list(range(5))
    nothing = committer.commit([again, following])
    assert nothing.snapshot_id is None and len(nothing.skipped) == 2
    assert catalog.latest_version(IDENT) == 3


@pytest.mark.parametrize(("link", "starts", "message"), [
    ((12, 15), {}, r"partition 0: file \[12, 15\] leaves a gap: the table covers \[0, 10\)"),
    ((8, 15), {}, r"partition 0: file \[8, 15\] leaves an overlap"),
])
def test_a_file_that_does_not_continue_the_coverage_is_refused(catalog, committer, link,
                                                               starts, message) -> None:
    table = table_of(catalog)
    committer.commit([write_link(catalog.tier, table, 0, 0, 9)], starts={0: 0})
    fine = write_link(catalog.tier, table, 1, 0, 3)
    bad = write_link(catalog.tier, table, 0, *link)
    with pytest.raises(TableChainError, match=message):
        committer.commit([fine, bad], starts={1: 0, **starts})
    assert catalog.latest_version(IDENT) == 2  # nothing of the call committed
    assert coverage_of(catalog).covered == {0: 10}


def test_a_partition_not_covered_yet_starts_where_the_caller_says(catalog, committer) -> None:
    table = table_of(catalog)
    link = write_link(catalog.tier, table, 0, 100, 109, offsets=range(104, 110))
    with pytest.raises(TableChainError, match="covers nothing of it and no start offset"):
        committer.commit([link])
    with pytest.raises(TableChainError, match=r"file \[100, 109\] leaves a gap"):
        committer.commit([link], starts={0: 110})  # past the first file
    with pytest.raises(TableChainError, match=r"file \[100, 109\] leaves a gap"):
        committer.commit([link], starts={0: 90})
    # The log start offset 104 inside the first link: its file holds the rows from there.
    committer.commit([link], starts={0: 104})
    assert coverage_of(catalog) == Coverage({0: 110}, {0: 104})
    assert offsets(catalog, 0) == list(range(104, 110))


def test_a_committer_that_lost_the_race_recomputes_on_the_winner(tmp_path, catalog,
                                                                 committer) -> None:
    table = table_of(catalog)
    committer.commit([write_link(catalog.tier, table, 0, 0, 4)], starts={0: 0})
    racing_catalog, fs = interleaved(catalog)
    backoffs: list[int] = []
    racing = TableCommitter(racing_catalog, IDENT, backoff=backoffs.append)
    mine = write_link(catalog.tier, table, 1, 0, 6)
    theirs = write_link(catalog.tier, table, 0, 5, 9)
    fs.before_commit = lambda: committer.commit([theirs])  # lands between
    result = racing.commit([mine], starts={1: 0})
    assert result.conflicts == 1 and backoffs == [1]
    assert result.added == (mine.data_file.file_path,)  # the same file redone, not rewritten
    # The redo recomputed the summary on the winner's snapshot: partition 0's end kept.
    assert coverage_of(catalog) == result.coverage == Coverage({0: 10, 1: 7}, {0: 0, 1: 0})
    assert offsets(catalog, 0) == list(range(10)) and offsets(catalog, 1) == list(range(7))
    assert catalog.latest_version(IDENT) == 4


def test_two_committers_of_the_same_link_commit_it_once(tmp_path, catalog, committer) -> None:
    table = table_of(catalog)
    racing_catalog, fs = interleaved(catalog)
    racing = TableCommitter(racing_catalog, IDENT, backoff=no_backoff)
    mine, theirs = (write_link(catalog.tier, table, 0, 0, 9) for _ in range(2))
    fs.before_commit = lambda: committer.commit([theirs], starts={0: 0})
    result = racing.commit([mine], starts={0: 0})
    assert result.conflicts == 1 and result.snapshot_id is None and result.skipped == (mine,)
    assert offsets(catalog, 0) == list(range(10))
    assert [f.data_file.file_path for f in current_files(table_of(catalog))] == [
        theirs.data_file.file_path]


def test_a_committer_losing_every_attempt_gives_up_and_the_next_call_lands(
        tmp_path, catalog, committer) -> None:
    table = table_of(catalog)
    committer.commit([write_link(catalog.tier, table, 0, 0, 0)], starts={0: 0})
    racing_catalog, fs = interleaved(catalog)
    racing = TableCommitter(racing_catalog, IDENT, max_attempts=3, backoff=no_backoff)
    next_offset = iter(range(1, 100))

    def another_commit() -> None:
        n = next(next_offset)
        committer.commit([write_link(catalog.tier, table, 0, n, n)])

    fs.before_commit, fs.times = another_commit, 3
    mine = write_link(catalog.tier, table, 1, 0, 4)
    with pytest.raises(TableCommitConflictError, match=r"lost 3 attempts"):
        racing.commit([mine], starts={1: 0})
    assert racing.commit([mine], starts={1: 0}).conflicts == 0
    assert coverage_of(catalog).covered == {0: 4, 1: 5}


class LostResponseS3(s3fs.S3FileSystem):  # type: ignore[misc]
    """s3fs whose exclusive create of a path containing ``lose`` lands, then times out."""

    lose: str | None = None

    def pipe_file(self, path: str, value: bytes, mode: str = "overwrite", **kwargs: Any
                  ) -> Any:
        out = super().pipe_file(path, value, mode=mode, **kwargs)
        if mode == "create" and self.lose and self.lose in path:
            self.lose = None
            raise TimeoutError(f"response to the PUT of {path} lost")
        return out


def test_a_lost_response_is_reloaded_and_found_committed(s3_endpoint, s3_options) -> None:
    fs = LostResponseS3(key=S3_ACCESS_KEY, secret=S3_SECRET, endpoint_url=s3_endpoint,
                        client_kwargs={"region_name": S3_REGION}, skip_instance_cache=True)
    tier = RemoteTier(fs, f"{S3_BUCKET}/commit-{uuid.uuid4().hex[:12]}")
    catalog = TierCatalog(tier)
    table = create_table(catalog)
    committer = TableCommitter(catalog, IDENT, backoff=no_backoff)
    ready = [write_link(tier, table, 0, 0, 4), write_link(tier, table, 1, 0, 2)]
    fs.lose = "v2.metadata.json"
    result = committer.commit(ready, starts={0: 0, 1: 0})
    # The create landed, its answer was lost: the reload finds both files covered.
    assert result.conflicts == 1 and result.skipped == tuple(ready)
    assert catalog.latest_version(IDENT) == 2
    assert offsets(catalog, 0) == list(range(5)) and offsets(catalog, 1) == list(range(3))
    assert_current_files_exist(catalog)


def committed(catalog: TierCatalog, committer: TableCommitter,
              spans: list[tuple[int, int]], partition: int = 0) -> list[ReadyFile]:
    table = table_of(catalog)
    files = [write_link(catalog.tier, table, partition, a, b) for a, b in spans]
    committer.commit(files, starts={partition: spans[0][0]})
    return files


def test_retention_drops_the_files_below_the_new_start(catalog, committer) -> None:
    committed(catalog, committer, [(0, 9), (10, 19), (20, 29)])
    committed(catalog, committer, [(0, 4)], partition=1)
    result = committer.apply_start(0, 20)  # remote retention deleted the first two segments
    assert len(result.removed) == 2 and result.added == ()
    assert coverage_of(catalog) == Coverage({0: 30, 1: 5}, {0: 20, 1: 0})
    assert links(catalog, 0) == [(20, 29)] and offsets(catalog, 0) == list(range(20, 30))
    assert offsets(catalog, 1) == list(range(5))
    assert committer.apply_start(0, 20).snapshot_id is None  # applied already
    assert table_of(catalog).current_snapshot().summary.operation.value == "overwrite"


def test_a_log_start_inside_a_link_replaces_its_file(catalog, committer) -> None:
    committed(catalog, committer, [(0, 9), (10, 19), (20, 29)])
    rewrite = write_link(catalog.tier, table_of(catalog), 0, 15, 19)
    result = committer.apply_start(0, 15, rewritten=rewrite)
    assert len(result.removed) == 2 and result.added == (rewrite.data_file.file_path,)
    assert links(catalog, 0) == [(15, 19), (20, 29)]
    assert offsets(catalog, 0) == list(range(15, 30))
    assert coverage_of(catalog) == Coverage({0: 30}, {0: 15})
    # Without a rewrite the straddling file stays (readers filter by the start).
    committer.apply_start(0, 22)
    assert links(catalog, 0) == [(20, 29)] and coverage_of(catalog) == Coverage({0: 30}, {0: 22})
    wrong = write_link(catalog.tier, table_of(catalog), 0, 25, 28)
    with pytest.raises(TableChainError, match=r"does not end where the link holding 25"):
        committer.apply_start(0, 25, rewritten=wrong)


def test_a_log_start_past_the_covered_end_continues_from_there(catalog, committer) -> None:
    committed(catalog, committer, [(0, 9)])
    committer.apply_start(0, 15)  # DeleteRecords beyond what the table holds yet
    assert coverage_of(catalog) == Coverage({0: 15}, {0: 15}) and links(catalog, 0) == []
    table = table_of(catalog)
    straddling = write_link(catalog.tier, table, 0, 10, 19, offsets=range(15, 20))
    committer.commit([straddling])
    assert offsets(catalog, 0) == list(range(15, 20))
    with pytest.raises(TableChainError, match="overlap"):  # the table holds [15, 20) now
        committer.commit([write_link(catalog.tier, table, 0, 18, 25)])


def test_a_restore_cut_drops_the_files_at_and_above_it(catalog, committer) -> None:
    committed(catalog, committer, [(0, 9), (10, 19), (20, 29)])
    prefix = write_link(catalog.tier, table_of(catalog), 0, 10, 14)
    result = committer.cut(0, 15, prefix=prefix)
    assert len(result.removed) == 2 and result.added == (prefix.data_file.file_path,)
    assert coverage_of(catalog).covered == {0: 15} and links(catalog, 0) == [(0, 9), (10, 14)]
    assert offsets(catalog, 0) == list(range(15))
    wrong = write_link(catalog.tier, table_of(catalog), 0, 12, 13)
    with pytest.raises(TableChainError, match=r"does not start where the link cut at 14"):
        committer.cut(0, 14, prefix=wrong)
    # A stale former owner's next link no longer continues the table: refused.
    with pytest.raises(TableChainError, match=r"file \[30, 39\] leaves a gap"):
        committer.commit([write_link(catalog.tier, table_of(catalog), 0, 30, 39)])
    # Without the prefix the cut link goes whole; tiering converts its prefix again.
    committer.cut(0, 12)
    assert coverage_of(catalog).covered == {0: 10} and links(catalog, 0) == [(0, 9)]
    assert committer.cut(0, 50).snapshot_id is None
    committer.apply_start(0, 5)
    with pytest.raises(TableCoverageError, match="below the table's start 5"):
        committer.cut(0, 3)
    assert_current_files_exist(catalog)


def test_a_repair_replaces_a_links_file_or_adds_a_missing_one(catalog, committer) -> None:
    old = committed(catalog, committer, [(0, 9), (10, 19), (20, 29)])
    table = table_of(catalog)
    # A file lost from the table (what scrub finds): the snapshot no longer names link 2.
    tx = table.transaction()
    with tx.update_snapshot(snapshot_properties=coverage_of(catalog).summary()).overwrite() as ow:
        ow.delete_data_file(next(f.data_file for f in current_files(table)
                                 if f.first_offset == 10))
    tx.commit_transaction()
    assert links(catalog, 0) == [(0, 9), (20, 29)]
    again = [write_link(catalog.tier, table, 0, 0, 9), write_link(catalog.tier, table, 0, 10, 19)]
    result = committer.repair([*again, old[2]])
    assert result.removed == (old[0].data_file.file_path,)
    assert set(result.added) == {f.data_file.file_path for f in again}
    assert result.skipped == (old[2],)  # the table's file already
    assert links(catalog, 0) == [(0, 9), (10, 19), (20, 29)]
    assert offsets(catalog, 0) == list(range(30))
    assert coverage_of(catalog) == Coverage({0: 30}, {0: 0})  # a repair moves no coverage
    with pytest.raises(TableChainError, match=r"\[25, 34\] is not within the offsets"):
        committer.repair([write_link(catalog.tier, table, 0, 25, 34)])
    with pytest.raises(TableChainError, match=r"overlaps the table's files \[0, 9\], \[10, 19\]"):
        committer.repair([write_link(catalog.tier, table, 0, 5, 14)])
    with pytest.raises(TableChainError, match="of one repair overlap"):
        committer.repair([write_link(catalog.tier, table, 0, 0, 9), old[0]])
