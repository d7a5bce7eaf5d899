"""Table compaction: ``TableCommitter.compact`` swaps a run file for its inputs in one overwrite
snapshot (coverage and rows unchanged), exactly once, redone after a tiering append and given up
(stale) when an input was replaced; ``merge_run`` writes the inputs' rows, row groups aligned to
the links, with the link list in the footer; ``plan_runs`` picks consecutive small files;
``compact_table`` leaves one file per partition and readers return the same records."""

from __future__ import annotations

import tempfile
from collections.abc import Sequence
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from pyiceberg.table import Table
from support.table_files import IDENT, interleaved, rows, write_link

from tierlog.errors import TableChainError, TableCompactionStaleError
from tierlog.remote.table.catalog import TierCatalog
from tierlog.remote.table.commit import (
    ReadyFile,
    RunFile,
    TableCommitter,
    current_files,
)
from tierlog.remote.table.convert import data_file
from tierlog.remote.table.coverage import Coverage
from tierlog.remote.table.naming import DataFileName

NAME = IDENT[1]


def no_backoff(attempt: int) -> None:
    """Tests never sleep between attempts."""


@pytest.fixture
def committer(catalog: TierCatalog) -> TableCommitter:
    return TableCommitter(catalog, IDENT, backoff=no_backoff)


def table_of(catalog: TierCatalog) -> Table:
    return catalog.load_table(IDENT)


def coverage(catalog: TierCatalog) -> Coverage:
    return Coverage.of_snapshot(table_of(catalog).current_snapshot(), NAME)


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
    before = coverage(catalog)
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
    assert coverage(catalog) == result.coverage == before
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
    assert coverage(catalog) == Coverage({0: 30}, {0: 0})  # the append's end kept
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
