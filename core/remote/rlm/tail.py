"""Tail publishing: the flushed data below the high watermark that no committed remote segment
holds yet (the active segment and closed segments not yet copied), published to the tier as
immutable tail objects so that readers of the tier need not wait for a segment to close.

One publish of one partition (:meth:`TailPublisher.publish`):

1. drop the objects whose offsets the committed segments now hold, or that lie below the log
   start offset (DeleteRecords, retention), and those a truncation of the local log removed
   (their last batch no longer matches the local log: position, leader epoch and CRC);
2. flush the local log up to the end of what will be published (only flushed data goes out:
   a crash can never leave the tier holding data the log lost);
3. upload the NEW whole batches below the high watermark as new objects (never rewriting one);
4. replace ``_tail.json`` (one atomic PUT; see ``tierlog.remote.tier.tail_manifest``) with the new
   list, high watermark, last stable offset and aborted transactions, unless it would say
   exactly what it says now;
5. delete the dropped objects.

A crash or failure between 3 and 4 leaves objects no manifest names: they are orphans,
deleted by the next tiering run's sweep of unfinished uploads (:meth:`remove_orphans`, called
by ``RemoteLogManager._remove_unfinished``), which lists ``_tail/`` only when something may
have been left behind (first sight of a partition, a failed publish). The scheduler's task
(``LogManager``) calls :meth:`submit_due` every ``remote.log.tail.check.interval.ms``: a
partition is published at most once per ``remote.log.tail.ms``, and never when nothing changed
(high watermark, last stable offset, log start, committed end, log end), on the publisher's
own thread, so a slow tier delays no append, flush or tiering run.

Every call to the tier is bounded by ``remote.storage.request.timeout.ms`` (through
``tierlog.remote.rlm.deadline.RemoteCalls``, on call threads of the publisher's own): a hung tier
fails the publish with a RemoteTimeoutError (retried at the next interval) and releases the
partition's lock, so neither the scheduler, the partition's tiering runs nor shutdown wait on
it. A call abandoned after it started may still land (an object, or a manifest that would
replace a newer one): the partition's publishing and orphan sweep pause until it returns,
then the stored manifest is read again and the orphans swept.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import wait as wait_for_futures
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any, TypeVar

from tierlog.errors import (
    CorruptRecordError,
    MetadataConflictError,
    RemoteStorageError,
    TierFencedError,
)
from tierlog.index.aborted_txns import collect_aborted_txns
from tierlog.index.transaction_index import AbortedTxn
from tierlog.records.batch import HEADER_SIZE, LOG_OVERHEAD, walk_headers
from tierlog.remote.api import TopicIdPartition, new_uuid_text
from tierlog.remote.rlm.deadline import RemoteCalls
from tierlog.remote.rlm.remote_reader import topic_id_partition
from tierlog.remote.tier.layout import (
    is_tail_object_name,
    tail_dir_key,
    tail_manifest_key,
    tail_object_key,
    tail_object_name,
)
from tierlog.remote.tier.object_store import RemoteTier
from tierlog.remote.tier.tail_manifest import TailManifest, TailObject, read_tail_manifest

if TYPE_CHECKING:
    from tierlog.log.segment import LogSegment
    from tierlog.remote.log_protocol import TieredLog

log = logging.getLogger(__name__)
_T = TypeVar("_T")

#: Largest tail object: a publish of more new bytes than this uploads several objects.
MAX_TAIL_OBJECT_BYTES = 64 << 20
TAIL_MS = "remote.log.tail.ms"


@dataclass(slots=True)
class _PartitionState:
    """What the publisher knows of one partition: its stored manifest (None: none yet, or not
    known after a failure: read it again), when it last tried, and what it saw then."""

    manifest: TailManifest | None = None
    loaded: bool = False
    needs_sweep: bool = True
    last_attempt_ms: int | None = None
    last_key: tuple[int, ...] | None = None
    #: A call to the tier abandoned on a timeout after it started, until it returns.
    abandoned: Future[Any] | None = None
    #: The stored manifest's version as last read or written (a fenced publisher's swap).
    version: str | None = None

    def paused(self) -> bool:
        """Whether an abandoned call may still write to the tier (nothing may run beside it);
        once it has returned, the stored manifest is read again and the orphans swept."""
        if self.abandoned is None:
            return False
        if not self.abandoned.done():
            return True
        self.abandoned, self.loaded, self.needs_sweep = None, False, True
        return False


@dataclass(frozen=True, slots=True)
class _View:
    """The log's offsets and segments read as one view under its lock."""

    high_watermark: int
    last_stable_offset: int
    log_start_offset: int
    tier_end: int
    recovery_point: int
    segments: tuple[tuple[LogSegment, int], ...]
    """(segment, its size) of every local segment."""


