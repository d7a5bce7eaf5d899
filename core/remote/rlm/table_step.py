"""The tiering run's table step (issue 23): each committed segment of a topic with
``remote.log.table.enable`` becomes one Parquet file of the topic's Iceberg table in the tier, and
the table follows the tier's log start offset, retention and topic deletion.

One step of one partition (:meth:`TableStep.run`, called by ``RemoteLogManager.tier_log`` after
the copy and before remote retention):

1. open the topic's table (created on first use) and read which offsets it covers;
2. apply the log start offset the run recorded in the tier, when the table's start is behind it
   (DeleteRecords): files wholly below it are removed, and a file straddling it is replaced by
   its link converted again from the start on, so no reader, tierlog's or a generic Iceberg
   one, sees a row below it;
3. convert each committed chain link above ``covered[p]`` and below the tier's last stable
   offset (every transaction outcome in it is then known) into a published Parquet file;
4. commit those files through the topic's group commit: one snapshot holds every file ready
   across the topic's partitions whose runs reach it together, with the coverage moved in the
   same snapshot;
5. with ``remote.log.table.compaction.enable``, at most once per
   ``remote.log.table.compaction.interval.ms`` per partition, merge one run of the
   partition's small files of consecutive links into a run file
   (``tierlog.remote.table.compact``);
6. after a commit, at most once an hour per topic, expire old snapshots and sweep orphans
   (``tierlog.remote.table.maintenance``).

A start (DeleteRecords, remote retention) inside a run file first unmerges the run
(``tierlog.remote.table.unmerge``: its links converted again replace it), then the link files'
logic applies: the table never shows a row below the start, to any reader.

A failure here never fails the copy: it is returned to the run (``TierResult.table_errors``)
and backs the partition's table step off (:attr:`TableStep.retries`, the RemoteLogManager's
backoff); the copies go on, and the next due run converts from the table's coverage again (a
file published but not committed is an orphan the table's sweep removes). The step never takes
the log's lock: it reads the tier, not the local log, so appends go on beside it. Every
conversion and commit waits at most ``remote.storage.request.timeout.ms`` (RemoteCalls); one
abandoned may still land later, which is harmless: the commit's compare-and-swap and the
coverage check make a commit land once.

This module imports pyiceberg (through ``tierlog.remote.table``): the RemoteLogManager imports it
only when a topic with a table is tiered.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeVar

from tierlog.errors import UnknownTopicOrPartitionError
from tierlog.remote.api import TopicIdPartition
from tierlog.remote.rlm.backoff import ExponentialBackoff, RetrySchedule
from tierlog.remote.rlm.deadline import RemoteCalls
from tierlog.remote.table.build import (
    convert_ready,
    ready_file,
    rewrite_from_start,
    uncovered_links,
)
from tierlog.remote.table.catalog import TierCatalog
from tierlog.remote.table.catalogs import open_catalog, open_topic_table
from tierlog.remote.table.commit import CommitResult, ReadyFile, TableCommitter, current_files
from tierlog.remote.table.coverage import Coverage
from tierlog.remote.table.maintenance import (
    DEFAULT_ORPHAN_GRACE_MS,
    DEFAULT_SNAPSHOT_RETENTION_MS,
    TableMaintenance,
    drop_table,
)
from tierlog.remote.table.schema import table_identifier
from tierlog.remote.table.unmerge import unmerge_straddling
from tierlog.remote.tier.object_store import RemoteTier

if TYPE_CHECKING:
    from pyiceberg.catalog import Catalog
    from pyiceberg.table import Table

__all__ = ["TableCompaction", "TableRun", "TableStep"]

log = logging.getLogger(__name__)
_T = TypeVar("_T")

#: How often a topic's table gets its upkeep (snapshot expiry, the orphan sweep) from the
#: tiering runs that commit to it: at most once an hour, as the design has it.
UPKEEP_INTERVAL_MS = 3_600_000


@dataclass(frozen=True, slots=True)
class TableCompaction:
    """A topic's compaction settings (``remote.log.table.compaction.*``)."""

    target_bytes: int
    """The size a run file grows to (``.target.bytes``)."""
    max_links: int
    """The most links one run file merges (``.max.links``)."""
    interval_ms: int
    """The least time between two compactions of one partition (``.interval.ms``)."""


