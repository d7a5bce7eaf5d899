"""Building a topic's table from its tier: which chain links of a partition the table does not
cover yet, converting them, and ``build_table`` (``tierlog table build``), which converts a
whole topic's uncovered links and commits them in batches.

The one home of the per-partition rule (DESIGN §7-8) the tiering run's table step, the
backfill's update and the build share: a partition's links to convert are its committed chain
links whose last offset is at or above the table's ``covered[p]`` and below the tier's last
stable offset (every transaction outcome in them is then in the tier, so each row's
``aborted`` flag is final); a partition the table covers nothing of starts at its chain's first
offset. A link converts with the aborted transactions touching it, leaving out rows below the
tier's log start offset.

``build_table`` is resumable and exactly once because the table's coverage is its progress: it
commits every ``batch_links`` links or ``batch_bytes`` segment bytes (a kill loses at most one
batch of conversions, whose published files are orphans the table's sweep removes), a rerun
converts from the coverage it finds, and ``TableCommitter`` skips a file another writer (a
tiering run, a backfill, a second build) covered meanwhile.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

from pyiceberg.catalog import Catalog
from pyiceberg.table import Table

from tierlog.errors import TableChainError, UnknownTopicOrPartitionError
from tierlog.remote.api import TopicIdPartition
from tierlog.remote.metadata.metadata import RemoteLogMetadataManager
from tierlog.remote.read.readable import ChainLink, segment_chain
from tierlog.remote.read.transactions import aborted_txns, chain_end, last_stable_offset
from tierlog.remote.table.catalogs import open_topic_table, writer_catalog
from tierlog.remote.table.commit import CommitResult, CurrentFile, ReadyFile, TableCommitter
from tierlog.remote.table.convert import TableFile, convert_link
from tierlog.remote.table.coverage import Coverage
from tierlog.remote.table.schema import table_identifier
from tierlog.remote.tier.object_store import RemoteTier
from tierlog.remote.tier.topics import topic_partitions

log = logging.getLogger(__name__)

_T = TypeVar("_T")

#: A build commits after this many converted links, or ...
DEFAULT_BATCH_LINKS = 64
#: ... after this many bytes of segments converted, whichever comes first.
DEFAULT_BATCH_BYTES = 1 << 30


class Call(Protocol):
    """How a step runs one request against the tier: ``call(what, fn)`` returns ``fn()``
    (the tiering run bounds it by ``remote.storage.request.timeout.ms``; ``what`` names it in
    the error)."""

    def __call__(self, what: str, fn: Callable[[], _T], /) -> _T: ...


def direct_call(what: str, fn: Callable[[], _T], /) -> _T:
    """:class:`Call` with no bound: ``fn()``."""
    return fn()


@dataclass(frozen=True, slots=True)
class PartitionWork:
    """A partition's links the table does not cover yet, below the tier's last stable offset,
    in offset order."""

    tip: TopicIdPartition
    chain: Sequence[ChainLink]
    """The partition's whole committed chain (the aborted transactions are read from it)."""
    links: Sequence[ChainLink]
    """The links to convert."""
    start: int | None
    """The partition's start to record with its first file when the table covers nothing of
    it yet (its chain's first offset), else None."""

    @property
    def starts(self) -> dict[int, int]:
        """``TableCommitter.commit``'s ``starts`` for this partition."""
        return {} if self.start is None else {self.tip.partition: self.start}


def uncovered_links(tier: RemoteTier, tip: TopicIdPartition, covered: int | None, *,
                    call: Call = direct_call) -> PartitionWork:
    """The links of ``tip``'s chain in ``tier`` at or above ``covered`` (the table's covered
    end of the partition, None when it covers nothing of it) and below the tier's last stable
    offset."""
    chain = call(f"{tip}: read the segment chain", lambda: segment_chain(tier, tip))
    if not chain:
        return PartitionWork(tip, chain, (), None)
    stable = call(f"{tip}: read the tier's last stable offset",
                  lambda: last_stable_offset(tier, tip, chain))
    if stable < chain_end(chain):
        log.debug("%s: a transaction open at the tier's end stops the table at %d", tip, stable)
    links = [link for link in chain if link.last_offset < stable
             and (covered is None or link.last_offset >= covered)]
    return PartitionWork(tip, chain, links, chain[0].first_offset if covered is None else None)


def convert_ready(tier: RemoteTier, table: Table, work: PartitionWork, link: ChainLink, *,
                  log_start_offset: int, call: Call = direct_call) -> TableFile:
    """Convert and publish ``link`` of ``work``'s partition (not committed), with the aborted
    transactions touching it and without rows below ``log_start_offset``."""
    tip, span = work.tip, f"{link.first_offset}-{link.last_offset}"
    aborted = call(f"{tip}: read the aborted transactions of offsets {span}",
                   lambda: aborted_txns(tier, work.chain, link.first_offset,
                                        link.last_offset + 1))
    return call(f"{tip}: convert segment {span} to a table file",
                lambda: convert_link(tier, table, tip, link, aborted_txns=aborted,
                                     log_start_offset=log_start_offset))


