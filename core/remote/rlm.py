"""RemoteLogManager: copies closed segments to the remote tier, serves old offsets back from it,
and enforces retention over the whole (local + remote) log, with Kafka's KIP-405 semantics.

A Log with tiered storage gets a ``remote`` reader attached; ``Log.read`` below the local log
start offset and ``offset_for_timestamp`` go through it transparently.
"""

from __future__ import annotations

import logging
import socket
import tempfile
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import wait as wait_for_futures
from dataclasses import dataclass, field
from itertools import pairwise
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

from tierlog.checkpoint import encode_leader_epoch_checkpoint
from tierlog.errors import RemoteStorageError
from tierlog.events import EventDelivery, RemoteSegmentEvent
from tierlog.producer_snapshot import write_snapshot
from tierlog.remote.api import (
    LogSegmentData,
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemoteLogSegmentState,
    RemoteStorageManager,
    TopicIdPartition,
)
from tierlog.remote.backfill_commit import DEFAULT_STAGING_RETENTION_MS, BackfillCommitter
from tierlog.remote.index_cache import RemoteIndexCache
from tierlog.remote.log_protocol import TieredLog
from tierlog.remote.metadata_api import RemoteLogMetadataStore
from tierlog.remote.object_store import RemoteTier
from tierlog.remote.ownership import record_owner, tier_of
from tierlog.remote.remote_reader import RemoteLogReader, topic_id_partition
from tierlog.remote.tail import TAIL_MS, TailPublisher

if TYPE_CHECKING:
    from tierlog.segment import LogSegment

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


@dataclass(slots=True)
class TierResult:
    """What one tiering run did for one log."""

    copied: list[RemoteLogSegmentMetadata] = field(default_factory=list)
    deleted_remote: list[RemoteLogSegmentMetadata] = field(default_factory=list)
    orphans_removed: int = 0
    errors: list[str] = field(default_factory=list)


