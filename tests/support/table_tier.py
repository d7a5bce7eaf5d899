"""Test helper: support.tier_builder's tier (real Logs, every codec, headers, committed and aborted
transactions spanning segments, LogAppendTime) WITH each topic's Iceberg table: every committed
chain link below the tier's last stable offset converted with ``convert_link`` and committed
with ``TableCommitter``, as the tiering run's table step does. Options leave the last links of
each partition uncovered (reads then need the table and a tail of segments), move a
partition's log start offset (DeleteRecords: the tier's manifest and the table's start) and
cut a partition's table (a restore). ``TableTier.expected`` says which records a reader must
return, derived from ``Log.read`` (support.tier_builder), never from the reader.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from pyiceberg.table import Table

from support.tier_builder import BuiltTier, build_tier
from tierlog import Record
from tierlog.remote import FsspecRemoteStorageManager, RemoteLogMetadataManager, TopicIdPartition
from tierlog.remote.read.readable import segment_chain
from tierlog.remote.read.transactions import aborted_txns, last_stable_offset
from tierlog.remote.table.catalog import TierCatalog
from tierlog.remote.table.commit import (
    CommitResult,
    CurrentFile,
    ReadyFile,
    TableCommitter,
    current_files,
)
from tierlog.remote.table.convert import TableFile, convert_link
from tierlog.remote.table.schema import open_or_create_table, table_identifier
from tierlog.remote.table.unmerge import unmerge_straddling
from tierlog.remote.tier.object_store import RemoteTier


@dataclass
class TableTier:
    """A built tier, its tables' catalog, the files committed per ``(topic, partition)`` and the
    log start offsets moved since (``apply_log_start``)."""

    built: BuiltTier
    catalog: TierCatalog
    files: dict[tuple[str, int], list[TableFile]]
    log_starts: dict[tuple[str, int], int] = field(default_factory=dict)

    @property
    def tier(self) -> RemoteTier:
        return self.built.rsm.tier

    @property
    def url(self) -> str:
        return self.built.url

    def tip(self, topic: str, partition: int) -> TopicIdPartition:
        return self.built.partitions[(topic, partition)].tip

    def topic_id(self, topic: str) -> str:
        return next(tp.tip.topic_id for (t, _), tp in self.built.partitions.items() if t == topic)

    def identifier(self, topic: str) -> tuple[str, str]:
        return table_identifier(topic, self.topic_id(topic))

    def table(self, topic: str) -> Table:
        """The topic's table, freshly loaded."""
        return self.catalog.load_table(self.identifier(topic))

    def committer(self, topic: str) -> TableCommitter:
        return TableCommitter(self.catalog, self.identifier(topic), backoff=lambda _: None)

    def partitions(self, topic: str) -> list[int]:
        return sorted(p for t, p in self.built.partitions if t == topic)

    def covered(self, topic: str, partition: int) -> int:
        """One past the last offset the partition's committed files hold (its first link's
        start when none)."""
        files = self.current(topic, partition)
        return files[-1].last_offset + 1 if files else self.tier_start(topic, partition)

    def current(self, topic: str, partition: int) -> list[CurrentFile]:
        """The partition's files in the table's current snapshot (link or run files)."""
        return current_files(self.table(topic), partition)

    def tier_start(self, topic: str, partition: int) -> int:
        """The partition's log start offset in the tier."""
        chain = segment_chain(self.tier, self.tip(topic, partition))
        return chain[0].first_offset if chain else 0

    def tier_end(self, topic: str, partition: int) -> int:
        """One past the last offset in the tier."""
        return self.built.partitions[(topic, partition)].tier_end

    def expected(self, topic: str, isolation: str,
                 partitions: Sequence[int] | None = None) -> list[tuple[int, Record]]:
        """``(partition, record)`` pairs a reader of the whole tier returns at ``isolation``
        (``Log.read``'s records below the tier's end, and its last stable offset under
        read_committed), from each partition's log start offset on."""
        return [(p, r) for p, r in self.built.expected(topic, isolation, partitions)
                if r.offset >= self.log_starts.get((topic, p), 0)]