@dataclass(frozen=True, slots=True)
class TableRun:
    """What one table step did for one partition."""

    covered: int | None = None
    """The partition's covered end in the table after the step (None: nothing of it covered,
    or the step did not get as far as reading the table)."""
    committed: int = 0
    """The files of the partition this step added to the table."""
    error: str | None = None
    """Why the step stopped short (None when it did all it could)."""
    compacted: int = 0
    """The run files this step's compaction merged and committed (at most one)."""


@dataclass(slots=True)
class _Ticket:
    """One partition's files waiting for the topic's group commit, and their outcome."""

    files: Sequence[ReadyFile]
    starts: Mapping[int, int]
    done: bool = False
    error: Exception | None = None
    result: CommitResult | None = None


class _TopicTable:
    """One topic incarnation's table: its committer and its group commit. Thread-safe.

    Partitions hand their ready files to :meth:`commit`; whichever gets the commit lock first
    commits everything queued by then in one snapshot, and the others find their ticket done.
    When such a shared commit fails, each ticket is committed alone, so one partition's error
    (a gap) never holds back another's files.
    """

    def __init__(self, topic: str, committer: TableCommitter,
                 bounded: Callable[[str, Callable[[], CommitResult]], CommitResult]) -> None:
        self.topic = topic
        self.committer = committer
        self.identifier = committer.identifier
        #: The table's name in messages (``tierlog.<topic>-<topicId>``).
        self.name = ".".join(committer.identifier)
        self._bounded = bounded
        self._queue: list[_Ticket] = []
        self._queue_lock = threading.Lock()
        self._commit_lock = threading.Lock()
        #: When the table's next upkeep is due (guarded by the TableStep's lock).
        self.upkeep_due_ms = 0

    def commit(self, files: Sequence[ReadyFile], starts: Mapping[int, int]) -> CommitResult:
        """Commit ``files`` (``starts``: the first offset of each partition the table covers
        nothing of yet), with whatever other partitions have queued meanwhile."""
        ticket = _Ticket(files, starts)
        with self._queue_lock:
            self._queue.append(ticket)
        with self._commit_lock:  # the holder's commit waits at most the request timeout
            if not ticket.done:
                with self._queue_lock:
                    batch, self._queue = self._queue, []
                self._commit_batch(batch)
        if ticket.error is not None:
            raise ticket.error
        assert ticket.result is not None
        return ticket.result

    def _commit_batch(self, batch: list[_Ticket]) -> None:
        try:
            result = self._commit_files([f for t in batch for f in t.files],
                                        {p: o for t in batch for p, o in t.starts.items()})
        except Exception as exc:  # noqa: BLE001 - each ticket's partition gets its own outcome
            if len(batch) == 1:
                _finish(batch[0], error=exc)
                return
            log.info("%s: the table commit of %d partitions together failed (%s); committing "
                     "each alone", self.topic, len(batch), exc)
            for ticket in batch:
                try:
                    _finish(ticket, result=self._commit_files(ticket.files, ticket.starts))
                except Exception as one:  # noqa: BLE001 - the partition's own error
                    _finish(ticket, error=one)
            return
        for ticket in batch:
            _finish(ticket, result=result)

    def _commit_files(self, files: Sequence[ReadyFile], starts: Mapping[int, int]
                      ) -> CommitResult:
        return self._bounded(f"{self.topic}: commit {len(files)} table files",
                             lambda: self.committer.commit(files, starts=starts))


def _finish(ticket: _Ticket, *, result: CommitResult | None = None,
            error: Exception | None = None) -> None:
    ticket.result, ticket.error, ticket.done = result, error, True


