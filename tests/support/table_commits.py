"""A small topic table for the catalog's tests, and the commit loop they drive it with (the
design's loop, §3.3, until tierlog.remote.table has its committer): load, skip what the table
already covers, append the rows and move the coverage in the same snapshot, reload and redo on a
conflict. Also the worker of the two-process race (imported by spawned processes)."""

from __future__ import annotations

import multiprocessing.queues
import multiprocessing.synchronize

import fsspec
import pyarrow as pa
from pyiceberg.exceptions import CommitFailedException, CommitStateUnknownException
from pyiceberg.partitioning import PartitionField, PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.transforms import IdentityTransform
from pyiceberg.types import IntegerType, LongType, NestedField

from tierlog.remote.table.catalog import TierCatalog
from tierlog.remote.table.coverage import Coverage
from tierlog.remote.tier.object_store import RemoteTier

IDENT = ("tierlog", "clicks-q0Vs7vGvSZ6ljmj-ZmXC1A")
SCHEMA = Schema(NestedField(1, "partition", IntegerType(), required=True),
                NestedField(2, "offset", LongType(), required=True))
SPEC = PartitionSpec(PartitionField(source_id=1, field_id=1000, transform=IdentityTransform(),
                                    name="partition"))
MAX_ATTEMPTS = 200


def rows(partition: int, start: int, count: int) -> pa.Table:
    return pa.table({"partition": pa.array([partition] * count, pa.int32()),
                     "offset": pa.array(range(start, start + count), pa.int64())},
                    schema=SCHEMA.as_arrow())


def commit_rows(catalog: TierCatalog, partition: int, start: int, count: int) -> int:
    """Commit offsets [start, start+count) of ``partition`` exactly once; the conflicts retried
    (a commit whose outcome was unknown reloads and finds out)."""
    for attempt in range(MAX_ATTEMPTS):
        table = catalog.load_table(IDENT)
        coverage = Coverage.of_snapshot(table.current_snapshot(), IDENT[1])
        done = coverage.end(partition) or 0
        if done >= start + count:
            return attempt
        assert done == start, f"gap: p{partition} covered to {done}, commit starts {start}"
        try:
            table.append(rows(partition, start, count),
                         snapshot_properties=coverage.advanced(partition, start + count).summary())
        except (CommitFailedException, CommitStateUnknownException):
            continue
        return attempt
    raise AssertionError(f"p{partition} [{start}, {start + count}): no commit in "
                         f"{MAX_ATTEMPTS} attempts")


def race_worker(root: str, partition: int, commits: int, count: int,
                go: multiprocessing.synchronize.Event,
                out: multiprocessing.queues.Queue[tuple[int, int | str]]) -> None:
    """One process of the race: ``commits`` commits of ``count`` rows to ``partition``, once
    ``go`` is set; puts (partition, conflicts retried) or (partition, the error) on ``out``."""
    catalog = TierCatalog(RemoteTier(fsspec.filesystem("file"), root))
    go.wait(60)
    try:
        conflicts = sum(commit_rows(catalog, partition, i * count, count)
                        for i in range(commits))
        out.put((partition, conflicts))
    except Exception as e:  # noqa: BLE001 - any failure goes to the test, which fails on it
        out.put((partition, repr(e)))