def change_key(log_: TieredLog) -> tuple[int, ...]:
    """What a publish depends on; equal keys mean nothing changed for the tail."""
    active = log_.segments.active
    return (log_.high_watermark, log_.last_stable_offset, log_.log_start_offset,
            log_.highest_offset_in_remote, log_.log_end_offset, active.base_offset,
            active.size)


class TailPublisher:
    """Publishes the tails of tiered partitions to ``tier`` (see the module docstring).
    ``lock_for(tip)`` is the RemoteLogManager's per-partition lock: a publish and a tiering
    run of one partition never overlap. Each call to the tier is waited for at most
    ``request_timeout_s`` (``remote.storage.request.timeout.ms``). Thread-safe."""

    def __init__(self, tier: RemoteTier, lock_for: Callable[[TopicIdPartition], threading.Lock],
                 *, time_ms: Callable[[], int], threads: int = 1,
                 request_timeout_s: float = 30.0, fenced: bool = False,
                 on_fenced: Callable[[TopicIdPartition], None] | None = None) -> None:
        self.tier = tier
        #: A replicated partition's leader (issue 24): ``_tail.json`` is replaced only by
        #: compare-and-swap on the version this node last read or wrote (:meth:`claim`); a
        #: lost swap calls ``on_fenced(tip)`` (the node stops writing the partition's tier).
        self.fenced = fenced
        self._on_fenced = on_fenced
        self._lock_for = lock_for
        self._time_ms = time_ms
        self._states: dict[TopicIdPartition, _PartitionState] = {}
        self._lock = threading.Lock()
        self._pool = ThreadPoolExecutor(threads, thread_name_prefix="tierlog-tail")
        self._calls = RemoteCalls(threads, request_timeout_s, name="tierlog-tail-call")
        self._runs: set[Future[bool]] = set()
        self._in_flight: set[TopicIdPartition] = set()

    def _state(self, tip: TopicIdPartition) -> _PartitionState:
        with self._lock:
            return self._states.setdefault(tip, _PartitionState())

    def _call(self, tip: TopicIdPartition, what: str, fn: Callable[[], _T]) -> _T:
        """``fn()`` (a call to the tier) bounded by the request timeout; one abandoned after
        it started pauses the partition's publishing until it returns."""
        state = self._state(tip)

        def pause(future: Future[_T]) -> None:
            state.abandoned = future
        return self._calls.call(f"{tip}: tail: {what}", fn, pause)

    # -- scheduling ---------------------------------------------------------------------

    def due(self, log_: TieredLog, now_ms: int) -> bool:
        """Whether the log's tail should be published now: tail publishing is on for its
        topic, its interval has passed since the last attempt, and something changed."""
        interval = log_.config[TAIL_MS]
        if interval < 0:
            return False
        state = self._state(topic_id_partition(log_))
        if state.last_attempt_ms is not None and now_ms - state.last_attempt_ms < interval:
            return False
        if state.paused():
            return False
        with log_.lock:
            key = change_key(log_)
        return key != state.last_key

    def submit_due(self, logs: Sequence[TieredLog]) -> list[str]:
        """Start a publish on the publisher's thread for every log that is :meth:`due` and
        has none going; returns their directory names."""
        now = self._time_ms()
        submitted = []
        for log_ in logs:
            tip = topic_id_partition(log_)
            with self._lock:
                if tip in self._in_flight:
                    continue
            if not self.due(log_, now):
                continue
            with self._lock:
                self._in_flight.add(tip)
            future = self._pool.submit(self._run, log_, tip)
            with self._lock:
                self._runs.add(future)
            future.add_done_callback(self._forget)
            submitted.append(log_.directory.name)
        return submitted

    def _run(self, log_: TieredLog, tip: TopicIdPartition) -> bool:
        try:
            return self.publish(log_)
        finally:
            with self._lock:
                self._in_flight.discard(tip)

    def _forget(self, future: Future[bool]) -> None:
        with self._lock:
            self._runs.discard(future)

    def await_publishing(self, timeout_s: float | None = None) -> bool:
        """Wait until every publish submitted so far has finished; False on timeout."""
        with self._lock:
            runs = list(self._runs)
        _, pending = wait_for_futures(runs, timeout=timeout_s)
        return not pending

    def close(self, timeout_s: float) -> None:
        """Stop publishing: queued publishes are cancelled, those going are given
        ``timeout_s`` (each of their calls is bounded anyway), and no new call starts."""
        self._pool.shutdown(wait=False, cancel_futures=True)
        self.await_publishing(timeout_s)
        self._calls.close()

    # -- publishing ---------------------------------------------------------------------

    def publish(self, log_: TieredLog) -> bool:
        """Publish the log's tail now (see the module docstring). Returns True when the tail
        manifest was replaced. A tier or local read failure is logged and leaves the stored
        tail as it was (retried at the next interval); it never raises."""
        tip = topic_id_partition(log_)
        state = self._state(tip)
        if state.paused():
            log.debug("%s: tail publishing waits for an abandoned call to the tier",
                      log_.directory.name)
            return False
        with log_.lock:
            state.last_key = change_key(log_)
        state.last_attempt_ms = self._time_ms()
        try:
            with self._lock_for(tip):
                return self._publish(log_, tip, state)
        except (RemoteStorageError, OSError, CorruptRecordError, ValueError) as exc:
            state.loaded = False  # the stored manifest may or may not have been replaced
            state.needs_sweep = True
            state.last_key = None
            log.warning("%s: tail publishing failed (retried in %d ms): %s",
                        log_.directory.name, log_.config[TAIL_MS], exc)
            return False

    def claim(self, tip: TopicIdPartition) -> None:
        """A new leader's first tail action (the caller holds the partition's lock): read the
        stored ``_tail.json`` and write it back as the next generation by compare-and-swap,
        so a publish of an older leader fails its own swap (TierFencedError when this one
        loses it)."""
        if not self.fenced:
            return
        state = self._state(tip)
        path = self.tier.path(tail_manifest_key(tip))
        found = self._call(tip, "read the tail manifest", lambda: self.tier.read_versioned(path))
        if found is None:
            state.manifest, state.version, state.loaded = None, None, True
            return
        stored = TailManifest.from_json(found[0], path)
        claimed = dataclasses.replace(stored, generation=stored.generation + 1)
        state.version = self._swap(tip, path, claimed, found[1])
        state.manifest, state.loaded = claimed, True

    def _swap(self, tip: TopicIdPartition, path: str, manifest: TailManifest,
              expected: str | None) -> str:
        try:
            return self._call(tip, f"swap tail generation {manifest.generation}", partial(
                self.tier.replace_if, manifest.to_json().encode(), path, expected))
        except MetadataConflictError as exc:
            if self._on_fenced is not None:
                self._on_fenced(tip)
            raise TierFencedError(f"{tip}: {path} changed since this node last read or wrote "
                                  f"it: another node leads the partition ({exc})") from exc

    def _load(self, tip: TopicIdPartition, state: _PartitionState) -> None:
        if not self.fenced:
            state.manifest = self._call(tip, "read the tail manifest",
                                        lambda: read_tail_manifest(self.tier, tip))
            return
        path = self.tier.path(tail_manifest_key(tip))
        found = self._call(tip, "read the tail manifest", lambda: self.tier.read_versioned(path))
        state.manifest = None if found is None else TailManifest.from_json(found[0], path)
        state.version = None if found is None else found[1]

    def _publish(self, log_: TieredLog, tip: TopicIdPartition, state: _PartitionState) -> bool:
        if not state.loaded:
            self._load(tip, state)
            state.loaded = True
        old = state.manifest
        view = _read_view(log_)
        kept, dropped = _surviving_objects(old, view)
        new_objects, end = self._upload_new(log_, tip, view, kept)
        if not kept and not new_objects:
            end = max(end, view.tier_end)
        published_end = min(view.high_watermark, end)
        objects = (*kept, *new_objects)
        first = objects[0].first_offset if objects else published_end
        manifest = TailManifest(
            tip, (old.generation + 1) if old else 1,
            high_watermark=published_end,
            last_stable_offset=min(view.last_stable_offset, published_end),
            log_start_offset=view.log_start_offset, tier_end=view.tier_end,
            objects=objects,
            aborted=_aborted_txns(view, first, published_end),
        )
        if manifest.same_content(old):
            return False
        path = self.tier.path(tail_manifest_key(tip))
        if self.fenced:
            state.version = self._swap(tip, path, manifest, state.version)
        else:
            self._call(tip, f"write tail generation {manifest.generation}",
                       partial(self.tier.put_bytes, manifest.to_json().encode(), path))
        state.manifest = manifest
        for obj in dropped:
            self._call(tip, f"delete tail object {obj.name}", partial(
                self.tier.delete, self.tier.path(tail_object_key(tip, obj.name))))
        log.debug("%s: published tail generation %d up to offset %d (%d objects, %d new)",
                  log_.directory.name, manifest.generation, published_end, len(objects),
                  len(new_objects))
        return True

    def _upload_new(self, log_: TieredLog, tip: TopicIdPartition, view: _View,
                    kept: Sequence[TailObject]) -> tuple[list[TailObject], int]:
        """Upload the whole batches below the high watermark after ``kept`` (flushing the
        log up to the high watermark first); returns the new objects and the end (exclusive)
        of the published data."""
        if kept:
            last = kept[-1]
            end = last.end_offset
            resume = (last.segment, last.position + last.size)
        else:
            end = max(view.tier_end, view.log_start_offset)
            resume = None
        if end >= view.high_watermark:
            return [], end
        if view.recovery_point < view.high_watermark:
            log_.flush(view.high_watermark)  # only flushed data is published
        objects: list[TailObject] = []
        for i, (segment, size) in enumerate(view.segments):
            base = segment.base_offset
            next_base = view.segments[i + 1][0].base_offset if i + 1 < len(view.segments) \
                else 1 << 63
            if base >= view.high_watermark:
                break
            if resume is not None:
                if base < resume[0]:
                    continue
                position = resume[1] if base == resume[0] else 0
            else:
                if next_base <= end:
                    continue  # wholly below where the tail starts
                found = segment.translate_offset(end) if base < end else None
                if base < end and found is None:
                    continue
                position = found.position if found is not None else 0
            for piece in _pieces_below(segment, position, size, view.high_watermark):
                name = tail_object_name(piece.first, piece.end, new_uuid_text())
                self._call(tip, f"upload tail object {name}", partial(
                    self.tier.put_bytes, piece.data, self.tier.path(tail_object_key(tip, name))))
                objects.append(TailObject(name, piece.first, piece.end, len(piece.data),
                                          base, piece.position, piece.max_timestamp,
                                          piece.last_batch))
                end = piece.end
        return objects, end

    # -- orphans and deletion -------------------------------------------------------------

    def remove_orphans(self, tip: TopicIdPartition) -> int:
        """Delete the tail objects the stored tail manifest does not name (a publish that
        failed or crashed between upload and manifest), when something may have been left
        behind; the caller holds the partition's lock. Returns how many were deleted."""
        state = self._state(tip)
        if state.paused() or not state.needs_sweep:
            return 0  # paused: an abandoned call may still write what the sweep would judge
        stored = self._call(tip, "read the tail manifest",
                            lambda: read_tail_manifest(self.tier, tip))
        named = {o.name for o in stored.objects} if stored else set()
        directory = self.tier.path(tail_dir_key(tip))
        removed = 0
        for name in self._call(tip, "list tail objects",
                               lambda: self.tier.list_names(directory)):
            if is_tail_object_name(name) and name not in named:
                self._call(tip, f"delete orphaned tail object {name}",
                           partial(self.tier.delete, f"{directory}/{name}"))
                removed += 1
        state.manifest, state.loaded, state.needs_sweep = stored, True, False
        if removed:
            log.info("%s: deleted %d orphaned tail objects", tip, removed)
        return removed

    def delete_partition(self, tip: TopicIdPartition) -> None:
        """Delete the partition's tail manifest, then every tail object (topic deletion);
        the caller holds the partition's lock."""
        self._call(tip, "delete the tail manifest",
                   partial(self.tier.delete, self.tier.path(tail_manifest_key(tip))))
        directory = self.tier.path(tail_dir_key(tip))
        for name in self._call(tip, "list tail objects",
                               lambda: self.tier.list_names(directory)):
            if is_tail_object_name(name):
                self._call(tip, f"delete tail object {name}",
                           partial(self.tier.delete, f"{directory}/{name}"))
        with self._lock:
            self._states.pop(tip, None)