class TableStep:
    """The table step of every table topic one RemoteLogManager tiers, over its tier and with
    its bounded calls (``calls``). Thread-safe: a partition's steps run one at a time (its
    tiering run holds the partition's lock); a topic's partitions run in parallel and share
    the topic's group commit.

    ``retries`` backs off a partition whose step failed (``backoff``: the RemoteLogManager's
    policy), apart from its copies, which a table failure never delays.
    """

    def __init__(self, tier: RemoteTier, calls: RemoteCalls, *, time_ms: Callable[[], int],
                 backoff: ExponentialBackoff) -> None:
        self.tier = tier
        self._calls = calls
        self._time_ms = time_ms
        #: The tier's own catalog: a topic's table is in it unless the topic names its own
        #: (``remote.log.table.catalog.*``: the run's ``catalog_properties``).
        self.catalog: Catalog = TierCatalog(tier)
        #: When each partition whose table step failed may run it again.
        self.retries: RetrySchedule[TopicIdPartition] = RetrySchedule(backoff)
        self._tables: dict[tuple[str, str], _TopicTable] = {}
        #: Each partition's (covered end, start) as its last step left them: a run that
        #: copied nothing new skips the table (no request) when they are still current.
        self._known: dict[TopicIdPartition, tuple[int, int]] = {}
        #: Topic incarnations whose table was dropped (being deleted): never created again
        #: by a run that was still going.
        self._dropped: set[tuple[str, str]] = set()
        #: When each partition's next compaction is due (after one that succeeded).
        self._compaction_due: dict[TopicIdPartition, int] = {}
        self._lock = threading.Lock()

    # -- the step ------------------------------------------------------------------------

    def run(self, tip: TopicIdPartition, log_start_offset: int, highest_in_remote: int, *,
            snapshot_retention_ms: int = DEFAULT_SNAPSHOT_RETENTION_MS,
            orphan_grace_ms: int = DEFAULT_ORPHAN_GRACE_MS,
            catalog_properties: Mapping[str, str] | None = None,
            compaction: TableCompaction | None = None) -> TableRun:
        """The step of one partition of a table topic, after its run's copies:
        ``log_start_offset`` is the one the run recorded in the tier, ``highest_in_remote``
        the last offset the tier holds. Skipped while the partition backs off, and (with no
        request) when its last step left the table covering all the tier holds from the log
        start offset. A step that committed also gives the table its upkeep when due
        (``remote.log.table.snapshot.retention.ms``, ``remote.log.table.orphan.grace.ms``).
        With ``compaction`` (the topic has ``remote.log.table.compaction.enable``), a step whose
        partition's compaction is due merges at most one run after its commit; a failure of it
        is the step's error and backs the step off, as any table failure."""
        with self._lock:
            known = self._known.get(tip)
        if not self.retries.due(tip, self._time_ms()):
            log.debug("%s: table step backs off after %d failures; skipped", tip,
                      self.retries.attempts(tip))
            return TableRun(None if known is None else known[0])
        if known is not None and known[0] > highest_in_remote and known[1] >= log_start_offset \
                and not self._compaction_due_now(tip, compaction):
            return TableRun(known[0])
        covered: int | None = None
        committed = compacted = 0
        try:
            table = self._table(tip, catalog_properties)
            iceberg = self._bounded(f"{tip}: load its table",
                                    lambda: table.committer.catalog.load_table(table.identifier))
            coverage = Coverage.of_snapshot(iceberg.current_snapshot(), table.name)
            coverage = self._apply_log_start(table, iceberg, tip, coverage, log_start_offset)
            covered = coverage.end(tip.partition)
            ready, starts, failure = self._convert(iceberg, tip, coverage, log_start_offset)
            if ready:
                result = table.commit(ready, starts)
                coverage = result.coverage
                covered = coverage.end(tip.partition)
                committed = len(result.added)
                log.info("%s: the table holds offsets below %s (%d files added)", tip,
                         covered, committed)
            if failure is None and compaction is not None:
                compacted = self._compact(table, iceberg, tip, compaction)
            if ready or compacted:
                self._upkeep(table, snapshot_retention_ms, orphan_grace_ms)
            if failure is not None:
                raise failure
        except Exception as exc:  # noqa: BLE001 - a table failure never fails the copy
            return self._failed(tip, covered, committed, exc)
        self.retries.succeeded(tip)
        with self._lock:
            if covered is None:
                self._known.pop(tip, None)
            else:
                self._known[tip] = (covered, coverage.start.get(tip.partition, -1))
        return TableRun(covered, committed, compacted=compacted)

    def _compaction_due_now(self, tip: TopicIdPartition,
                            compaction: TableCompaction | None) -> bool:
        if compaction is None:
            return False
        with self._lock:
            return self._time_ms() >= self._compaction_due.get(tip, 0)

    def _compact(self, table: _TopicTable, iceberg: Table, tip: TopicIdPartition,
                 compaction: TableCompaction) -> int:
        """Merge at most one run of the partition's files when its compaction is due; the
        runs committed. The table's ``write.target-file-size-bytes``, when set, is the target
        rather than the topic's. Raises what the compaction raises (the next is due after the
        step's backoff, not the interval)."""
        if not self._compaction_due_now(tip, compaction):
            return 0
        from tierlog.remote.table.compact import TARGET_PROPERTY, compact_partition

        now = self._time_ms()
        own = TARGET_PROPERTY in iceberg.properties  # compact_partition reads it
        report = compact_partition(self.tier, table.committer, tip,
                                   target_bytes=None if own else compaction.target_bytes,
                                   max_links=compaction.max_links, max_runs=1,
                                   call=self._bounded)
        with self._lock:
            self._compaction_due[tip] = now + compaction.interval_ms
        if report.runs:
            log.info("%s: compacted %d table files into %d run file(s)", tip,
                     report.files_removed, report.runs)
        return int(report.runs)

    def _failed(self, tip: TopicIdPartition, covered: int | None, committed: int,
                exc: Exception) -> TableRun:
        due = self.retries.failed(tip, self._time_ms())
        message = f"{tip}: table step: {exc}"
        log.warning("%s (failure %d in a row, retried in %d ms; the copies go on)", message,
                    self.retries.attempts(tip), due - self._time_ms())
        with self._lock:
            self._known.pop(tip, None)
        return TableRun(covered, committed, message)

    def _convert(self, iceberg: Table, tip: TopicIdPartition, coverage: Coverage,
                 log_start_offset: int
                 ) -> tuple[list[ReadyFile], dict[int, int], Exception | None]:
        """The ready files of the chain links the table does not cover yet below the tier's
        last stable offset (each link's transaction outcomes are then in the tier), in offset
        order, and the partition's start when the table covers nothing of it yet. A
        conversion that fails stops there and is returned; the files before it commit."""
        work = uncovered_links(self.tier, tip, coverage.end(tip.partition), call=self._bounded)
        ready: list[ReadyFile] = []
        for link in work.links:
            try:
                ready.append(ready_file(convert_ready(self.tier, iceberg, work, link,
                                                      log_start_offset=log_start_offset,
                                                      call=self._bounded)))
            except Exception as exc:  # noqa: BLE001 - the files before it still commit
                return ready, work.starts, exc
        return ready, work.starts, None

    def _upkeep(self, table: _TopicTable, snapshot_retention_ms: int,
                orphan_grace_ms: int) -> None:
        """Expire the table's old snapshots and sweep its orphans, at most once per
        UPKEEP_INTERVAL_MS per topic. Housekeeping: a failure is logged and the upkeep tried
        again at the topic's next commit; the step goes on."""
        now = self._time_ms()
        with self._lock:
            if now < table.upkeep_due_ms:
                return
            table.upkeep_due_ms = now + UPKEEP_INTERVAL_MS
        upkeep = TableMaintenance(self.tier, table.committer.catalog, table.identifier,
                                  snapshot_retention_ms=snapshot_retention_ms,
                                  orphan_grace_ms=orphan_grace_ms, time_ms=self._time_ms)
        try:
            report = self._bounded(f"{table.name}: expire snapshots, sweep orphans", upkeep.run)
        except Exception as exc:  # noqa: BLE001 - housekeeping never fails the step
            with self._lock:
                table.upkeep_due_ms = 0
            log.warning("%s: the table's upkeep failed (tried again at its next commit): %s",
                        table.name, exc)
            return
        if report.expired_snapshots or report.deleted:
            log.info("%s: expired %d snapshots, swept %d orphaned objects", table.name,
                     report.expired_snapshots, len(report.deleted))

    # -- the table follows the log ---------------------------------------------------------

    def _apply_log_start(self, table: _TopicTable, iceberg: Table, tip: TopicIdPartition,
                         coverage: Coverage, log_start_offset: int) -> Coverage:
        """Move the partition's start in the table up to the tier's log start offset when it
        is behind (once the table covers something of the partition: its first file starts
        at the chain's first link, which is at or past it). A current file straddling it is
        replaced by its link converted again from the start on (``rewrite_from_start``); a run
        file straddling it is unmerged first."""
        partition = tip.partition
        if coverage.end(partition) is None \
                or coverage.start.get(partition, -1) >= log_start_offset:
            return coverage
        if unmerge_straddling(self.tier, table.committer, tip, log_start_offset,
                              call=self._bounded):
            iceberg = self._bounded(f"{tip}: load its table", lambda: (
                table.committer.catalog.load_table(table.identifier)))
        current = self._bounded(f"{tip}: read the table's files",
                                lambda: current_files(iceberg, partition))
        straddling = [f for f in current if f.first_offset < log_start_offset <= f.last_offset]
        rewritten = None if not straddling else rewrite_from_start(
            self.tier, iceberg, tip, straddling[0], log_start_offset, call=self._bounded)
        return self._apply_start(table, tip, log_start_offset, rewritten)

    def advance_start(self, tip: TopicIdPartition, offset: int,
                      catalog_properties: Mapping[str, str] | None = None) -> None:
        """Record the log start offset ``offset`` of a partition in its table, in one
        snapshot that removes the files wholly below it (a link file straddling it stays:
        readers filter rows below ``start[p]``; a run file straddling it is unmerged first, so
        no reader sees a row below it). Remote retention calls it before deleting segments,
        so their files leave the current snapshot before their objects go; it raises when the
        commit fails, and the caller keeps the segments."""
        table = self._table(tip, catalog_properties)
        unmerge_straddling(self.tier, table.committer, tip, offset, call=self._bounded)
        self._apply_start(table, tip, offset)

    def _apply_start(self, table: _TopicTable, tip: TopicIdPartition, offset: int,
                     rewritten: ReadyFile | None = None) -> Coverage:
        result = self._bounded(
            f"{tip}: set the table's start to {offset}",
            lambda: table.committer.apply_start(tip.partition, offset, rewritten=rewritten))
        with self._lock:
            self._known.pop(tip, None)
        if result.removed:
            log.info("%s: the table starts at %d (%d files removed)", tip, offset,
                     len(result.removed))
        return result.coverage

    def drop(self, topic: str, topic_id: str,
             catalog_properties: Mapping[str, str] | None = None) -> None:
        """Drop the table of a topic incarnation being deleted (every object of it; nothing
        to do when it has none). The step never creates that incarnation's table again."""
        with self._lock:
            self._dropped.add((topic, topic_id))
            known = self._tables.pop((topic, topic_id), None)
            for tip in [t for t in self._known if (t.topic, t.topic_id) == (topic, topic_id)]:
                del self._known[tip]
            for tip in [t for t in self._compaction_due
                        if (t.topic, t.topic_id) == (topic, topic_id)]:
                del self._compaction_due[tip]
        user = known.committer.catalog if known is not None \
            and not isinstance(known.committer.catalog, TierCatalog) else None
        if user is None and catalog_properties:  # a user catalog this process never opened
            try:
                user = self._bounded(f"{topic}: open its table's catalog",
                                     lambda: open_catalog(self.tier, catalog_properties))
            except Exception as exc:  # noqa: BLE001 - the tier's objects go all the same
                log.warning("%s: its table stays listed in its catalog (%s); dropping its "
                            "objects in the tier", topic, exc)
        self._bounded(f"{topic}: drop its table",
                      lambda: drop_table(self.tier, topic, topic_id, user,
                                         table_identifier(topic, topic_id)))
        log.info("%s: dropped its table", topic)

    # -- helpers ---------------------------------------------------------------------------

    def _table(self, tip: TopicIdPartition,
               catalog_properties: Mapping[str, str] | None = None) -> _TopicTable:
        """The topic's table, created in the tier on first use."""
        key = (tip.topic, tip.topic_id)
        with self._lock:
            table = self._tables.get(key)
            dropped = key in self._dropped
        if dropped:
            raise UnknownTopicOrPartitionError(f"{tip.topic}: its table was dropped (the topic is being "
                                    f"deleted)")
        if table is not None:
            return table
        catalog = self.catalog if not catalog_properties else self._bounded(
            f"{tip.topic}: open its table's catalog",
            lambda: open_catalog(self.tier, catalog_properties or {}))
        self._bounded(f"{tip.topic}: open or create its table",
                      lambda: open_topic_table(self.tier, catalog, tip.topic, tip.topic_id))
        committer = TableCommitter(catalog, table_identifier(tip.topic, tip.topic_id))
        with self._lock:
            return self._tables.setdefault(key, _TopicTable(tip.topic, committer, self._bounded))

    def _bounded(self, what: str, fn: Callable[[], _T]) -> _T:
        """``fn()`` waited for at most the request timeout (an abandoned call may still land:
        the commit's compare-and-swap and coverage check make that harmless)."""
        return self._calls.call(what, fn)