def rewrite_from_start(tier: RemoteTier, table: Table, tip: TopicIdPartition,
                       straddling: CurrentFile, start: int, *,
                       call: Call = direct_call) -> ReadyFile:
    """The rewrite of ``straddling`` (a current file of ``tip`` whose link holds ``start``
    above its first offset) for ``TableCommitter.apply_start``: that link converted again
    without rows below ``start`` and published (not committed). Its name keeps the link's
    span; the ready file starts at ``start``. TableChainError when the tier's chain no longer
    holds that link."""
    chain = call(f"{tip}: read the segment chain", lambda: segment_chain(tier, tip))
    link = next((c for c in chain if c.first_offset <= start
                 and c.last_offset == straddling.last_offset), None)
    if link is None or not straddling.first_offset < start <= straddling.last_offset:
        raise TableChainError(
            f"partition {tip.partition}: the table file of offsets [{straddling.first_offset}, "
            f"{straddling.last_offset}] cannot be rewritten to start at {start}: "
            + ("the tier's chain holds no link ending there" if link is None
               else "it does not straddle that offset"))
    # The chain starts at the tier's log start offset; the file keeps its link's span.
    link = ChainLink(link.segment, straddling.first_offset, link.last_offset)
    written = convert_ready(tier, table, PartitionWork(tip, chain, (link,), None), link,
                            log_start_offset=start, call=call)
    return ReadyFile(written.partition, start, written.last_offset, written.data_file)


def ready_file(written: TableFile) -> ReadyFile:
    """The committer's view of a converted link."""
    return ReadyFile(written.partition, written.first_offset, written.last_offset,
                     written.data_file)


# -- the build -----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class LinkJob:
    """One link a build converts."""

    work: PartitionWork
    link: ChainLink
    log_start_offset: int
    """Rows below it are left out (the tier's log start offset, or the table's start)."""


#: How a build converts a batch of links: ``converter(table, jobs)`` yields each job's
#: published file, in the jobs' order (lazily or all at once: the build reports progress per
#: file and commits the batch once every file is in).
Converter = Callable[[Table, Sequence[LinkJob]], Iterable[TableFile]]


def _local_converter(tier: RemoteTier) -> Converter:
    """Convert in this process, one link after another."""
    def convert(table: Table, jobs: Sequence[LinkJob]) -> Iterable[TableFile]:
        return (convert_ready(tier, table, j.work, j.link, log_start_offset=j.log_start_offset)
                for j in jobs)
    return convert


@dataclass(frozen=True, slots=True)
class BuildProgress:
    """Where a build is, after each converted link (for a progress bar)."""

    tip: TopicIdPartition
    link: ChainLink
    links_done: int
    links_total: int
    bytes_done: int
    """Segment bytes converted so far."""
    bytes_total: int


@dataclass(slots=True)
class BuildReport:
    """What one ``build_table`` did."""

    table: str
    """The table's name (``tierlog.<topic>-<topicId>``)."""
    links: int = 0
    """Links converted (their files published)."""
    committed: int = 0
    """Files this build added to the table (a file another writer covered first is not)."""
    skipped: int = 0
    """Files converted but found covered at commit (orphans for the sweep)."""
    records: int = 0
    """Rows in the converted files."""
    segment_bytes: int = 0
    """Bytes of the segments converted."""
    commits: int = 0
    """Snapshots committed."""
    snapshot_id: int | None = None
    """The table's current snapshot after the build (None: it has none)."""
    covered: dict[int, int] = field(default_factory=dict)
    """Each partition's covered end after the build."""
    remaining: int = 0
    """Uncovered links left (a build stopped by ``max_links``)."""