def _read_view(log_: TieredLog) -> _View:
    with log_.lock:
        return _View(log_.high_watermark, log_.last_stable_offset, log_.log_start_offset,
                     log_.highest_offset_in_remote + 1, log_.recovery_point,
                     tuple((s, s.size) for s in log_.segments.values()))


def _surviving_objects(old: TailManifest | None, view: _View
                       ) -> tuple[list[TailObject], list[TailObject]]:
    """(kept, dropped): objects the committed segments or the log start made redundant are
    dropped, and so is every object from the first whose last batch the local log no longer
    holds as published (a truncation)."""
    if old is None:
        return [], []
    kept: list[TailObject] = []
    dropped: list[TailObject] = []
    sizes = {s.base_offset: (s, size) for s, size in view.segments}
    truncated = False
    for obj in old.objects:
        if obj.end_offset <= max(view.tier_end, view.log_start_offset):
            dropped.append(obj)
        elif truncated or not _still_holds(sizes.get(obj.segment), obj):
            truncated = True
            dropped.append(obj)
        elif obj.end_offset > view.high_watermark:
            truncated = True  # the high watermark went back below published data
            dropped.append(obj)
        else:
            kept.append(obj)
    return kept, dropped


def _still_holds(found: tuple[LogSegment, int] | None, obj: TailObject) -> bool:
    """Whether the local segment still holds the object's last batch as it was published."""
    if found is None:
        return False
    segment, size = found
    position, epoch, crc = obj.last_batch
    header = _read_bytes(segment, position, HEADER_SIZE) if position + HEADER_SIZE <= size \
        else b""
    try:
        for _, fields in walk_headers(header):
            return (fields[0] + fields[6] + 1 == obj.end_offset and fields[2] == epoch
                    and fields[4] == crc and position + fields[1] + LOG_OVERHEAD
                    == obj.position + obj.size <= size)
    except CorruptRecordError:  # rewritten since: no batch starts there any more
        return False
    return False


