"""The driver side of a backfill: a job's staged chunks become committed remote segments,
all of them or none, visible to every reader at once (tierlog.remote.ops.backfill_visibility).

Commit, for a job whose tasks all succeeded (only the chunks of the commit messages count,
so a failed or speculative attempt's leftovers never do):

1. Roll forward any job record a crashed commit left (step 3 on), and clean what crashed
   jobs left unfinished in the partitions this job writes.
2. Plan: per topic-partition, the chunks in a deterministic order (Spark partition id, then
   chunk index) get contiguous offsets from the partition's end (its committed segments'
   end, 0 for a new partition) and a segment id; the leader epoch is the partition's latest
   (0 when new). Every segment is tagged with the job id and the job's generation (the
   tier's generation counter + 1) in its custom metadata.
3. Write the job record ``_jobs/<job id>.json`` (the plan): from here the commit is rolled
   forward by whoever finds the record (the next writer, ``recover``), never back. Then
   raise the generation counter to the job's.
4. Per partition: each segment's metadata as COPY_SEGMENT_STARTED, its objects (the
   ``.log`` with every batch's baseOffset and partitionLeaderEpoch rewritten, the relative
   indexes as staged, an empty producer snapshot, the leader-epoch checkpoint), then one
   manifest replace that makes all of them COPY_SEGMENT_FINISHED at once; a new topic's
   partitions without data get their (empty) manifest.
5. A streaming write records its batch id (``_streams/<id>.json``); then the job's staging
   and its record are deleted: deleting the record publishes the job.

Readers hide every segment of a job whose record they listed (or whose generation is newer
than the counter they read first), so a job half-applied by a crash, or being applied, is
invisible in every partition until its record goes; the next commit, ``recover`` or a
restore rolls it forward (a job record is the only state that may be half-applied, and it
is applied idempotently). One job commits into a tier at a time.
"""

from __future__ import annotations

import contextlib
import logging
import os
import tempfile
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, BinaryIO, Protocol

from tierlog.checkpoint.checkpoint_file import EpochEntry, encode_leader_epoch_checkpoint
from tierlog.errors import (
    CorruptRecordError,
    CorruptRemoteMetadataError,
    RemoteResourceNotFoundError,
)
from tierlog.producer.snapshot import encode_snapshot
from tierlog.records.batch import (
    LOG_OVERHEAD,
    PARTITION_LEADER_EPOCH,
    set_base_offset,
    set_partition_leader_epoch,
)
from tierlog.remote.api import (
    IndexType,
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemoteLogSegmentState,
    TopicIdPartition,
    dumps,
    load_json_object,
)
from tierlog.remote.metadata.metadata import RemoteLogMetadataManager
from tierlog.remote.ops.backfill_stage import CHUNK_SUFFIXES, StagedChunk
from tierlog.remote.ops.backfill_visibility import (
    job_record_names,
    job_tag,
    raise_generation,
    read_generation,
)
from tierlog.remote.tier.layout import (
    SEGMENT_SUFFIX,
    job_record_key,
    segment_object_key,
    staging_dir_key,
    stream_record_key,
)
from tierlog.remote.tier.manifest import read_stored_manifest
from tierlog.remote.tier.object_store import RemoteTier, modified_ms, translate_errors
from tierlog.remote.tier.ownership import check_not_owned

log = logging.getLogger(__name__)

_STARTED = RemoteLogSegmentState.COPY_SEGMENT_STARTED
_FINISHED = RemoteLogSegmentState.COPY_SEGMENT_FINISHED
_DELETE_STARTED = RemoteLogSegmentState.DELETE_SEGMENT_STARTED
_DELETE_FINISHED = RemoteLogSegmentState.DELETE_SEGMENT_FINISHED
JOB_RECORD_VERSION = 1
#: How long a job's staging is kept unmodified before a sweep takes it for a crashed job's.
DEFAULT_STAGING_RETENTION_MS = 24 * 3600 * 1000
_COPY_BUFFER = 1 << 20


@dataclass(frozen=True, slots=True)
class PlannedSegment:
    """One chunk's final segment: its metadata (COPY_SEGMENT_STARTED) and where it is staged."""

    metadata: RemoteLogSegmentMetadata
    chunk: StagedChunk
    epochs: tuple[tuple[int, int], ...]
    """The partition's leader-epoch checkpoint entries up to this segment."""