class RemoteLogManager:
    """Tiering for every log with ``remote.storage.enable``. Thread-safe.

    Copies run per partition in order (a partition is copied by one thread at a time) on a
    pool of ``copy_threads``, never on the caller's thread when submitted with
    :meth:`submit_tiering` (the scheduler's task), so a hung remote tier stalls no flush,
    retention or checkpoint; remote reads run on a pool of ``reader_threads`` so their number
    is bounded. ``close`` waits at most ``shutdown_timeout_s`` for runs already going.
    ``events`` delivers lifecycle events to plugins (or None).
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
    ) -> None:
        self.rsm = rsm
        self.rlmm = rlmm
        self.index_cache = index_cache
        self._time_ms = time_ms
        self._events = events
        self._copy_pool = ThreadPoolExecutor(copy_threads, thread_name_prefix="tierlog-copy")
        self._reader_pool = ThreadPoolExecutor(reader_threads, thread_name_prefix="tierlog-fetch")
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
        self.tail: TailPublisher | None = (
            TailPublisher(tier, self._lock_for, time_ms=time_ms, threads=copy_threads)
            if isinstance(tier, RemoteTier) else None)

    # -- attaching logs ------------------------------------------------------------------

    def attach(self, log_: TieredLog) -> None:
        """Give a tiered log its remote reader and what the tier already holds of it."""
        tip = topic_id_partition(log_)
        # The metadata first: a tier that refuses us fails here with the store's message.
        copied = [m for m in self.rlmm.list_remote_log_segments(tip) if m.state is _FINISHED]
        tier = tier_of(self.rlmm) or tier_of(self.rsm)
        if tier is not None:  # a backfill must not write the partition behind our back
            record_owner(tier, tip, f"LogManager on {socket.gethostname()}:"
                         f"{log_.directory.parent}", self._time_ms())
            self._sweep_backfill_staging(tier)
        highest = max((m.end_offset for m in copied), default=-1)
        log_.attach_remote(RemoteLogReader(self, log_), highest)
        log.info("%s: tiered storage attached (remote holds offsets up to %d)",
                 log_.directory.name, highest)

    def _sweep_backfill_staging(self, tier: RemoteTier) -> None:
        """Once per RemoteLogManager (its first attach), the unfinished-upload sweep of the
        backfill: delete the staging of crashed Spark jobs (``_staging/<job>``, unmodified for
        a day; a job record awaiting its roll-forward keeps its staging)."""
        with self._locks_lock:
            if self._staging_swept:
                return
            self._staging_swept = True
        committer = BackfillCommitter(tier, time_ms=self._time_ms)
        try:
            swept = committer.sweep_staging(DEFAULT_STAGING_RETENTION_MS)
        finally:
            committer.close()
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
        for log_ in logs:
            name = log_.directory.name
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
        """One tiering run for one log: clean up failed copies, copy, remote retention."""
        result = TierResult()
        tip = topic_id_partition(log_)
        with self._lock_for(tip):
            try:
                result.orphans_removed = self._remove_unfinished(log_, tip)
                # Readers of the tier start at the log start offset (DeleteRecords, retention).
                self.rlmm.update_log_start_offset(tip, log_.log_start_offset)
                self._copy_segments(log_, tip, result, progress)
                self._remote_retention(log_, tip, result)
            except (RemoteStorageError, OSError) as exc:
                result.errors.append(str(exc))
                log.warning("%s: tiering stopped: %s", log_.directory.name, exc)
        return result

    def copy_candidates(self, log_: TieredLog) -> list[tuple[LogSegment, int]]:
        """(segment, next segment's base offset) for every closed segment not yet copied whose
        data is all below the last stable offset (Kafka: next base offset <= LSO)."""
        segments = log_.segments.values()
        lso = log_.last_stable_offset
        highest = log_.highest_offset_in_remote
        out = []
        for segment, nxt in pairwise(segments):
            if nxt.base_offset > lso:
                break
            if nxt.base_offset - 1 > highest and segment.size > 0:
                out.append((segment, nxt.base_offset))
        return out

    def _copy_segments(self, log_: TieredLog, tip: TopicIdPartition, result: TierResult,
                       progress: Progress | None) -> None:
        for segment, next_base in self.copy_candidates(log_):
            metadata = self._copy_segment(log_, tip, segment, next_base)
            result.copied.append(metadata)
            if progress is not None:
                progress("copied", metadata)

    def _copy_segment(self, log_: TieredLog, tip: TopicIdPartition, segment: LogSegment,
                      next_base: int) -> RemoteLogSegmentMetadata:
        epochs = _segment_epochs(log_, segment.base_offset, next_base)
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
        self.rlmm.add_remote_log_segment_metadata(metadata)
        with tempfile.TemporaryDirectory(prefix="tierlog-copy-") as scratch:
            snapshot = log_.producer_state.fetch_snapshot(next_base)
            if snapshot is None:
                snapshot = Path(scratch) / f"{next_base:020d}.snapshot"
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
            custom = self.rsm.copy_log_segment_data(metadata, data)
        self.rlmm.update_remote_log_segment_metadata(RemoteLogSegmentMetadataUpdate(
            remote_log_segment_id=metadata.remote_log_segment_id,
            event_timestamp_ms=self._time_ms(), state=_FINISHED, custom_metadata=custom,
        ))
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
        for metadata in self.rlmm.list_remote_log_segments(tip):
            if metadata.state is _STARTED:
                self._update(metadata, _DELETE_STARTED)
            if metadata.state in (_STARTED, _DELETE_STARTED):
                self._delete_data(log_, metadata)
                removed += 1
        return removed

    # -- remote retention ----------------------------------------------------------------

    def _remote_retention(self, log_: TieredLog, tip: TopicIdPartition, result: TierResult) -> None:
        """Kafka's remote retention: segments below the log start offset, then retention.bytes
        over local-only + remote size, then retention.ms by each segment's max timestamp;
        oldest first, stopping at the first segment that stays."""
        config = log_.config
        now = self._time_ms()
        segments = [m for m in self.rlmm.list_remote_log_segments(tip) if m.state is _FINISHED]
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
        for metadata in doomed:
            self._update(metadata, _DELETE_STARTED)
            self._delete_data(log_, metadata)
            result.deleted_remote.append(metadata)
        if doomed:
            new_start = max(m.end_offset for m in doomed) + 1
            log_.maybe_increment_log_start_offset(min(new_start, log_.log_end_offset))
            log.info("%s: deleted %d remote segments; log start offset is now %d",
                     log_.directory.name, len(doomed), log_.log_start_offset)

    def _update(self, metadata: RemoteLogSegmentMetadata, state: RemoteLogSegmentState) -> None:
        self.rlmm.update_remote_log_segment_metadata(RemoteLogSegmentMetadataUpdate(
            remote_log_segment_id=metadata.remote_log_segment_id,
            event_timestamp_ms=self._time_ms(), state=state,
        ))

    def _delete_data(self, log_: TieredLog, metadata: RemoteLogSegmentMetadata) -> None:
        self.rsm.delete_log_segment_data(metadata)
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
            for metadata in self.rlmm.list_remote_log_segments(tip):
                if metadata.state in (_STARTED, _FINISHED):
                    self._update(metadata, _DELETE_STARTED)
                self._delete_data(log_, metadata)
                count += 1
            if self.tail is not None:
                self.tail.delete_partition(tip)
        return count

    # -- reads ---------------------------------------------------------------------------

    def submit_read(self, fn: Callable[[], _T]) -> _T:
        """Run a remote read on the bounded reader pool and wait for it."""
        return self._reader_pool.submit(fn).result()

    def close(self) -> None:
        """Stop tiering and reads: queued runs are cancelled, runs already going are given
        ``shutdown_timeout_s`` (one hung on the remote tier is then abandoned, as Kafka
        does), and the tier is closed, so a late remote call fails instead of committing."""
        self._copy_pool.shutdown(wait=False, cancel_futures=True)
        self._reader_pool.shutdown(wait=False, cancel_futures=True)
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

