"""RemoteLogManager: copies closed segments to the remote tier, serves old offsets back from it,
and enforces retention over the whole (local + remote) log, with Kafka's KIP-405 semantics.

A Log with tiered storage gets a ``remote`` reader attached; ``Log.read`` below the local log
start offset and ``offset_for_timestamp`` go through it transparently.
"""

from __future__ import annotations

import contextlib
import logging
import tempfile
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import wait as wait_for_futures
from dataclasses import dataclass, field
from itertools import pairwise
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from tierlog.checkpoint.checkpoint_file import encode_leader_epoch_checkpoint
from tierlog.common.filenames import snapshot_file
from tierlog.config import LONG_MAX
from tierlog.errors import RemoteFetchTimeoutError, RemoteStorageError
from tierlog.events import EventDelivery, RemoteSegmentEvent
from tierlog.log.log_removals import last_offset_off_local
from tierlog.producer.snapshot import write_snapshot
from tierlog.remote.api import (
    LogSegmentData,
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemoteLogSegmentState,
    RemoteStorageManager,
    TopicIdPartition,
)
from tierlog.remote.log_protocol import TieredLog
from tierlog.remote.metadata_api import RemoteLogMetadataStore
from tierlog.remote.ops.backfill_commit import DEFAULT_STAGING_RETENTION_MS, BackfillCommitter
from tierlog.remote.rlm.backoff import ExponentialBackoff, RetrySchedule
from tierlog.remote.rlm.deadline import BoundedReaderPool, RemoteCalls, wait_bounded
from tierlog.remote.rlm.index_cache import RemoteIndexCache
from tierlog.remote.rlm.quota import RateQuota
from tierlog.remote.rlm.remote_reader import RemoteLogReader, topic_id_partition
from tierlog.remote.rlm.tail import TAIL_MS, TailPublisher
from tierlog.remote.rlm.unfinished import roll_back_unfinished
from tierlog.remote.tier.layout import table_key
from tierlog.remote.tier.object_store import RemoteTier
from tierlog.remote.tier.ownership import (
    claim_leadership,
    manager_owner,
    record_owner,
    tier_of,
)

if TYPE_CHECKING:
    from tierlog.log.segment import LogSegment
    from tierlog.remote.rlm.table_step import TableStep

log = logging.getLogger(__name__)
_T = TypeVar("_T")

_STARTED = RemoteLogSegmentState.COPY_SEGMENT_STARTED
_FINISHED = RemoteLogSegmentState.COPY_SEGMENT_FINISHED
_DELETE_STARTED = RemoteLogSegmentState.DELETE_SEGMENT_STARTED
_DELETE_FINISHED = RemoteLogSegmentState.DELETE_SEGMENT_FINISHED
#: progress(event, detail): called by a tiering run, e.g. ("copied", metadata).
Progress = Callable[[str, RemoteLogSegmentMetadata], None]
#: How long close() waits for tiering runs already going (Kafka waits 10 s for its pools);
#: a run still hung on the remote tier after that is abandoned.
DEFAULT_SHUTDOWN_TIMEOUT_S = 10.0
#: The topic config that keeps a topic's tiered records as an Iceberg table in the tier too.
TABLE_ENABLE = "remote.log.table.enable"


@dataclass(frozen=True, slots=True)
class RemoteLimits:
    """The RemoteLogManager's quotas, retries and timeouts (Kafka's RemoteLogManagerConfig
    names in the comments; defaults are Kafka's, or tierlog's where Kafka has none)."""

    #: remote.log.manager.copy.max.bytes.per.second and its quota windows.
    copy_max_bytes_per_second: int = LONG_MAX
    copy_quota_window_num: int = 11
    copy_quota_window_size_s: int = 1
    #: remote.log.manager.fetch.max.bytes.per.second and its quota windows.
    fetch_max_bytes_per_second: int = LONG_MAX
    fetch_quota_window_num: int = 11
    fetch_quota_window_size_s: int = 1
    #: remote.log.manager.task.retry.backoff.ms / .backoff.max.ms / .jitter.
    retry_backoff_ms: int = 500
    retry_backoff_max_ms: int = 30_000
    retry_jitter: float = 0.2
    #: remote.storage.request.timeout.ms (tierlog's): one call to the tier.
    request_timeout_ms: int = 30_000
    #: remote.fetch.max.wait.ms: one read of the tier.
    fetch_max_wait_ms: int = 500
    #: remote.log.reader.max.pending.tasks.
    reader_max_pending: int = 100
    #: remote.list.offsets.request.timeout.ms: one timestamp lookup in the tier.
    list_offsets_timeout_ms: int = 30_000


