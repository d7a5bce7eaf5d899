"""Unmerging a run file (tierlog.remote.table.unmerge): its links converted again from their
segments replace it in one snapshot, with the same rows and coverage; a run whose footer lists
a segment the tier's chain does not hold is refused naming it, and nothing is committed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from support.table_runs import merge, tamper
from support.table_tier import TableTier, build_table_tier

from tierlog.errors import TableChainError
from tierlog.plugins.local import create_remote_storage
from tierlog.remote.table.commit import current_files
from tierlog.remote.table.coverage import Coverage
from tierlog.remote.table.run_links import KV_LINKS
from tierlog.remote.table.unmerge import unmerge, unmerge_links, unmerge_straddling

TOPIC = "orders"


@pytest.fixture
def tt(tmp_path: Path) -> TableTier:
    url = (tmp_path / "tier").as_uri()
    return build_table_tier(tmp_path, create_remote_storage(url, {"fsync": False}), url,
                            rounds=3, topics=(TOPIC,))


def rows(tt: TableTier) -> list[tuple[int, int, bytes, bool]]:
    table = tt.table(TOPIC).scan(selected_fields=("partition", "offset", "key", "aborted"))
    return sorted((r["partition"], r["offset"], r["key"], r["aborted"])
                  for r in table.to_arrow().to_pylist())


def spans(tt: TableTier, partition: int) -> list[tuple[int, int, bool]]:
    return [(f.first_offset, f.last_offset, f.is_run)
            for f in current_files(tt.table(TOPIC), partition)]


def test_unmerging_a_run_gives_back_its_link_files_with_the_same_rows(tt: TableTier) -> None:
    tip, committer = tt.tip(TOPIC, 0), tt.committer(TOPIC)
    links = spans(tt, 0)
    assert len(links) >= 3
    before, coverage = rows(tt), Coverage.of_snapshot(tt.table(TOPIC).current_snapshot(), "t")
    run = merge(tt.tier, committer, tip)
    assert spans(tt, 0) == [(links[0][0], links[-1][1], True)] and rows(tt) == before

    result = unmerge(tt.tier, committer, tip, run, log_start_offset=0)
    assert result.removed == (run.data_file.file_path,) and len(result.added) == len(links)
    assert spans(tt, 0) == links
    assert rows(tt) == before
    assert Coverage.of_snapshot(tt.table(TOPIC).current_snapshot(), "t") == coverage


def test_unmerge_straddling_splits_only_a_run_the_offset_is_strictly_inside(
        tt: TableTier) -> None:
    tip, committer = tt.tip(TOPIC, 0), tt.committer(TOPIC)
    links = spans(tt, 0)
    merge(tt.tier, committer, tip, links[1][0], links[-1][1])
    # in a link file, at the run's start, past its end
    for outside in (links[0][1], links[1][0], links[-1][1] + 1):
        assert not unmerge_straddling(tt.tier, committer, tip, outside)
    assert len(spans(tt, 0)) == 2
    assert unmerge_straddling(tt.tier, committer, tip, links[2][0])
    assert spans(tt, 0) == links


def test_a_run_listing_a_segment_the_chain_does_not_hold_is_refused_naming_it(
        tt: TableTier) -> None:
    tip, committer = tt.tip(TOPIC, 0), tt.committer(TOPIC)

    def foreign(kv: dict[str, str]) -> dict[str, str]:
        listed = json.loads(kv[KV_LINKS])
        listed[1][0] = "gone-segment"
        return {**kv, KV_LINKS: json.dumps(listed)}

    run = tamper(tt.tier, committer, tip, merge(tt.tier, committer, tip), foreign)
    snapshot = tt.table(TOPIC).current_snapshot()
    with pytest.raises(TableChainError, match="segment gone-segment of offsets"):
        unmerge_links(tt.tier, tt.table(TOPIC), tip, run, log_start_offset=0)
    with pytest.raises(TableChainError, match="gone-segment"):
        unmerge(tt.tier, committer, tip, run, log_start_offset=0)
    assert tt.table(TOPIC).current_snapshot() == snapshot
    assert [f.data_file.file_path for f in current_files(tt.table(TOPIC), 0)] == [
        run.data_file.file_path]