@dataclass(slots=True)
class JobPlan:
    """What a commit applies: the job record's content."""

    job_id: str
    segments: list[PlannedSegment] = field(default_factory=list)
    partitions: list[TopicIdPartition] = field(default_factory=list)
    """Every partition the job writes or creates (a new topic's empty ones too)."""
    stream: tuple[str, int] | None = None
    generation: int = 0
    """The job's generation (its segments' tag; 0 in records of untagged, older commits)."""

    def to_json(self) -> str:
        return dumps({
            "version": JOB_RECORD_VERSION,
            "jobId": self.job_id,
            "generation": self.generation,
            "stream": None if self.stream is None else list(self.stream),
            "partitions": [[p.topic_id, p.topic, p.partition] for p in self.partitions],
            "segments": [{"metadata": s.metadata.to_dict(), "attempt": s.chunk.attempt,
                          "chunk": s.chunk.index, "records": s.chunk.records,
                          "epochs": [list(e) for e in s.epochs]} for s in self.segments],
        })

    @classmethod
    def from_json(cls, data: bytes, source: str) -> JobPlan:
        obj = load_json_object(data, source)
        try:
            if obj["version"] != JOB_RECORD_VERSION:
                raise ValueError(f"unknown version {obj['version']!r}")
            plan = cls(str(obj["jobId"]))
            generation = obj.get("generation", 0)
            if isinstance(generation, bool) or not isinstance(generation, int):
                raise TypeError(f"'generation' must be an int, got {generation!r:.60}")
            plan.generation = generation
            stream = obj["stream"]
            plan.stream = None if stream is None else (str(stream[0]), int(stream[1]))
            plan.partitions = [TopicIdPartition(*p) for p in obj["partitions"]]
            for s in obj["segments"]:
                md = RemoteLogSegmentMetadata.from_dict(s["metadata"], source)
                tip = md.topic_id_partition
                chunk = StagedChunk(tip.topic_id, tip.topic, tip.partition, plan.job_id,
                                    str(s["attempt"]), int(s["chunk"]), int(s["records"]),
                                    md.segment_size_in_bytes, md.max_timestamp_ms, 0)
                plan.segments.append(PlannedSegment(
                    md, chunk, tuple((int(e), int(o)) for e, o in s["epochs"])))
        except (KeyError, TypeError, ValueError, IndexError) as e:
            raise CorruptRemoteMetadataError(f"{source} is not a backfill job record: {e}") from e
        return plan


@dataclass(frozen=True, slots=True)
class CommitResult:
    """What a commit made visible: per partition, the offsets ``[first, last]`` it wrote."""

    job_id: str
    offsets: Mapping[TopicIdPartition, tuple[int, int]]
    records: int
    skipped: bool = False
    """True for a replayed streaming batch id: nothing was written."""
    table_error: str | None = None
    """Why a table of a topic written was not updated with the job's segments (None: each
    topic with a table has them; tierlog.remote.ops.backfill_table). The job is committed."""


class Readable(Protocol):
    """A binary stream (files, fsspec files, BytesIO)."""

    def read(self, size: int = -1, /) -> bytes: ...


def rebase_batches(src: Readable, dst: BinaryIO, base_offset: int, leader_epoch: int) -> int:
    """Copy a staged ``.log`` (batches at provisional offsets from 0) adding ``base_offset`` to
    every batch's baseOffset and setting its partitionLeaderEpoch; both lie outside the CRC
    (docs/formats.md), so no batch is re-encoded. Returns the bytes copied;
    CorruptRecordError for a truncated batch."""
    header = LOG_OVERHEAD + 4  # baseOffset, batchLength, partitionLeaderEpoch
    buf = bytearray()
    start = 0  # the file position of buf[0]
    batch = last = 0  # the file positions of the next batch and of the last one seen
    while block := src.read(_COPY_BUFFER):  # patched a block at a time, one write each
        buf += block
        end = start + len(buf)
        while batch + header <= end:
            at = batch - start
            length = int.from_bytes(buf[at + 8:at + 12], "big", signed=True)
            if length < header - LOG_OVERHEAD:
                raise CorruptRecordError(f"staged segment has a batch of length {length} at "
                                         f"{batch}")
            provisional = int.from_bytes(buf[at:at + 8], "big", signed=True)
            set_base_offset(buf, at, base_offset + provisional)
            set_partition_leader_epoch(buf, at, leader_epoch)
            last, batch = batch, batch + LOG_OVERHEAD + length
        done = min(len(buf), batch - start)  # bytes before an unread header are final
        dst.write(buf if done == len(buf) else buf[:done])
        del buf[:done]
        start += done
    if buf:
        raise CorruptRecordError(f"staged segment ends inside a batch header at {batch}")
    if batch > start:
        raise CorruptRecordError(f"staged segment ends inside the batch at {last}")
    return batch


