"""The kill test (issue 23): a spawned process converting and committing links is SIGKILLed
at each step of a commit (after the file PUT, after the manifests, after the manifest list,
after the ``v<N+1>`` create before the hint, after the hint). A restart then commits the rest:
every row is in the table exactly once, no committed file is missing, and the sweep removes
the killed attempt's orphans (and nothing the table reads)."""

from __future__ import annotations

import multiprocessing
import signal
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

import fsspec
import pyarrow.compute as pc
import pytest
from support.clock import FakeClock
from support.table_files import IDENT, create_table
from support.table_kill import (
    COMPACT_KILL_POINTS,
    KILL_POINTS,
    LANDED,
    LINKS,
    PARTITIONS,
    ROWS,
    run,
    run_compaction,
)

from tierlog.common.clock import system_time_ms
from tierlog.remote.table.catalog import TierCatalog
from tierlog.remote.table.commit import current_files
from tierlog.remote.table.coverage import Coverage
from tierlog.remote.table.maintenance import TableMaintenance
from tierlog.remote.tier.object_store import RemoteTier

GRACE_MS = 60_000


def _spawn_killed(tmp_path_factory: pytest.TempPathFactory, target: Callable[..., None],
                  points: Iterable[str], label: str) -> dict[str, str]:
    """One tier per kill point, each with a table whose process running ``target`` was
    SIGKILLed there: all spawned at once (each pays the interpreter's start), then awaited."""
    context = multiprocessing.get_context("spawn")  # fork hangs once pyarrow is loaded
    roots: dict[str, str] = {}
    processes = []
    for point in points:
        root = str(tmp_path_factory.mktemp(f"{label}-{point}") / "tier")
        create_table(TierCatalog(RemoteTier(fsspec.filesystem("file"), root)))
        process = context.Process(target=target, args=(root, point))
        process.start()
        processes.append((point, process))
        roots[point] = root
    for point, process in processes:
        process.join(timeout=120)
        assert process.exitcode == -signal.SIGKILL, (point, process.exitcode)
    return roots


@pytest.fixture(scope="module")
def killed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """A tier per kill point of a commit of links."""
    yield _spawn_killed(tmp_path_factory, run, KILL_POINTS, "kill")


@pytest.fixture(scope="module")
def killed_compactions(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """A tier per kill point of a compaction."""
    yield _spawn_killed(tmp_path_factory, run_compaction, COMPACT_KILL_POINTS, "compact")


def on_disk(root: str) -> set[str]:
    return {str(p) for p in Path(root).rglob("*") if p.is_file()}


def assert_whole(catalog: TierCatalog, covered: int) -> None:
    """Each partition holds offsets [0, covered) exactly once, every file it names exists."""
    table = catalog.load_table(IDENT)
    assert Coverage.of_snapshot(table.current_snapshot(), IDENT[1]) == Coverage(
        dict.fromkeys(PARTITIONS, covered), dict.fromkeys(PARTITIONS, 0))
    data = table.scan().to_arrow()
    for p in PARTITIONS:
        offsets = data.filter(pc.equal(data["partition"], p))["offset"].to_pylist()
        assert sorted(offsets) == list(range(covered)), p
    for f in current_files(table):
        assert Path(f.data_file.file_path).is_file(), f.data_file.file_path


@pytest.mark.parametrize("point", KILL_POINTS)
def test_a_commit_killed_at_any_step_leaves_every_row_once_after_a_restart(killed, point
                                                                          ) -> None:
    root = killed[point]
    catalog = TierCatalog(RemoteTier(fsspec.filesystem("file"), root))
    # The first commit landed; the second did exactly when its version was created.
    assert_whole(catalog, 2 * ROWS if point in LANDED else ROWS)
    files_before = on_disk(root)

    run(root)  # the restart, in this process: the same code, no kill point
    assert_whole(catalog, LINKS * ROWS)

    # The killed attempt's leftovers are orphans: unreferenced, and swept past the grace.
    clock = FakeClock(system_time_ms())
    maintenance = TableMaintenance(catalog.tier, catalog, IDENT, orphan_grace_ms=GRACE_MS,
                                   time_ms=clock)
    assert maintenance.run().deleted == ()  # young: a writer may still commit them
    clock.advance(GRACE_MS + 1_000)
    report = maintenance.run()
    names = {Path(p).name.rsplit("-", 1)[0] if p.endswith(".parquet") else Path(p).suffix
             for p in report.deleted}
    if point in LANDED:
        assert report.deleted == ()
    else:
        orphans = {p for p in files_before if "/data/" in p} - {
            f.data_file.file_path for f in current_files(catalog.load_table(IDENT))}
        assert orphans and orphans <= set(report.deleted)
        assert (".avro" in names) == (point != "file")
    assert_whole(catalog, LINKS * ROWS)
    table = catalog.load_table(IDENT)
    assert {p for p in on_disk(root) if "/data/" in p} == {
        f.data_file.file_path for f in current_files(table)}


@pytest.mark.parametrize("point", COMPACT_KILL_POINTS)
def test_a_compaction_killed_at_any_step_leaves_every_row_once_after_a_restart(
        killed_compactions: dict[str, str], point: str) -> None:
    root = killed_compactions[point]
    catalog = TierCatalog(RemoteTier(fsspec.filesystem("file"), root))
    # Each partition holds either all its link files or its run file: never both, never
    # neither; the first partition's run is there exactly when its version was created.
    for p in PARTITIONS:
        files = current_files(catalog.load_table(IDENT), p)
        merged = p == PARTITIONS[0] and point in LANDED
        assert [f.is_run for f in files] == ([True] if merged else [False] * LINKS), (p, files)
    assert_whole(catalog, LINKS * ROWS)

    run_compaction(root)  # the restart: the links are covered; compaction finishes
    table = catalog.load_table(IDENT)
    assert [f.is_run for f in current_files(table)] == [True] * len(PARTITIONS)
    assert_whole(catalog, LINKS * ROWS)

    # Past the snapshots' retention and the grace, the replaced link files and the killed
    # attempt's leftovers are swept; nothing the table reads is.
    clock = FakeClock(system_time_ms())
    clock.advance(GRACE_MS + 1_000)
    TableMaintenance(catalog.tier, catalog, IDENT, snapshot_retention_ms=0,
                     orphan_grace_ms=GRACE_MS, keep_versions=1, time_ms=clock).run()
    assert_whole(catalog, LINKS * ROWS)
    assert {p for p in on_disk(root) if "/data/" in p} == {
        f.data_file.file_path for f in current_files(catalog.load_table(IDENT))}