@dataclass(slots=True)
class TierResult:
    """What one tiering run did for one log."""

    copied: list[RemoteLogSegmentMetadata] = field(default_factory=list)
    deleted_remote: list[RemoteLogSegmentMetadata] = field(default_factory=list)
    orphans_removed: int = 0
    errors: list[str] = field(default_factory=list)
    #: A table topic's: the partition's covered end in its table after the run (None: none),
    #: and what failed of the table's work (never a failure of the copies).
    table_covered: int | None = None
    table_errors: list[str] = field(default_factory=list)
    #: Run files the table step's compaction committed (remote.log.table.compaction.enable).
    table_compacted: int = 0


class RemoteLogManager:
    """Tiering for every log with ``remote.storage.enable``. Thread-safe.

    Copies run per partition in order (a partition is copied by one thread at a time) on a
    pool of ``copy_threads``, never on the caller's thread when submitted with
    :meth:`submit_tiering` (the scheduler's task), so a hung remote tier stalls no flush,
    retention or checkpoint; remote reads run on a pool of ``reader_threads`` so their number
    is bounded. ``close`` waits at most ``shutdown_timeout_s`` for runs already going.
    ``events`` delivers lifecycle events to plugins (or None).

    ``limits`` (RemoteLimits) bounds the work on the tier: every call to the tier made by a
    tiering run is waited for at most ``request_timeout_ms`` on a call thread of its own (a
    copy that times out is abandoned: its COPY_STARTED metadata is cleaned once its thread
    returns, and a late finish commits nothing; a metadata call that times out keeps the
    partition's tiering paused until it returns); a partition whose run failed is retried
    after an exponential backoff (``retries``), not on every tick; copies wait for the copy
    quota (``copy_quota``) and reads are refused over the fetch quota (``fetch_quota``);
    a read is waited for at most ``fetch_max_wait_ms`` and the reader's queue is bounded.
    For metrics: ``copy_quota.throttle_time_ms_total``, ``fetch_quota.throttle_time_ms_total``,
    :meth:`reader_queue_size`, :meth:`copy_lag_bytes`.
    """

    def __init__(
        self,
        rsm: RemoteStorageManager,
        rlmm: RemoteLogMetadataStore,
        index_cache: RemoteIndexCache,
        *,
        time_ms: Callable[[], int],
        copy_threads: int = 2,
        reader_threads: int = 2,
        events: EventDelivery | None = None,
        shutdown_timeout_s: float = DEFAULT_SHUTDOWN_TIMEOUT_S,
        limits: RemoteLimits | None = None,
        replicated: bool = False,
    ) -> None:
        self.rsm = rsm
        self.rlmm = rlmm
        #: Whether the partitions are replicated (issue 24): only a partition's leader, once
        #: it has claimed the partition's tier at its leader epoch (:meth:`claim`), writes it.
        self.replicated = replicated
        fence = getattr(rlmm, "fence_writes", None)
        if replicated and callable(fence):
            fence()
        elif replicated:
            log.warning("%r keeps no manifest to fence: a replicated partition's tier is "
                        "written by its leader without a compare-and-swap", rlmm)
        self.index_cache = index_cache
        self._time_ms = time_ms
        self._events = events
        self._copy_pool = ThreadPoolExecutor(copy_threads, thread_name_prefix="tierlog-copy")
        limits = limits or RemoteLimits()
        self.limits = limits
        self._reader_pool = BoundedReaderPool(reader_threads, limits.reader_max_pending)
        #: The calls a tiering run makes to the tier, each bounded by the request timeout.
        self._calls = RemoteCalls(copy_threads, limits.request_timeout_ms / 1000)
        self.copy_quota = RateQuota(limits.copy_max_bytes_per_second,
                                    limits.copy_quota_window_num,
                                    limits.copy_quota_window_size_s, time_ms=time_ms)
        self.fetch_quota = RateQuota(limits.fetch_max_bytes_per_second,
                                     limits.fetch_quota_window_num,
                                     limits.fetch_quota_window_size_s, time_ms=time_ms)
        #: When each partition whose tiering run failed may run again.
        self.retries: RetrySchedule[TopicIdPartition] = RetrySchedule(ExponentialBackoff(
            limits.retry_backoff_ms, 2, limits.retry_backoff_max_ms, limits.retry_jitter))
        #: Uploads abandoned on a timeout whose thread has not returned: their COPY_STARTED
        #: metadata is cleaned only after it returns (it could still write objects).
        self._abandoned: dict[RemoteLogSegmentId, Future[bytes | None]] = {}
        #: Partitions paused by a metadata call abandoned on a timeout, until it returns.
        self._paused: dict[TopicIdPartition, Future[Any]] = {}
        self._closing = threading.Event()
        self._partition_locks: dict[TopicIdPartition, threading.Lock] = {}
        self._locks_lock = threading.Lock()
        self.shutdown_timeout_s = shutdown_timeout_s
        #: Every tiering run submitted and not yet done, and the directory names of the logs
        #: whose submit_tiering run is going (one per partition at a time).
        self._runs: set[Future[TierResult]] = set()
        self._in_flight: set[str] = set()
        #: Whether the staging crashed backfill jobs left was swept (at the first attach).
        self._staging_swept = False
        #: Tail publishing (``remote.log.tail.ms``), when the RSM exposes its tier (ours
        #: does; a third-party RSM's tier is opaque to us, so its topics get no tail).
        tier = getattr(rsm, "tier", None)
        self._tier = tier if isinstance(tier, RemoteTier) else None
        #: The table step of topics with remote.log.table.enable (built on first need: it
        #: imports pyiceberg), over the same tier as the tail; None until then.
        self._table_step: TableStep | None = None
        self.tail: TailPublisher | None = (
            TailPublisher(tier, self._lock_for, time_ms=time_ms, threads=copy_threads,
                          request_timeout_s=limits.request_timeout_ms / 1000,
                          fenced=replicated, on_fenced=self._release_tip)
            if isinstance(tier, RemoteTier) else None)

    # -- attaching logs ------------------------------------------------------------------

    def attach(self, log_: TieredLog) -> None:
        """Give a tiered log its remote reader and what the tier already holds of it."""
        tip = topic_id_partition(log_)
        # The metadata first: a tier that refuses us fails here with the store's message.
        copied = [m for m in self._list(tip) if m.state is _FINISHED]
        tier = tier_of(self.rlmm) or tier_of(self.rsm)
        if tier is not None and not self.replicated:  # a backfill must not write behind us
            owner = manager_owner(log_.directory.parent)
            self._calls.call(f"{tip}: record the owner", lambda: record_owner(
                tier, tip, owner, self._time_ms()))
            self._sweep_backfill_staging(tier)
        highest = max((m.end_offset for m in copied), default=-1)
        log_.attach_remote(RemoteLogReader(self, log_), highest)
        log.info("%s: tiered storage attached (remote holds offsets up to %d)",
                 log_.directory.name, highest)

    # -- replicated partitions (issue 24): the leader writes, followers read ---------------

    def claim(self, log_: TieredLog, leader_epoch: int, owner: str) -> int:
        """Take up tiering ``log_`` as its leader ``owner`` (``node-<id>``) at
        ``leader_epoch``: record the owner (``_owner.json`` version 2) and claim the manifest,
        both by compare-and-swap, reloading what the tier holds; returns the highest offset
        the tier holds, which the log learns. TierFencedError when a newer leader owns it."""
        tip = topic_id_partition(log_)
        tier = tier_of(self.rlmm) or tier_of(self.rsm)
        with self._lock_for(tip):
            if tier is not None:
                self._calls.call(f"{tip}: claim the owner record", lambda: claim_leadership(
                    tier, tip, owner, leader_epoch, self._time_ms()))
            claim = getattr(self.rlmm, "claim", None)
            if callable(claim):
                self._calls.call(f"{tip}: claim the manifest", lambda: claim(tip, leader_epoch))
            if self.tail is not None:
                self.tail.claim(tip)
            highest = max((m.end_offset for m in self._list(tip) if m.state is _FINISHED),
                          default=-1)
        log_.update_highest_offset_in_remote(highest)
        self.retries.succeeded(tip)
        return highest

    def release(self, log_: TieredLog) -> None:
        """Stop writing ``log_``'s tier (this node no longer leads it)."""
        self._release_tip(topic_id_partition(log_))

    def _release_tip(self, tip: TopicIdPartition) -> None:
        release = getattr(self.rlmm, "release", None)
        if callable(release):
            release(tip)

    def leads(self, log_: TieredLog) -> bool:
        """Whether this node writes ``log_``'s tier: always for unreplicated partitions;
        for a replicated one, while its claim holds (a lost compare-and-swap drops it)."""
        claimed = getattr(self.rlmm, "claimed_epoch", None)
        return not self.replicated or not callable(claimed) \
            or claimed(topic_id_partition(log_)) is not None

    def follow_tier(self, log_: TieredLog) -> int:
        """A follower learns how far its leader has tiered ``log_`` (one GET of the stored
        manifest): its local retention may then delete the segments wholly below it, as the
        leader's does. Returns that offset (-1: nothing tiered)."""
        tip = topic_id_partition(log_)
        stored_manifest = getattr(self.rlmm, "stored_manifest", None)
        if not callable(stored_manifest):
            return log_.highest_offset_in_remote
        manifest = self._calls.call(f"{tip}: read the leader's manifest",
                                    lambda: stored_manifest(tip))
        highest = -1 if manifest is None else max(
            (m.end_offset for m in manifest.committed), default=-1)
        log_.update_highest_offset_in_remote(highest)
        return highest

    def _sweep_backfill_staging(self, tier: RemoteTier) -> None:
        """Once per RemoteLogManager (its first attach), the unfinished-upload sweep of the
        backfill: delete the staging of crashed Spark jobs (``_staging/<job>``, unmodified for
        a day; a job record awaiting its roll-forward keeps its staging). Bounded by the
        request timeout; a sweep that fails or times out is housekeeping: it is logged and
        tried again at the next attach, and the attach goes on."""
        with self._locks_lock:
            if self._staging_swept:
                return
            self._staging_swept = True

        def sweep() -> int:
            committer = BackfillCommitter(tier, time_ms=self._time_ms)
            try:
                return committer.sweep_staging(DEFAULT_STAGING_RETENTION_MS)
            finally:
                committer.close()
        try:
            swept = self._calls.call("sweep the staging of crashed backfill jobs", sweep)
        except RemoteStorageError as exc:
            with self._locks_lock:
                self._staging_swept = False
            log.warning("the sweep of crashed backfill jobs' staging failed (tried again at "
                        "the next attach): %s", exc)
            return
        if swept:
            log.info("removed the staging of %d crashed backfill jobs", swept)

    def _lock_for(self, tip: TopicIdPartition) -> threading.Lock:
        with self._locks_lock:
            return self._partition_locks.setdefault(tip, threading.Lock())

    # -- tiering -------------------------------------------------------------------------

    def tier(self, logs: Sequence[TieredLog], progress: Progress | None = None) -> dict[str, TierResult]:
        """Copy eligible segments of every log (in parallel across partitions) and enforce
        remote retention. Returns each log's result by directory name."""
        futures = {lg.directory.name: self._submit_run(lg, progress) for lg in logs}
        return {name: f.result() for name, f in futures.items()}

    def submit_tiering(self, logs: Sequence[TieredLog], progress: Progress | None = None) -> list[str]:
        """Start a tiering run for each log on the copy pool and return at once (the
        scheduler's task); a log whose previous run is still going (a slow or hung remote
        tier) is skipped. Returns the directory names of the logs submitted."""
        submitted = []
        now = self._time_ms()
        for log_ in logs:
            name = log_.directory.name
            tip = topic_id_partition(log_)
            if not self.retries.due(tip, now) or self._is_paused(tip):
                log.debug("%s: tiering backs off after %d failures; skipped", name,
                          self.retries.attempts(tip))
                continue
            with self._locks_lock:
                if name in self._in_flight:
                    log.debug("%s: previous tiering run still going; skipped", name)
                    continue
                self._in_flight.add(name)
            try:
                self._submit_run(log_, progress, name)
            except BaseException:
                with self._locks_lock:
                    self._in_flight.discard(name)
                raise
            submitted.append(name)
        return submitted

    def tiering_in_flight(self) -> list[str]:
        """Directory names of the logs whose submitted tiering run has not finished."""
        with self._locks_lock:
            return sorted(self._in_flight)

    def await_tiering(self, timeout_s: float | None = None) -> bool:
        """Wait until every tiering run submitted so far has finished (at most ``timeout_s``);
        False if some are still going. For callers that need the tier caught up, e.g. tests
        driving the scheduler."""
        with self._locks_lock:
            runs = list(self._runs)
        _, pending = wait_for_futures(runs, timeout=timeout_s)
        return not pending

    def _submit_run(self, log_: TieredLog, progress: Progress | None,
                    in_flight_name: str | None = None) -> Future[TierResult]:
        future = self._copy_pool.submit(self._run, log_, progress, in_flight_name)
        with self._locks_lock:
            self._runs.add(future)
        future.add_done_callback(self._forget_run)
        return future

    def _run(self, log_: TieredLog, progress: Progress | None,
             in_flight_name: str | None) -> TierResult:
        try:
            return self.tier_log(log_, progress)
        except Exception:
            log.exception("%s: tiering run failed", log_.directory.name)
            raise
        finally:
            if in_flight_name is not None:
                with self._locks_lock:
                    self._in_flight.discard(in_flight_name)

    def _forget_run(self, future: Future[TierResult]) -> None:
        with self._locks_lock:
            self._runs.discard(future)

    def tier_log(self, log_: TieredLog, progress: Progress | None = None) -> TierResult:
        """One tiering run for one log: clean up failed copies, copy, remote retention. A
        failure is retried after the partition's backoff (:attr:`retries`)."""
        result = TierResult()
        tip = topic_id_partition(log_)
        with self._lock_for(tip):
            try:
                if self._is_paused(tip):
                    raise RemoteStorageError(
                        f"{log_.directory.name}: a metadata call abandoned on a timeout has "
                        f"not returned yet; tiering of the partition waits for it")
                result.orphans_removed = self._remove_unfinished(log_, tip)
                # Readers of the tier start at the log start offset (DeleteRecords, retention).
                log_start = log_.log_start_offset
                self._meta("update the log start offset", tip, lambda: (
                    self.rlmm.update_log_start_offset(tip, log_start)))
                self._copy_segments(log_, tip, result, progress)
                self._tier_table(log_, tip, log_start, result)
                self._remote_retention(log_, tip, result)
            except (RemoteStorageError, OSError) as exc:
                result.errors.append(str(exc))
                due = self.retries.failed(tip, self._time_ms())
                log.warning("%s: tiering stopped (failure %d in a row, retried in %d ms): %s",
                            log_.directory.name, self.retries.attempts(tip),
                            due - self._time_ms(), exc)
            else:
                self.retries.succeeded(tip)
        return result

    # -- topic tables --------------------------------------------------------------------

    def tables(self) -> TableStep | None:
        """The table step (built on first call), None when the tier is a third-party RSM's
        (opaque to us: its topics get no table)."""
        if self._tier is None or self._table_step is not None:
            return self._table_step
        # Imported here, outside the locks: pyiceberg loads only once a topic has a table.
        from tierlog.remote.rlm.table_step import TableStep
        step = TableStep(self._tier, self._calls, time_ms=self._time_ms,
                         backoff=self.retries.backoff)
        with self._locks_lock:
            if self._table_step is None:
                self._table_step = step
            return self._table_step

    def _tier_table(self, log_: TieredLog, tip: TopicIdPartition, log_start: int,
                    result: TierResult) -> None:
        """The run's table step, after the copies (tierlog.remote.rlm.table_step): its
        failure goes to ``result.table_errors`` and the step's own backoff, not the copies'."""
        if not log_.config[TABLE_ENABLE]:
            return
        tables = self.tables()
        if tables is None:
            result.table_errors.append(
                f"{log_.directory.name}: {TABLE_ENABLE} needs tierlog's own remote storage; "
                f"this tier is a third-party plugin's")
            return
        config = log_.config
        compaction = None
        if config["remote.log.table.compaction.enable"]:
            from tierlog.remote.rlm.table_step import TableCompaction
            compaction = TableCompaction(config["remote.log.table.compaction.target.bytes"],
                                         config["remote.log.table.compaction.max.links"],
                                         config["remote.log.table.compaction.interval.ms"])
        run = tables.run(tip, log_start, log_.highest_offset_in_remote,
                         snapshot_retention_ms=config["remote.log.table.snapshot.retention.ms"],
                         orphan_grace_ms=config["remote.log.table.orphan.grace.ms"],
                         catalog_properties=config.table_catalog_properties,
                         compaction=compaction)
        result.table_covered = run.covered
        result.table_compacted = run.compacted
        if run.error is not None:
            result.table_errors.append(run.error)

    def drop_table(self, logs: Sequence[TieredLog]) -> bool:
        """Drop the table of the topic incarnation whose partitions are ``logs`` (the topic is
        being deleted; before its remote data goes), when it has one. Holds every partition's
        lock, so no run of the topic is in its table step meanwhile, and the step never
        creates that incarnation's table again. False when there was none."""
        tier = self._tier
        if not logs or tier is None:
            return False
        tips = sorted((topic_id_partition(lg) for lg in logs), key=lambda t: t.partition)
        topic, topic_id = tips[0].topic, tips[0].topic_id
        with contextlib.ExitStack() as held:
            for tip in tips:
                held.enter_context(self._lock_for(tip))
            if not logs[0].config[TABLE_ENABLE]:  # a table kept from when it was enabled?
                parent, name = table_key(topic, topic_id).rsplit("/", 1)
                names = self._calls.call(f"{topic}: look for its table", lambda: (
                    tier.list_names(tier.path(parent), dirs=True)))
                if name not in names:
                    return False
            tables = self.tables()
            if tables is None:
                return False
            tables.drop(topic, topic_id, logs[0].config.table_catalog_properties)
            return True

    # -- bounded calls to the tier ---------------------------------------------------------

    def _is_paused(self, tip: TopicIdPartition) -> bool:
        with self._locks_lock:
            future = self._paused.get(tip)
            if future is not None and future.done():
                del self._paused[tip]
                future = None
        return future is not None

    def _meta(self, what: str, tip: TopicIdPartition, fn: Callable[[], _T]) -> _T:
        """A metadata call bounded by the request timeout; one abandoned pauses the partition
        until it returns (its write may still land: nothing may run beside it)."""
        def pause(future: Future[_T]) -> None:
            with self._locks_lock:
                self._paused[tip] = future
        return self._calls.call(f"{tip}: {what}", fn, pause)

    def _list(self, tip: TopicIdPartition) -> list[RemoteLogSegmentMetadata]:
        """The partition's segment metadata (a read: abandoning it pauses nothing)."""
        return self._calls.call(f"{tip}: list remote segments",
                                lambda: list(self.rlmm.list_remote_log_segments(tip)))

    def copy_lag_bytes(self, log_: TieredLog) -> int:
        """Local bytes of ``log_`` not yet copied to the tier (Kafka's RemoteCopyLagBytes
        counts the closed segments; this counts the active segment too, as the disk does)."""
        highest = log_.highest_offset_in_remote
        # values(start) bisects to the first segment not yet copied: cheap enough to run on
        # every tail check of every partition.
        return sum(s.size for s in log_.segments.values(highest + 1) if s.base_offset > highest)

    @property
    def abandoned_calls_total(self) -> int:
        """Calls to the tier abandoned on a timeout after they had started (a metric)."""
        return self._calls.abandoned_total

    def reader_queue_size(self) -> int:
        """Remote reads waiting for a reader thread (Kafka's RemoteLogReaderTaskQueueSize)."""
        return self._reader_pool.queue_size()

    def copy_candidates(self, log_: TieredLog) -> list[tuple[LogSegment, int]]:
        """(segment, next segment's base offset) for every closed segment not yet copied whose
        data is all below the last stable offset (Kafka: next base offset <= LSO) and not
        all below the log start offset (Kafka copies from the local log start: those records
        are deleted, the leader-epoch cache no longer covers them, and local retention
        removes the segment uncopied)."""
        segments = log_.segments.values()
        lso = log_.last_stable_offset
        highest = last_offset_off_local(log_.highest_offset_in_remote, log_.log_start_offset)
        out = []
        for segment, nxt in pairwise(segments):
            if nxt.base_offset > lso:
                break
            if nxt.base_offset - 1 > highest and segment.size > 0:
                out.append((segment, nxt.base_offset))
        return out

    def copy_segment(self, log_: TieredLog, segment: LogSegment,
                     next_base: int) -> RemoteLogSegmentMetadata:
        """Copy one closed segment of ``log_`` (offsets below ``next_base``) to the tier now,
        under the partition's lock, through the very path a tiering run copies with
        (COPY_SEGMENT_STARTED, its objects, COPY_SEGMENT_FINISHED). For a caller that must
        have one segment committed before it goes on: a point-in-time restore uploads the
        prefix of the segment its cut falls in before deleting that segment."""
        tip = topic_id_partition(log_)
        with self._lock_for(tip):
            return self._copy_counted(log_, tip, segment, next_base)

    def _copy_counted(self, log_: TieredLog, tip: TopicIdPartition, segment: LogSegment,
                      next_base: int) -> RemoteLogSegmentMetadata:
        with log_.stats.remote_copy(segment.size):
            return self._copy_segment(log_, tip, segment, next_base)

    def _copy_segments(self, log_: TieredLog, tip: TopicIdPartition, result: TierResult,
                       progress: Progress | None) -> None:
        for segment, next_base in self.copy_candidates(log_):
            metadata = self._copy_counted(log_, tip, segment, next_base)
            result.copied.append(metadata)
            if progress is not None:
                progress("copied", metadata)

    def _copy_segment(self, log_: TieredLog, tip: TopicIdPartition, segment: LogSegment,
                      next_base: int) -> RemoteLogSegmentMetadata:
        epochs = _segment_epochs(log_, segment.base_offset, next_base)
        # Kafka's copy quota check: wait while exceeded, and count the whole segment before
        # the copy starts, atomically with the check (no race of several copy threads).
        if not self.copy_quota.acquire(segment.size, self._closing):
            raise RemoteStorageError(
                f"{log_.directory.name}: closed while the copy of segment "
                f"{segment.base_offset} waited for the copy quota")
        metadata = RemoteLogSegmentMetadata(
            remote_log_segment_id=RemoteLogSegmentId.generate(tip),
            start_offset=segment.base_offset,
            end_offset=next_base - 1,
            max_timestamp_ms=segment.max_timestamp_so_far,
            event_timestamp_ms=self._time_ms(),
            segment_size_in_bytes=segment.size,
            segment_leader_epochs=epochs,
            txn_idx_empty=segment.txn_index.is_empty(),
            state=_STARTED,
        )
        self._meta(f"add COPY_STARTED of segment {segment.base_offset}", tip,
                   lambda: self.rlmm.add_remote_log_segment_metadata(metadata))
        with tempfile.TemporaryDirectory(prefix="tierlog-copy-") as scratch:
            snapshot = log_.producer_state.fetch_snapshot(next_base)
            if snapshot is None:
                snapshot = snapshot_file(Path(scratch), next_base)
                write_snapshot(snapshot, ())
            data = LogSegmentData(
                log_segment=segment.log.path,
                offset_index=segment.offset_index.path,
                time_index=segment.time_index.path,
                transaction_index=None if segment.txn_index.is_empty() else segment.txn_index.path,
                producer_snapshot_index=snapshot,
                leader_epoch_index=_epoch_checkpoint_bytes(log_, next_base),
                extra_indexes=segment.remote_extra_index_files(),
            )
            segment_id = metadata.remote_log_segment_id

            def abandon(future: Future[bytes | None]) -> None:
                with self._locks_lock:
                    self._abandoned[segment_id] = future
            custom = self._calls.call(
                f"{log_.directory.name}: copy of segment {segment.base_offset}",
                lambda: self.rsm.copy_log_segment_data(metadata, data), abandon)
        self._meta(f"commit COPY_FINISHED of segment {segment.base_offset}", tip,
                   lambda: self.rlmm.update_remote_log_segment_metadata(
                       RemoteLogSegmentMetadataUpdate(
                           remote_log_segment_id=metadata.remote_log_segment_id,
                           event_timestamp_ms=self._time_ms(), state=_FINISHED,
                           custom_metadata=custom)))
        log_.update_highest_offset_in_remote(metadata.end_offset)
        log.info("%s: copied segment %d-%d (%d bytes) to the remote tier",
                 log_.directory.name, metadata.start_offset, metadata.end_offset,
                 metadata.segment_size_in_bytes)
        self._emit("tierlog_segment_copied_to_remote", log_, metadata)
        return metadata

    def _remove_unfinished(self, log_: TieredLog, tip: TopicIdPartition) -> int:
        """Delete what failed or crashed copies (COPY_STARTED) and deletes (DELETE_STARTED)
        left in the tier; their metadata was never committed for readers. Also the tail
        objects a failed or crashed tail publish left unnamed by the tail manifest."""
        removed = 0
        if self.tail is not None and log_.config[TAIL_MS] >= 0:
            removed += self.tail.remove_orphans(tip)
        for metadata in self._list(tip):
            if self._still_abandoned(metadata):
                continue  # its upload may still write objects: cleaned once it returns
            if roll_back_unfinished(metadata, mark=self._update,
                                    delete=lambda m: self._delete_data(log_, m)):
                removed += 1
        return removed

    def _still_abandoned(self, metadata: RemoteLogSegmentMetadata) -> bool:
        with self._locks_lock:
            future = self._abandoned.get(metadata.remote_log_segment_id)
            if future is not None and future.done():
                del self._abandoned[metadata.remote_log_segment_id]
                future = None
        return future is not None

    # -- remote retention ----------------------------------------------------------------

    def _remote_retention(self, log_: TieredLog, tip: TopicIdPartition, result: TierResult) -> None:
        """Kafka's remote retention: segments below the log start offset, then retention.bytes
        over local-only + remote size, then retention.ms by each segment's max timestamp;
        oldest first, stopping at the first segment that stays."""
        config = log_.config
        now = self._time_ms()
        segments = [m for m in self._list(tip) if m.state is _FINISHED]
        lineage = _epoch_lineage(log_)
        retention_ms, retention_bytes = config["retention.ms"], config["retention.bytes"]
        local_only = sum(s.size for s in log_.segments.values()
                         if s.base_offset > log_.highest_offset_in_remote)
        excess = local_only + sum(m.segment_size_in_bytes for m in segments) - retention_bytes
        doomed: list[RemoteLogSegmentMetadata] = []
        for metadata in segments:
            below_start = metadata.end_offset < log_.log_start_offset
            off_lineage = (lineage is not None
                           and not set(metadata.segment_leader_epochs) & lineage)
            if below_start or off_lineage:
                doomed.append(metadata)
            elif retention_bytes >= 0 and excess - metadata.segment_size_in_bytes >= 0:
                doomed.append(metadata)
                excess -= metadata.segment_size_in_bytes
            elif retention_ms >= 0 and now - metadata.max_timestamp_ms > retention_ms:
                doomed.append(metadata)
            else:
                break
        new_start = min(max((m.end_offset for m in doomed), default=-1) + 1,
                        log_.log_end_offset)
        if doomed and not self._table_before_delete(log_, tip, new_start, result):
            return
        for metadata in doomed:
            self._update(metadata, _DELETE_STARTED)
            self._delete_data(log_, metadata)
            result.deleted_remote.append(metadata)
        if doomed:
            log_.maybe_increment_log_start_offset(new_start)
            log.info("%s: deleted %d remote segments; log start offset is now %d",
                     log_.directory.name, len(doomed), log_.log_start_offset)

    def _table_before_delete(self, log_: TieredLog, tip: TopicIdPartition, new_start: int,
                             result: TierResult) -> bool:
        """A table topic's files of the segments remote retention is about to delete leave
        its table first (the start moved to ``new_start``), so the current snapshot never
        names a deleted segment's rows; False (the segments stay this run) when that fails."""
        if not log_.config[TABLE_ENABLE]:
            return True
        tables = self.tables()
        if tables is None:
            return True
        try:
            tables.advance_start(tip, new_start, log_.config.table_catalog_properties)
        except Exception as exc:  # noqa: BLE001 - a table failure never fails the run
            result.table_errors.append(f"{tip}: table start {new_start} before remote "
                                       f"retention: {exc}; the segments stay this run")
            log.warning("%s", result.table_errors[-1])
            return False
        return True

    def _update(self, metadata: RemoteLogSegmentMetadata, state: RemoteLogSegmentState) -> None:
        tip = metadata.remote_log_segment_id.topic_id_partition
        self._meta(f"mark segment {metadata.start_offset} {state.name}", tip,
                   lambda: self.rlmm.update_remote_log_segment_metadata(
                       RemoteLogSegmentMetadataUpdate(
                           remote_log_segment_id=metadata.remote_log_segment_id,
                           event_timestamp_ms=self._time_ms(), state=state)))

    def _delete_data(self, log_: TieredLog, metadata: RemoteLogSegmentMetadata) -> None:
        # A delete abandoned on a timeout may finish later: harmless, it is repeated while
        # the metadata stays DELETE_STARTED.
        with log_.stats.remote_delete():
            self._calls.call(f"{log_.directory.name}: delete of segment {metadata.start_offset}",
                             lambda: self.rsm.delete_log_segment_data(metadata))
        self.index_cache.remove(metadata)
        self._update(metadata, _DELETE_FINISHED)
        self._emit("tierlog_remote_segment_deleted", log_, metadata)

    def _emit(self, hook_name: str, log_: TieredLog, metadata: RemoteLogSegmentMetadata) -> None:
        if self._events is not None:
            self._events.deliver(hook_name, RemoteSegmentEvent(
                log_.topic, log_.partition, log_.topic_id, metadata.start_offset,
                metadata.end_offset, metadata.segment_size_in_bytes, metadata))

    def delete_partition(self, log_: TieredLog) -> int:
        """Delete every remote segment of a log (its topic is being deleted)."""
        tip = topic_id_partition(log_)
        count = 0
        with self._lock_for(tip):
            for metadata in self._list(tip):
                if metadata.state in (_STARTED, _FINISHED):
                    self._update(metadata, _DELETE_STARTED)
                self._delete_data(log_, metadata)
                count += 1
            if self.tail is not None:
                self.tail.delete_partition(tip)
        return count

    # -- reads ---------------------------------------------------------------------------

    def submit_read(self, fn: Callable[[], _T], what: str = "remote read",
                    timeout_ms: int | None = None) -> _T:
        """Run a remote read on the bounded reader pool and wait for it at most
        ``timeout_ms`` (default ``remote.fetch.max.wait.ms``): RemoteReaderBusyError when
        the queue is full,
        RemoteFetchTimeoutError naming ``what`` when the read is late (both retriable; the
        late read's thread finishes on its own, its result dropped)."""
        future = self._reader_pool.submit(fn)
        if timeout_ms is None:
            timeout_ms = self.limits.fetch_max_wait_ms
        return wait_bounded(future, timeout_ms / 1000, what,
                            RemoteFetchTimeoutError)

    def close(self) -> None:
        """Stop tiering and reads: queued runs are cancelled, runs already going are given
        ``shutdown_timeout_s`` (one hung on the remote tier is then abandoned, as Kafka
        does), and the tier is closed, so a late remote call fails instead of committing."""
        self._closing.set()
        self.copy_quota.close()
        self._copy_pool.shutdown(wait=False, cancel_futures=True)
        self._reader_pool.close()
        self._calls.close()
        if self.tail is not None:
            self.tail.close(self.shutdown_timeout_s)
        with self._locks_lock:
            runs = list(self._runs)
        _, hung = wait_for_futures(runs, timeout=self.shutdown_timeout_s)
        if hung:
            log.warning("closing with %d tiering runs still waiting on the remote tier after "
                        "%.1f s; abandoning them", len(hung), self.shutdown_timeout_s)
        self.index_cache.close()
        self.rsm.close()
        self.rlmm.close()


