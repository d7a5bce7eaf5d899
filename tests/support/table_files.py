"""A topic's table and its links as data files, for the committer's and maintenance's tests:
a link's rows (the table's own schema) written as a Parquet file under the link's name,
published to the tier, with its DataFile built from the writer's footer as the conversion of a
segment builds it (no re-read). Rows are made up, no segment is decoded: these tests are about
commits, not conversion."""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from fsspec.implementations.local import LocalFileSystem
from pyiceberg.catalog import Catalog
from pyiceberg.table import Table

from tierlog.remote.table.catalog import TierCatalog
from tierlog.remote.table.commit import ReadyFile
from tierlog.remote.table.convert import data_file
from tierlog.remote.table.coverage import Coverage
from tierlog.remote.table.naming import DataFileName
from tierlog.remote.table.schema import ARROW_SCHEMA, open_or_create_table, table_identifier
from tierlog.remote.tier.object_store import RemoteTier

TOPIC, TOPIC_ID = "clicks", "q0Vs7vGvSZ6ljmj-ZmXC1A"
IDENT = table_identifier(TOPIC, TOPIC_ID)
T0 = datetime(2026, 1, 1, tzinfo=UTC)


def no_backoff(attempt: int) -> None:
    """A committer's backoff that never sleeps (tests)."""


def table_of(catalog: Catalog) -> Table:
    """The test table, freshly loaded."""
    return catalog.load_table(IDENT)


def coverage_of(catalog: Catalog) -> Coverage:
    """The test table's coverage as its current snapshot records it."""
    return Coverage.of_snapshot(table_of(catalog).current_snapshot(), IDENT[1])


def create_table(catalog: Catalog, topic_id: str = TOPIC_ID) -> Table:
    """The topic's table, as tiering creates it."""
    return open_or_create_table(catalog, TOPIC, topic_id)


def rows(partition: int, offsets: Sequence[int]) -> pa.Table:
    """Records at ``offsets`` of ``partition``, as table rows (none aborted)."""
    n = len(offsets)
    return pa.table({
        "key": [b"k%d" % o for o in offsets], "value": [b"v%d" % o for o in offsets],
        "topic": [TOPIC] * n, "partition": pa.array([partition] * n, pa.int32()),
        "offset": pa.array(offsets, pa.int64()),
        "timestamp": pa.array([T0] * n, pa.timestamp("us", tz="UTC")),
        "timestampType": pa.array([0] * n, pa.int32()), "headers": [None] * n,
        "aborted": [False] * n}).cast(ARROW_SCHEMA)


def write_link(tier: RemoteTier, table: Table, partition: int, first: int, last: int, *,
               offsets: Sequence[int] | None = None, segment_id: str = "seg") -> ReadyFile:
    """The link ``[first, last]`` of ``partition`` as a published file: rows at ``offsets``
    (all of the link by default; ``[]`` for a link with no data rows)."""
    offsets = list(range(first, last + 1)) if offsets is None else list(offsets)
    name = DataFileName.new(partition, first, last, segment_id)
    location = f"{table.location().rstrip('/')}/{name.key}"
    with tempfile.TemporaryDirectory() as tmp:
        local = Path(tmp) / name.name
        footers: list[pq.FileMetaData] = []
        pq.write_table(rows(partition, offsets), local, store_schema=False,
                       metadata_collector=footers)
        tier.put_file(local, str(tier.fs._strip_protocol(location)))
        size = local.stat().st_size
    return ReadyFile(partition, first, last,
                     data_file(table, location, footers[0], size, partition))


class InterleavedFS(LocalFileSystem):  # type: ignore[misc]
    """A local filesystem that runs ``before_commit`` (up to ``times`` times) when a committer
    has published a commit's manifest list, before it creates the next metadata version: the
    point where another process's commit lands in between. Not cached: its hook is per test."""

    cachable = False
    before_commit: Callable[[], None] | None = None
    times: int = 1

    def mv(self, path1: str, path2: str, **kwargs: Any) -> None:
        super().mv(path1, path2, **kwargs)
        if self.before_commit and "/metadata/snap-" in path2 and self.times > 0:
            self.times -= 1
            self.before_commit()


def interleaved(catalog: TierCatalog) -> tuple[TierCatalog, InterleavedFS]:
    """A second catalog of ``catalog``'s tier whose commits run the returned filesystem's
    ``before_commit`` hook (another writer's commit) just before they land."""
    fs = InterleavedFS()
    return TierCatalog(RemoteTier(fs, catalog.tier.root)), fs