assert PARTITION_LEADER_EPOCH == LOG_OVERHEAD  # the header read above holds both fields


def pending_jobs(tier: RemoteTier) -> list[JobPlan]:
    """The job records crashed commits left (``_jobs/``): committed jobs that the next
    commit (or ``recover``) rolls forward. Their partitions count as existing: a task that
    creates a topic one of them creates takes its topic id (see backfill.resolve_topic)."""
    plans = []
    for job_id in job_record_names(tier):
        path = tier.path(job_record_key(job_id))
        try:
            plans.append(JobPlan.from_json(tier.get_bytes(path), path))
        except RemoteResourceNotFoundError:
            continue  # rolled forward meanwhile
    return plans


class BackfillCommitter:
    """Commits, aborts and recovers backfill jobs on one tier (the driver's side)."""

    def __init__(self, tier: RemoteTier, *, time_ms: Callable[[], int]) -> None:
        self._tier = tier
        self._time_ms = time_ms
        self._store = RemoteLogMetadataManager(tier)

    def close(self) -> None:
        self._store.close()

    # -- public ---------------------------------------------------------------------------

    def commit(self, job_id: str, chunks: Iterable[StagedChunk], *,
               created: Iterable[TopicIdPartition] = (),
               stream: tuple[str, int] | None = None) -> CommitResult:
        """Make the job's chunks (from successful tasks' commit messages, in any order)
        committed segments, all at once per partition; ``created`` are the partitions of new
        topics (written even when empty). With ``stream`` (stream id, batch id), a batch id
        at or below the stream's last committed one writes nothing (its staging is
        deleted). PartitionOwnedError when a LogManager owns a partition."""
        chunks = sorted(chunks, key=lambda c: (str(c.topic_id_partition), c.attempt, c.index))
        tips = sorted({c.topic_id_partition for c in chunks} | set(created), key=str)
        self.recover()
        if stream is not None:
            last = self.last_committed_batch(stream[0])
            if last is not None and stream[1] <= last:
                log.info("stream %s: batch %d was committed already (last %d); writing nothing",
                         stream[0], stream[1], last)
                self.abort(job_id)
                return CommitResult(job_id, {}, 0, skipped=True)
        for tip in tips:
            check_not_owned(self._tier, tip)
            self._clean_unfinished(tip)
        plan = self._plan(job_id, chunks, tips, stream, read_generation(self._tier) + 1)
        self._tier.put_bytes(plan.to_json().encode(), self._tier.path(job_record_key(job_id)))
        self._apply(plan)
        offsets: dict[TopicIdPartition, tuple[int, int]] = {}
        for s in plan.segments:
            tip = s.metadata.topic_id_partition
            first, _ = offsets.get(tip, (s.metadata.start_offset, 0))
            offsets[tip] = (first, s.metadata.end_offset)
        # The topics' tables follow (imported here: the table modules import restore's).
        from tierlog.remote.ops.backfill_table import update_tables
        return CommitResult(job_id, offsets, sum(s.chunk.records for s in plan.segments),
                            table_error=update_tables(self._tier, offsets) if offsets else None)

    def abort(self, job_id: str) -> None:
        """Delete the job's staging (nothing of it is visible)."""
        self._remove_tree(staging_dir_key(job_id))

    def recover(self) -> list[str]:
        """Roll forward every job record a crashed commit left; returns their job ids."""
        done = []
        for plan in pending_jobs(self._tier):
            log.warning("rolling forward backfill job %s left by a crashed commit", plan.job_id)
            self._apply(plan)
            done.append(plan.job_id)
        return done

    def last_committed_batch(self, stream_id: str) -> int | None:
        """The last micro-batch id a streaming write committed, or None."""
        path = self._tier.path(stream_record_key(stream_id))
        try:
            obj = load_json_object(self._tier.get_bytes(path), path)
        except RemoteResourceNotFoundError:
            return None
        batch = obj.get("batchId")
        if isinstance(batch, bool) or not isinstance(batch, int):
            raise CorruptRemoteMetadataError(f"{path} holds no batchId")
        return batch

    def sweep_staging(self, older_than_ms: int, *, keep: Iterable[str] = ()) -> int:
        """Delete the staging of jobs (crashed or killed) not modified for ``older_than_ms``,
        but ``keep``'s and that of jobs whose record awaits its roll-forward; returns how
        many went. A running job's staging is younger."""
        stale = self.stale_staging(older_than_ms, keep=keep)
        for job in stale:
            self._remove_tree(staging_dir_key(job))
        return len(stale)

    def stale_staging(self, older_than_ms: int, *, keep: Iterable[str] = ()) -> list[str]:
        """The job ids whose staging :meth:`sweep_staging` would delete (nothing deleted):
        not modified for ``older_than_ms``, not in ``keep``, no record awaiting roll-forward."""
        now = self._time_ms()
        keep = set(keep) | {plan.job_id for plan in pending_jobs(self._tier)}
        base = self._tier.path(staging_dir_key())
        stale = []
        for job in self._tier.list_names(base, dirs=True):
            if job in keep:
                continue
            newest = self._newest_mtime_ms(f"{base}/{job}")
            if newest is not None and now - newest < older_than_ms:
                continue
            stale.append(job)
        return stale

    # -- internals ------------------------------------------------------------------------

    def _plan(self, job_id: str, chunks: Sequence[StagedChunk],
              tips: Sequence[TopicIdPartition], stream: tuple[str, int] | None,
              generation: int) -> JobPlan:
        plan = JobPlan(job_id, partitions=list(tips), stream=stream, generation=generation)
        tag = job_tag(job_id, generation)
        now = self._time_ms()
        by_tip: dict[TopicIdPartition, list[StagedChunk]] = {}
        for c in chunks:
            by_tip.setdefault(c.topic_id_partition, []).append(c)
        for tip, mine in by_tip.items():
            committed = [m for m in self._store.list_remote_log_segments(tip)
                         if m.state is _FINISHED]
            next_offset = max((m.end_offset + 1 for m in committed), default=0)
            epochs: dict[int, int] = {}
            for m in committed:
                for e, o in m.segment_leader_epochs.items():
                    epochs[e] = min(o, epochs.get(e, o))
            epoch = max(epochs, default=0)
            epochs.setdefault(epoch, next_offset)
            for c in mine:
                if c.records == 0:
                    continue
                md = RemoteLogSegmentMetadata(
                    remote_log_segment_id=RemoteLogSegmentId.generate(tip),
                    start_offset=next_offset, end_offset=next_offset + c.records - 1,
                    max_timestamp_ms=c.max_timestamp, event_timestamp_ms=now,
                    segment_size_in_bytes=c.size_in_bytes,
                    segment_leader_epochs={epoch: max(epochs[epoch], next_offset)},
                    txn_idx_empty=True, state=_STARTED, custom_metadata=tag)
                plan.segments.append(PlannedSegment(md, c, tuple(sorted(epochs.items()))))
                next_offset = md.end_offset + 1
        return plan

    def _apply(self, plan: JobPlan) -> None:
        """The generation counter (step 3's end), then steps 4-5 of the module doc,
        idempotently (a roll-forward repeats them)."""
        raise_generation(self._tier, plan.generation)
        for tip in plan.partitions:
            mine = [s for s in plan.segments if s.metadata.topic_id_partition == tip]
            known = {m.segment_id: m for m in self._store.list_remote_log_segments(tip)}
            todo = [s for s in mine if known.get(s.metadata.segment_id) is None
                    or known[s.metadata.segment_id].state is _STARTED]
            if not todo and (mine or read_stored_manifest(self._tier, tip) is not None):
                continue
            for s in todo:
                if s.metadata.segment_id not in known:
                    self._store.add_remote_log_segment_metadata(s.metadata)
                self._copy_segment(s)
            now = self._time_ms()
            self._store.finish_remote_log_segments(tip, [RemoteLogSegmentMetadataUpdate(
                remote_log_segment_id=s.metadata.remote_log_segment_id,
                event_timestamp_ms=now, state=_FINISHED,
                custom_metadata=s.metadata.custom_metadata) for s in todo])
            log.info("%s: backfill job %s committed %d segments", tip, plan.job_id, len(todo))
        if plan.stream is not None:
            stream_id, batch = plan.stream
            self._tier.put_bytes(dumps({"version": 1, "streamId": stream_id, "batchId": batch})
                                 .encode(), self._tier.path(stream_record_key(stream_id)))
        self.abort(plan.job_id)
        self._tier.delete(self._tier.path(job_record_key(plan.job_id)))

    def _copy_segment(self, s: PlannedSegment) -> None:
        md, tier = s.metadata, self._tier
        epoch = max(md.segment_leader_epochs)
        source = tier.path(s.chunk.object_key(SEGMENT_SUFFIX))
        fd, local = tempfile.mkstemp(prefix="tierlog-rebase-", suffix=SEGMENT_SUFFIX)
        try:
            with os.fdopen(fd, "wb") as dst, translate_errors("read", source), \
                    tier.fs.open(source, "rb") as src:
                size = rebase_batches(src, dst, md.start_offset, epoch)
            if size != md.segment_size_in_bytes:
                raise CorruptRecordError(
                    f"staged segment {source} holds {size} bytes, its task staged "
                    f"{md.segment_size_in_bytes}")
            tier.put_file(local, tier.path(segment_object_key(md, SEGMENT_SUFFIX)))
        finally:
            os.unlink(local)
        for suffix in CHUNK_SUFFIXES[1:]:
            self._copy_object(tier.path(s.chunk.object_key(suffix)),
                              tier.path(segment_object_key(md, suffix)))
        tier.put_bytes(encode_snapshot(()), tier.path(
            segment_object_key(md, IndexType.PRODUCER_SNAPSHOT.suffix)))
        entries = [EpochEntry(e, o) for e, o in s.epochs if o <= md.end_offset]
        tier.put_bytes(encode_leader_epoch_checkpoint(entries), tier.path(
            segment_object_key(md, IndexType.LEADER_EPOCH.suffix)))

    def _copy_object(self, source: str, target: str) -> None:
        self._tier.put_bytes(self._tier.get_bytes(source), target)

    def _clean_unfinished(self, tip: TopicIdPartition) -> None:
        """Delete what crashed commits left half-copied (COPY_SEGMENT_STARTED) in ``tip``:
        never visible, and no job record names them any more (recover ran first)."""
        for md in self._store.list_remote_log_segments(tip):
            if md.state not in (_STARTED, _DELETE_STARTED):
                continue
            if md.state is _STARTED:
                self._update(md, _DELETE_STARTED)
            for suffix in (SEGMENT_SUFFIX, *(t.suffix for t in IndexType)):
                self._tier.delete(self._tier.path(segment_object_key(md, suffix)))
            self._update(md, _DELETE_FINISHED)
            log.info("%s: removed unfinished segment %s", tip, md.remote_log_segment_id)

    def _update(self, md: RemoteLogSegmentMetadata, state: RemoteLogSegmentState) -> None:
        self._store.update_remote_log_segment_metadata(RemoteLogSegmentMetadataUpdate(
            remote_log_segment_id=md.remote_log_segment_id,
            event_timestamp_ms=self._time_ms(), state=state))

    def _remove_tree(self, key: str) -> None:
        path = self._tier.path(key)
        with translate_errors("delete", path), contextlib.suppress(FileNotFoundError):
            self._tier.stats.record("deletes")
            self._tier.fs.rm(path, recursive=True)

    def _newest_mtime_ms(self, path: str) -> int | None:
        with translate_errors("list", path):
            self._tier.fs.invalidate_cache(path)
            found: Any = self._tier.fs.find(path, detail=True)
        times = [modified_ms(info) for info in found.values()]
        known = [t for t in times if t is not None]
        return max(known) if known else None