def build_table(tier: RemoteTier | str, topic: str, *, topic_id: str | None = None,
                storage_options: Mapping[str, Any] | None = None,
                catalog: Catalog | None = None,
                progress: Callable[[BuildProgress], None] | None = None,
                batch_links: int = DEFAULT_BATCH_LINKS, batch_bytes: int = DEFAULT_BATCH_BYTES,
                max_links: int | None = None, converter: Converter | None = None
                ) -> BuildReport:
    """Open (or create) the table of ``topic`` in ``tier`` (a RemoteTier, or its URL with its
    ``storage_options``; the incarnation ``topic_id``, by default the newest) in ``catalog``
    (default: the tier's own ``TierCatalog``; TableCatalogRequiredError when a user's catalog
    owns the table, which only that catalog changes) and convert and commit every link of its
    partitions the table does not cover yet below the tier's last stable offset, committing
    every ``batch_links`` links or ``batch_bytes`` segment bytes.
    ``max_links`` stops after that many conversions (committed first); ``converter`` converts
    each batch (default: here, one link after another; ``tierlog.spark.convert_job`` runs them
    on Spark's executors). Resumable and exactly once (see the module docstring).
    UnknownTopicOrPartitionError when the tier holds no partition of the topic; a failed
    conversion or commit raises, the batches before it stay committed."""
    if batch_links < 1 or batch_bytes < 1:
        raise ValueError(f"batch_links and batch_bytes must be positive, got {batch_links} "
                         f"and {batch_bytes}")
    tier, tips = topic_in_tier(tier, topic, topic_id, storage_options)
    topic_id = tips[0].topic_id
    catalog = catalog if catalog is not None else writer_catalog(tier, topic, topic_id)
    table = open_topic_table(tier, catalog, topic, topic_id)
    name = ".".join(table.name())
    coverage = Coverage.of_snapshot(table.current_snapshot(), name)
    metadata = RemoteLogMetadataManager(tier)
    work = [uncovered_links(tier, tip, coverage.end(tip.partition)) for tip in tips]
    jobs = [LinkJob(w, link, max(metadata.log_start_offset(w.tip) or 0,
                                 coverage.start.get(w.tip.partition, 0)))
            for w in work for link in w.links]
    todo = jobs if max_links is None else jobs[:max(0, max_links)]
    report = BuildReport(name)
    bytes_total = sum(j.link.segment.segment_size_in_bytes for j in todo)
    committer = TableCommitter(catalog, table_identifier(topic, topic_id))
    convert = converter if converter is not None else _local_converter(tier)
    for batch in _batches(todo, batch_links, batch_bytes):
        pending: list[ReadyFile] = []
        starts: dict[int, int] = {}
        for job, written in zip(batch, convert(table, batch), strict=True):
            pending.append(ready_file(written))
            starts.update(job.work.starts)
            report.links += 1
            report.records += written.records
            report.segment_bytes += job.link.segment.segment_size_in_bytes
            if progress is not None:
                progress(BuildProgress(job.work.tip, job.link, report.links, len(todo),
                                       report.segment_bytes, bytes_total))
        _commit(committer, pending, starts, report)
    report.remaining = len(jobs) - report.links
    final = catalog.load_table(committer.identifier).current_snapshot()
    report.snapshot_id = None if final is None else final.snapshot_id
    report.covered = dict(Coverage.of_snapshot(final, name).covered)
    log.info("%s: built %d links (%d records, %d segment bytes) in %d commits; %d files added, "
             "%d already covered, %d links left", name, report.links, report.records,
             report.segment_bytes, report.commits, report.committed, report.skipped,
             report.remaining)
    return report


def topic_in_tier(tier: RemoteTier | str, topic: str, topic_id: str | None,
                  storage_options: Mapping[str, Any] | None = None,
                  partitions: Sequence[int] | None = None
                  ) -> tuple[RemoteTier, list[TopicIdPartition]]:
    """``tier`` (a RemoteTier, or its URL opened with ``storage_options``) and the partitions
    of ``topic`` it holds (the incarnation ``topic_id``, by default the newest), in partition
    order: all, or ``partitions``. UnknownTopicOrPartitionError naming the topic when the tier
    holds no partition of it, or not one of ``partitions``."""
    if isinstance(tier, str):
        from tierlog.remote.tier.storage_from_url import open_storage

        tier = open_storage(tier, storage_options).tier
    found = topic_partitions(tier, topic, topic_id)
    wanted = sorted(found) if partitions is None else sorted(set(partitions))
    missing = [p for p in wanted if p not in found]
    if not found or missing:
        which = f" (topic id {topic_id})" if topic_id else ""
        what = f"partitions {missing}" if missing else "partition"
        raise UnknownTopicOrPartitionError(f"{topic}{which}: the tier at {tier.root} holds no "
                                           f"{what} of it")
    return tier, [found[p] for p in wanted]


def _commit(committer: TableCommitter, files: list[ReadyFile], starts: dict[int, int],
            report: BuildReport) -> CommitResult:
    result = committer.commit(files, starts=starts)
    report.commits += result.snapshot_id is not None
    report.committed += len(result.added)
    report.skipped += len(result.skipped)
    log.debug("%s: committed %d files (%d already covered)", ".".join(committer.identifier),
              len(result.added), len(result.skipped))
    return result


def _batches(jobs: Sequence[LinkJob], links: int, size: int) -> Iterable[Sequence[LinkJob]]:
    """``jobs`` cut into batches of at most ``links`` links, each closed once its segments
    reach ``size`` bytes."""
    batch: list[LinkJob] = []
    batch_bytes = 0
    for job in jobs:
        batch.append(job)
        batch_bytes += job.link.segment.segment_size_in_bytes
        if len(batch) >= links or batch_bytes >= size:
            yield batch
            batch, batch_bytes = [], 0
    if batch:
        yield batch


__all__ = ["DEFAULT_BATCH_BYTES", "DEFAULT_BATCH_LINKS", "BuildProgress", "BuildReport", "Call",
           "Converter", "LinkJob", "PartitionWork", "build_table", "convert_ready", "direct_call", "ready_file", "rewrite_from_start",
           "topic_in_tier", "uncovered_links"]