@dataclass(frozen=True, slots=True)
class _Piece:
    """Whole batches ``data`` read from ``position`` of a local segment."""

    position: int
    data: bytes
    first: int
    end: int
    max_timestamp: int
    last_batch: tuple[int, int, int]


def _pieces_below(segment: LogSegment, position: int, size: int, high_watermark: int
                  ) -> list[_Piece]:
    """The bytes of ``segment`` from ``position`` (up to its ``size`` then) that hold whole
    batches all below the high watermark, in pieces of at most MAX_TAIL_OBJECT_BYTES (a
    batch larger than that is a piece of its own)."""
    pieces: list[_Piece] = []
    while position < size:
        data = _read_bytes(segment, position, min(size - position, MAX_TAIL_OBJECT_BYTES))
        headers = list(walk_headers(data))
        if headers and headers[0][1][1] + LOG_OVERHEAD > len(data):
            data = _read_bytes(segment, position, headers[0][1][1] + LOG_OVERHEAD)
            headers = headers[:1]
        stop, first, end, max_ts, last = 0, -1, -1, -1, (0, 0, 0)
        reached = False
        for at, fields in headers:
            batch_end = at + fields[1] + LOG_OVERHEAD
            last_offset = fields[0] + fields[6]
            if last_offset >= high_watermark:
                reached = True
                break
            if batch_end > len(data):
                break
            first = fields[0] if first < 0 else first
            end, max_ts = last_offset + 1, max(max_ts, fields[8])
            last, stop = (position + at, fields[2], fields[4]), batch_end
        if stop == 0:
            break
        pieces.append(_Piece(position, data[:stop], first, end, max_ts, last))
        if reached:
            break
        position += stop
    return pieces


def _read_bytes(segment: LogSegment, position: int, size: int) -> bytes:
    buffer = bytearray(size)
    got = segment.log.read_into(buffer, position)
    if got < size:
        raise CorruptRecordError(
            f"{segment.log.path}: {size} bytes at position {position} expected, {got} read "
            f"(truncated while publishing its tail?)")
    return bytes(buffer)


def _aborted_txns(view: _View, first: int, end: int) -> tuple[AbortedTxn, ...]:
    """The aborted transactions a read of ``[first, end)`` needs, collected by the one rule
    of every read path (``tierlog.index.aborted_txns``) from the local segments holding that
    range; only those whose ABORT marker is published (below ``end``)."""
    if first >= end:
        return ()
    sources = [segment for i, (segment, _) in enumerate(view.segments)
               if i + 1 == len(view.segments) or view.segments[i + 1][0].base_offset > first]
    return tuple(t for t in collect_aborted_txns(sources, first, end) if t.last_offset < end)
