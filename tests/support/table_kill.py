"""The committing process of the table kill test (run in a spawned process, and again in the
test's own to finish): it converts and commits the links of a toy topic one by one, as the
tiering step does, skipping what the table covers.

``run(root, kill_at)`` first makes the process SIGKILL itself right after the n-th tier write
of a commit's step (a deterministic point; nothing waits on time):

- ``file``: a link's Parquet file PUT, nothing of its commit written;
- ``manifest`` / ``manifest-list``: the commit's manifest / manifest list written;
- ``create``: ``v<N+1>.metadata.json`` created (the commit landed), the hint not updated;
- ``hint``: the hint updated, the commit's caller never told.

``run_compaction(root, kill_at)`` commits every link, then compacts each partition into one run
file, dying at the same points of the first partition's compaction (COMPACT_KILL_POINTS).
"""

from __future__ import annotations

import functools
import os
import signal
from typing import Any

import fsspec

from support.table_files import IDENT, TOPIC, TOPIC_ID, write_link
from tierlog.remote import TopicIdPartition
from tierlog.remote.table.catalog import TierCatalog
from tierlog.remote.table.commit import TableCommitter
from tierlog.remote.table.coverage import Coverage
from tierlog.remote.tier.object_store import RemoteTier

LINKS = 4
ROWS = 5
PARTITIONS = (0, 1)
#: point -> (the RemoteTier method, a part of the path it writes, the call to die after):
#: each commit writes both partitions' files, then one manifest, one list, one version.
KILL_POINTS: dict[str, tuple[str, str, int]] = {
    "file": ("put_file", "/data/", 3),  # the second commit's first file
    "manifest": ("put_bytes", "-m0.avro", 2),
    "manifest-list": ("put_bytes", "/snap-", 2),
    "create": ("put_if_absent", ".metadata.json", 2),
    "hint": ("put_bytes", "version-hint.text", 2),
}
#: The points where the second commit has landed when the process dies.
LANDED = ("create", "hint")


#: The same points in a compaction (the first partition's run): its run file's PUT, its
#: manifests, its manifest list, its version created, the hint.
COMPACT_KILL_POINTS: dict[str, tuple[str, str, int]] = {
    "file": ("put_file", "/data/", 1),
    "manifest": ("put_bytes", "-m0.avro", 1),
    "manifest-list": ("put_bytes", "/snap-", 1),
    "create": ("put_if_absent", ".metadata.json", 1),
    "hint": ("put_bytes", "version-hint.text", 1),
}


def _die_after(point: str, points: dict[str, tuple[str, str, int]] = KILL_POINTS) -> None:
    method, needle, nth = points[point]
    real = getattr(RemoteTier, method)
    calls = [0]

    @functools.wraps(real)
    def killing(self: RemoteTier, *args: Any, **kwargs: Any) -> Any:
        out = real(self, *args, **kwargs)
        if needle in str(args[-1]):
            calls[0] += 1
            if calls[0] == nth:
                os.kill(os.getpid(), signal.SIGKILL)
        return out

    setattr(RemoteTier, method, killing)


def run(root: str, kill_at: str | None = None) -> None:
    """Commit every link of both partitions not yet covered, one commit per link."""
    if kill_at is not None:
        _die_after(kill_at)
    tier = RemoteTier(fsspec.filesystem("file"), root)
    catalog = TierCatalog(tier)
    committer = TableCommitter(catalog, IDENT)
    for i in range(LINKS):
        first, last = i * ROWS, (i + 1) * ROWS - 1
        table = catalog.load_table(IDENT)
        coverage = Coverage.of_snapshot(table.current_snapshot(), IDENT[1])
        ready = [write_link(tier, table, p, first, last) for p in PARTITIONS
                 if (coverage.end(p) or 0) <= last]
        committer.commit(ready, starts=dict.fromkeys(PARTITIONS, 0))


def run_compaction(root: str, kill_at: str | None = None) -> None:
    """Commit every link (as :func:`run`, never killed), then compact each partition's files
    into one run file, dying at ``kill_at`` of the first partition's compaction."""
    from tierlog.remote.table.compact import compact_partition

    run(root)
    if kill_at is not None:
        _die_after(kill_at, COMPACT_KILL_POINTS)
    tier = RemoteTier(fsspec.filesystem("file"), root)
    committer = TableCommitter(TierCatalog(tier), IDENT)
    for p in PARTITIONS:
        report = compact_partition(tier, committer, TopicIdPartition(TOPIC_ID, TOPIC, p),
                                   target_bytes=1 << 20, max_links=LINKS)
        assert not report.stale, report