def _segment_epochs(log_: TieredLog, start: int, next_base: int) -> dict[int, int]:
    """Leader epoch -> first offset of that epoch within [start, next_base) (Kafka)."""
    entries = log_.leader_epoch_cache.entries()
    epochs: dict[int, int] = {}
    for i, entry in enumerate(entries):
        entry_end = entries[i + 1].start_offset if i + 1 < len(entries) else None
        if entry.start_offset >= next_base or (entry_end is not None and entry_end <= start):
            continue
        epochs[entry.epoch] = max(entry.start_offset, start)
    if not epochs:
        raise RemoteStorageError(
            f"{log_.directory.name}: segment {start}-{next_base - 1} has no leader epoch; "
            f"tiered storage needs batches written with a leader epoch"
        )
    return epochs


def _epoch_checkpoint_bytes(log_: TieredLog, end: int) -> bytes:
    """The leader-epoch checkpoint as it stood at ``end`` (Kafka's text format)."""
    return encode_leader_epoch_checkpoint(
        e for e in log_.leader_epoch_cache.entries() if e.start_offset < end)


def _epoch_lineage(log_: TieredLog) -> set[int] | None:
    """The epochs of the log's current lineage (None when the log has no epochs yet)."""
    entries = log_.leader_epoch_cache.entries()
    return {e.epoch for e in entries} if entries else None