def convert_partition(tier: RemoteTier, table: Table, tip: TopicIdPartition, *,
                      skip_last: int = 0, log_start_offset: int = 0) -> list[TableFile]:
    """Every link of the partition's chain below the tier's last stable offset, converted
    (the last ``skip_last`` of them left out)."""
    chain = segment_chain(tier, tip)
    stable = last_stable_offset(tier, tip, chain)
    links = [link for link in chain if link.last_offset < stable]
    links = links[:max(0, len(links) - skip_last)]
    return [convert_link(tier, table, tip, link, log_start_offset=log_start_offset,
                         aborted_txns=aborted_txns(tier, chain, link.first_offset,
                                                   link.last_offset + 1))
            for link in links]


def ready(file: TableFile) -> ReadyFile:
    return ReadyFile(file.partition, file.first_offset, file.last_offset, file.data_file)


def build_table_tier(tmp_path: Path, rsm: FsspecRemoteStorageManager, url: str, *,
                     uncovered_links: int = 0, rounds: int = 6,
                     topics: Sequence[str] = ("orders", "clicks")) -> TableTier:
    """support.tier_builder's tier at ``url`` with the table of each of ``topics``: each
    partition's links below the tier's last stable offset converted and committed in one
    snapshot per topic, but for the last ``uncovered_links`` of each partition."""
    built = build_tier(tmp_path, rsm, url, rounds=rounds)
    tt = TableTier(built, TierCatalog(rsm.tier), {})
    for topic in topics:
        table = open_or_create_table(tt.catalog, topic, tt.topic_id(topic))
        files: list[TableFile] = []
        starts: dict[int, int] = {}
        for p in tt.partitions(topic):
            converted = convert_partition(tt.tier, table, tt.tip(topic, p),
                                          skip_last=uncovered_links)
            tt.files[(topic, p)] = converted
            files += converted
            starts[p] = tt.tier_start(topic, p)
        tt.committer(topic).commit([ready(f) for f in files], starts=starts)
    return tt


def apply_log_start(tt: TableTier, topic: str, partition: int, offset: int) -> CommitResult:
    """DeleteRecords up to ``offset``: the tier records the partition's log start offset (as
    the tiering run does) and the table applies it (files wholly below it removed; a file
    straddling it stays, its rows below the start filtered by readers; a run file straddling
    it is unmerged first, as the tiering step does)."""
    RemoteLogMetadataManager(tt.tier).update_log_start_offset(tt.tip(topic, partition), offset)
    unmerge_straddling(tt.tier, tt.committer(topic), tt.tip(topic, partition), offset)
    tt.log_starts[(topic, partition)] = max(offset, tt.log_starts.get((topic, partition), 0))
    result = tt.committer(topic).apply_start(partition, offset)
    tt.files[(topic, partition)] = [f for f in tt.files[(topic, partition)]
                                    if f.last_offset >= offset]
    return result


def cut_table(tt: TableTier, topic: str, partition: int, offset: int) -> CommitResult:
    """A restore's cut of the partition's table at ``offset`` (no prefix file: the link
    straddling it goes whole; a run file straddling it is unmerged first, as a restore does).
    The tier's segments stay, so a reader's tail serves the rest and returns the same
    records."""
    unmerge_straddling(tt.tier, tt.committer(topic), tt.tip(topic, partition), offset)
    result = tt.committer(topic).cut(partition, offset)
    tt.files[(topic, partition)] = [f for f in tt.files[(topic, partition)]
                                    if f.path not in result.removed]
    return result


def compact(tt: TableTier, topic: str) -> None:
    """Merge each partition's files into run files (the smallest target and no bound on links:
    one run per partition, but for a first file holding rows below the start)."""
    from tierlog.remote.table.compact import compact_table

    report = compact_table(tt.tier, topic, catalog=tt.catalog, target_bytes=1 << 20,
                           max_links=1000)
    assert report.runs and not report.stale, report


__all__ = ["TableTier", "apply_log_start", "build_table_tier", "compact", "convert_partition",
           "cut_table", "ready"]
