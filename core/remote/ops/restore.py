"""Restore (and adopt) a topic from the remote tier alone: plan each partition's restored
state and cut the tier to it.

The one path of ``LogManager.restore_topic`` (and ``adopt_topic``, a restore without a cut
of a topic Spark wrote). For each partition of the topic's incarnation in the tier:

- the cut: the restored log's end offset, the last STABLE batch boundary at or before the
  requested offset or time (``restore_cut``), else at or before the tier's end (a
  transaction whose marker never reached the tier is dropped: its outcome is unknown);
- the segments wholly below the cut stay in the tier, the one straddling it is fetched and
  its bytes below the cut are restored into the local log;
- before anything leaves the tier, those bytes are committed to the tier as a segment of
  their own (:func:`commit_cut_prefix`, through the RemoteLogManager's copy path: its
  indexes, the producer snapshot at the cut, the epoch checkpoint truncated at the cut, its
  transaction index), so the tier alone holds every record below the cut from then on;
- then the segments at or above the cut (the straddling one included) are taken out of the
  tier (:func:`cut_tier`) the way Kafka removes remote segments beyond a truncated log's
  end: marked DELETE_SEGMENT_STARTED, the highest first, before any object goes, so the
  committed segments always form a prefix of the log and none names missing data.

A restore that fails at any step is undone locally and leaves the tier holding every
record below the cut: the same restore run again plans the same cut (the uploaded prefix,
found committed, is not uploaded twice; with the straddling segment already gone, the cut
falls on the prefix's end and the local log starts empty there).
- the log start offset (``tier_log_start``) and the leader epochs of the checkpoint copied
  with the segment holding the cut, truncated to the cut. The producer state is not planned
  here: the log opening on the seeded directory loads the snapshot the tier holds at its
  local log start and replays the restored bytes (``LogLoader``).

The plan of a topic (:class:`RestorePlan`: per partition the cut, the segments and records
it would delete from the tier) is made without changing anything; one that deletes runs
only when confirmed (``execute``, and ``allow_empty`` for one leaving a partition empty),
so no caller empties a bucket by mistake.

Refused: a topic the tier does not hold (UnknownTopicOrPartitionError), a partition another
log owns (PartitionOwnedError, unless ``force_takeover``), a cut below the log start offset
(OffsetOutOfRangeError), a segment the restored log relies on that fails the scrub's cheap
checks (TierDamagedError, ``tierlog.remote.ops.restore_checks``).
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from tierlog.checkpoint.checkpoint_file import EpochEntry, decode_leader_epoch_checkpoint
from tierlog.errors import (
    ConfigError,
    CorruptRecordError,
    OffsetOutOfRangeError,
    PartitionOwnedError,
    RemoteStorageError,
    RestoreNotConfirmedError,
    TierDamagedError,
    UnknownTopicOrPartitionError,
)
from tierlog.producer.append import ProducerStateEntry
from tierlog.producer.snapshot import decode_snapshot
from tierlog.records.batch import iter_batches
from tierlog.remote.api import (
    IndexType,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentState,
    RemoteStorageManager,
    TopicIdPartition,
)
from tierlog.remote.metadata_api import RemoteLogMetadataStore
from tierlog.remote.ops.backfill_commit import BackfillCommitter
from tierlog.remote.ops.restore_checks import damaged_segments, refuse_damage
from tierlog.remote.ops.restore_cut import last_stable_boundary
from tierlog.remote.rlm.unfinished import StoreRollback
from tierlog.remote.tier.layout import SEGMENT_SUFFIX, segment_object_key
from tierlog.remote.tier.manifest import remote_partitions, tier_log_start
from tierlog.remote.tier.object_store import RemoteTier
from tierlog.remote.tier.ownership import PartitionOwner, read_owner, tier_of
from tierlog.remote.tier.topics import topic_partitions

if TYPE_CHECKING:
    from tierlog.remote.log_protocol import TieredLog
    from tierlog.remote.rlm.rlm import RemoteLogManager

log = logging.getLogger(__name__)

_FINISHED = RemoteLogSegmentState.COPY_SEGMENT_FINISHED
_DELETE_STARTED = RemoteLogSegmentState.DELETE_SEGMENT_STARTED

#: download(bytes): called as a restore fetches segment bytes from the tier.
Download = Callable[[int], None]


@dataclass(frozen=True, slots=True)
class PartitionRestore:
    """One partition's restored state, as planned from the tier."""

    tip: TopicIdPartition
    log_start_offset: int
    """The tier's start: its first committed offset, or the recorded remote log start."""
    end_offset: int
    """The cut: the restored log's end offset (the tier's end when no cut was asked and
    the end is stable)."""
    epochs: tuple[EpochEntry, ...]
    """The leader-epoch cache: the checkpoint copied with the segment holding the cut,
    truncated to the cut (empty when the tier holds no segment)."""
    local_bytes: bytes = b""
    """The straddling segment's batches below the cut, restored as the first local segment
    (empty when the cut is on a segment boundary)."""
    local_start: int = -1
    """The base offset of those bytes' segment (the end offset when there are none)."""
    dropped: tuple[RemoteLogSegmentMetadata, ...] = field(default=())
    """The committed segments holding offsets at or above the cut: taken out of the tier."""
    prefix_in_tier: bool = False
    """Whether the tier already holds ``local_bytes`` as a committed segment of its own (an
    earlier restore to this cut uploaded it, then failed)."""
    kept: tuple[RemoteLogSegmentMetadata, ...] = field(default=())
    """The committed segments the restored log reads from the tier: wholly below the cut and
    not wholly below the log start, in offset order."""
    taken_over: PartitionOwner | None = None
    """The other log's owner record a forced takeover replaces (None: no takeover)."""

    @property
    def cut(self) -> int:
        """The restored log's end offset (``end_offset``): the first offset not restored."""
        return self.end_offset

    @property
    def deleted_records(self) -> int:
        """How many offsets at or above the cut ``dropped`` holds: the records taken out of
        the tier (fewer when compaction removed some of those offsets)."""
        if not self.dropped:
            return 0
        return max(m.end_offset for m in self.dropped) + 1 - self.end_offset

    @property
    def empty(self) -> bool:
        """Whether the restored partition holds no record (its cut is at its log start)."""
        return self.end_offset <= self.log_start_offset

    @property
    def uploads_prefix(self) -> bool:
        """Whether :func:`commit_cut_prefix` must upload the restored bytes below the cut
        before :func:`cut_tier` may delete the segment they came from."""
        return bool(self.local_bytes) and not self.prefix_in_tier

    @property
    def local_log_start(self) -> int:
        """Where the local log starts: the straddling segment's base, else the cut."""
        return self.local_start if self.local_bytes else self.end_offset


@dataclass(frozen=True, slots=True)
class RestorePlan:
    """What restoring one topic would do, per partition (:func:`plan_restore`): the cut, the
    segments and records it would delete from the tier. Planning changes nothing; a plan
    that deletes runs only when confirmed (:meth:`confirm`)."""

    topic: str
    partitions: tuple[PartitionRestore, ...]
    """In partition order."""

    @property
    def deletes(self) -> bool:
        """Whether executing the plan deletes any segment from the tier."""
        return any(p.dropped for p in self.partitions)

    @property
    def emptied(self) -> tuple[PartitionRestore, ...]:
        """The partitions whose tier holds records and that the plan leaves empty."""
        return tuple(p for p in self.partitions if p.empty and p.dropped)

    def describe(self) -> list[str]:
        """One line per partition: its cut and what would be deleted from the tier."""
        return [f"{p.tip.topic}-{p.tip.partition}: cut at offset {p.cut} (log start "
                f"{p.log_start_offset}); deletes {_count(len(p.dropped), 'segment')} "
                f"({_count(p.deleted_records, 'record')}) from the tier"
                + (", leaving the partition EMPTY" if p.empty and p.dropped else "")
                for p in self.partitions]

    def confirm(self, *, execute: bool, allow_empty: bool) -> None:
        """Refuse (RestoreNotConfirmedError, naming each partition and what it would lose)
        a plan that deletes from the tier unless ``execute``, or leaves a partition empty
        unless ``allow_empty`` too. A plan that deletes nothing needs neither."""
        if not self.deletes:
            return
        if not execute:
            raise RestoreNotConfirmedError(
                f"restoring topic {self.topic!r} would delete from the remote tier: "
                f"{'; '.join(self.describe())}. Nothing was changed: review the plan and "
                f"pass execute=True (tierlog restore --execute) to delete")
        if self.emptied and not allow_empty:
            names = ", ".join(f"{p.tip.topic}-{p.tip.partition}" for p in self.emptied)
            raise RestoreNotConfirmedError(
                f"restoring topic {self.topic!r} would leave {names} EMPTY, deleting every "
                f"record the tier holds of it ({'; '.join(self.describe())}); is the cut "
                f"right? Nothing was changed: pass allow_empty=True (tierlog restore "
                f"--allow-empty) to empty it")


def _count(n: int, noun: str) -> str:
    return f"{n:,} {noun}{'' if n == 1 else 's'}"


def plan_restore(rlmm: RemoteLogMetadataStore, rsm: RemoteStorageManager, topic: str, *,
                 time_ms: Callable[[], int], to_offset: int | None = None,
                 to_timestamp: int | None = None, owners: Collection[str] | None = (),
                 force_takeover: bool = False, download: Download | None = None
                 ) -> RestorePlan:
    """Every partition of ``topic``'s incarnation in the tier (the one readers read), in
    partition order, restored to the last stable cut at or before ``to_offset`` (the first
    offset not restored) and ``to_timestamp`` (ms: batches whose maximum timestamp is above
    it are not restored), else at or before the tier's end. Nothing in the tier changes.

    Rolls forward a backfill commit a crash left first, so the tier's end is final. A
    partition whose ``_owner.json`` names anyone but ``owners`` (this manager) raises
    PartitionOwnedError unless ``force_takeover`` (``owners=None``: a plan to copy the
    topic, which checks no owner); UnknownTopicOrPartitionError when the tier has no such
    topic; OffsetOutOfRangeError when the cut would be below a partition's log start
    offset; TierDamagedError when a segment the restored log relies on fails the scrub's
    cheap checks (``tierlog.remote.ops.restore_checks``); ConfigError when the remote storage
    exposes no fsspec tier to list (a third-party RemoteStorageManager)."""
    if to_offset is not None and (isinstance(to_offset, bool) or not isinstance(to_offset, int)
                                  or to_offset < 0):
        raise ConfigError("to_offset", f"must be a non-negative integer, got {to_offset!r}")
    if to_timestamp is not None and (isinstance(to_timestamp, bool)
                                     or not isinstance(to_timestamp, int)):
        raise ConfigError("to_timestamp", f"must be an integer (ms), got {to_timestamp!r}")
    tier = tier_of(rlmm) or tier_of(rsm)
    if tier is None:
        raise ConfigError("remote.storage.manager", "restoring a topic needs a remote storage "
                                                    "whose tier tierlog can list (local or s3)")
    _roll_forward_backfills(tier, time_ms)
    found = topic_partitions(tier, topic)
    if not found:
        raise UnknownTopicOrPartitionError(f"the remote tier at {tier.root} holds no topic "
                                           f"{topic!r} to restore")
    taken = {p: _check_owner(tier, found[p], owners, force_takeover)
             for p in sorted(found)} if owners is not None else {}
    plans = [dataclasses.replace(_ProducerCut(rlmm, rsm, tier, found[p], time_ms(), download
                                              ).plan(to_offset, to_timestamp),
                                 taken_over=taken.get(p)) for p in sorted(found)]
    refuse_damage([finding for state in plans
                   for finding in damaged_segments(tier, state.tip, state.kept)])
    return RestorePlan(topic, tuple(plans))


def tier_topics(tier: RemoteTier) -> list[str]:
    """The names of the topics the tier holds (one LIST of its root)."""
    return sorted({p.topic for p in remote_partitions(tier)})


def _roll_forward_backfills(tier: RemoteTier, time_ms: Callable[[], int]) -> None:
    committer = BackfillCommitter(tier, time_ms=time_ms)
    try:
        committer.recover()
    finally:
        committer.close()


def _check_owner(tier: RemoteTier, tip: TopicIdPartition, owners: Collection[str],
                 force_takeover: bool) -> PartitionOwner | None:
    """The owner a restore of ``tip`` would take over (``force_takeover``), else None;
    PartitionOwnedError when another log owns it and no takeover is forced."""
    current = read_owner(tier, tip)
    if current is None or current.owner in owners:
        return None
    if force_takeover:
        return current  # logged when the restore runs: a dry run takes nothing over
    raise PartitionOwnedError(
        f"{tip.topic}-{tip.partition} (topic id {tip.topic_id}) is owned by {current}: "
        f"restoring it would fork a partition a live log "
        f"tiers; stop that log first, or pass force_takeover (--force-takeover) to take it "
        f"over")


class _ProducerCut:
    """Finds one partition's cut, fetching from the tier only what it must: a segment
    whose end is the cut and whose producer snapshot shows no open transaction is never
    downloaded."""

    def __init__(self, rlmm: RemoteLogMetadataStore, rsm: RemoteStorageManager,
                 tier: RemoteTier, tip: TopicIdPartition, now_ms: int,
                 download: Download | None) -> None:
        self.rsm = rsm
        self.tier = tier
        self.tip = tip
        self.now_ms = now_ms
        self.download = download
        self.committed = sorted(
            (m for m in rlmm.list_remote_log_segments(tip) if m.state is _FINISHED),
            key=lambda m: (m.start_offset, m.end_offset))
        self.log_start = tier_log_start(self.committed, rlmm.log_start_offset(tip))

    def plan(self, to_offset: int | None, to_timestamp: int | None) -> PartitionRestore:
        if not self.committed:
            if to_offset is not None and to_offset < self.log_start:
                raise self._below_start(to_offset)
            return PartitionRestore(self.tip, self.log_start, self.log_start, ())
        tier_end = self.committed[-1].end_offset + 1
        limit = tier_end if to_offset is None else min(to_offset, tier_end)
        if limit < self.log_start:
            raise self._below_start(limit)
        candidates = [m for m in self.committed if m.start_offset < limit]
        if to_timestamp is not None:
            late = next((i for i, m in enumerate(candidates)
                         if m.max_timestamp_ms > to_timestamp), None)
            if late is not None:
                candidates = candidates[:late + 1]
        for i in range(len(candidates) - 1, -1, -1):
            segment = candidates[i]
            found = self._cut_in(segment, self._ending_before(segment), limit, to_timestamp)
            if found is not None:
                cut, data = found
                if cut < self.log_start:
                    break
                return self._restore(segment, cut, data)
            limit = segment.start_offset
        raise self._below_start(limit, unstable=True)

    def _ending_before(self, segment: RemoteLogSegmentMetadata
                       ) -> RemoteLogSegmentMetadata | None:
        """The committed segment ending just below ``segment`` (its producer snapshot is the
        state at ``segment``'s start), or None. Found by offset, not by position: the prefix
        an earlier restore uploaded starts where the segment it came from starts."""
        return next((m for m in reversed(self.committed)
                     if m.end_offset + 1 == segment.start_offset), None)

    def _cut_in(self, segment: RemoteLogSegmentMetadata,
                previous: RemoteLogSegmentMetadata | None, limit: int,
                to_timestamp: int | None) -> tuple[int, bytes | None] | None:
        """(cut, the segment's bytes below it, None when the whole segment stays) for the
        last stable boundary of ``segment`` at or before ``limit``, or None."""
        end = segment.end_offset + 1
        if end <= limit and (to_timestamp is None or segment.max_timestamp_ms <= to_timestamp) \
                and not self._open_transactions(self._snapshot(segment)):
            return end, None
        data = self._fetch(segment)
        before = self._snapshot(previous) if previous is not None else None
        found = last_stable_boundary(iter_batches(data, strict=True),
                                     start=segment.start_offset, end=end, snapshot=before,
                                     stop=limit, stop_after_timestamp=to_timestamp,
                                     now_ms=self.now_ms)
        if found is None:
            return None
        if found.offset == end:
            return end, None
        return found.offset, data[:found.position]

    def _restore(self, segment: RemoteLogSegmentMetadata, cut: int,
                 data: bytes | None) -> PartitionRestore:
        source = (f"the leader-epoch checkpoint of {self.tip} segment "
                  f"{segment.remote_log_segment_id}")
        with self.rsm.fetch_index(segment, IndexType.LEADER_EPOCH) as stream:
            epochs = tuple(e for e in decode_leader_epoch_checkpoint(stream.read(), source)
                           if e.start_offset < cut)
        dropped = tuple(m for m in self.committed if m.end_offset >= cut)
        if dropped:
            log.info("%s: restoring to offset %d; %d segments of the tier hold offsets at or "
                     "above it", self.tip, cut, len(dropped))
        prefix_in_tier = any(m.start_offset == segment.start_offset and m.end_offset == cut - 1
                             for m in self.committed)
        kept = tuple(m for m in self.committed if self.log_start <= m.end_offset < cut)
        return PartitionRestore(self.tip, self.log_start, cut, epochs, data or b"",
                                segment.start_offset if data else cut, dropped,
                                bool(data) and prefix_in_tier, kept)

    def _snapshot(self, segment: RemoteLogSegmentMetadata) -> bytes:
        with self.rsm.fetch_index(segment, IndexType.PRODUCER_SNAPSHOT) as stream:
            data: bytes = stream.read()
        return data

    def _open_transactions(self, snapshot: bytes) -> bool:
        source = f"the producer snapshot of {self.tip}"
        return any(ProducerStateEntry.from_snapshot_entry(e).current_txn_first_offset is not None
                   for e in decode_snapshot(snapshot, source))

    def _fetch(self, segment: RemoteLogSegmentMetadata) -> bytes:
        path = self.tier.path(segment_object_key(segment, SEGMENT_SUFFIX))
        try:
            with self.rsm.fetch_log_segment(segment, 0) as stream:
                data: bytes = stream.read()
        except CorruptRecordError as exc:  # the store's ranged read found it cut short
            raise self._size_mismatch(path, segment, self.tier.size(path)) from exc
        if len(data) != segment.segment_size_in_bytes:
            raise self._size_mismatch(path, segment, len(data))
        if self.download is not None:
            self.download(len(data))
        return data

    def _size_mismatch(self, path: str, segment: RemoteLogSegmentMetadata,
                       found: int) -> TierDamagedError:
        return TierDamagedError(
            f"{path}: {self.tip} segment {segment.remote_log_segment_id} (offsets "
            f"{segment.start_offset}-{segment.end_offset}) holds {found} bytes, the metadata "
            f"records {segment.segment_size_in_bytes}; nothing was changed")

    def _below_start(self, offset: int, *, unstable: bool = False) -> OffsetOutOfRangeError:
        why = ("no stable offset (outside every transaction) lies between it and"
               if unstable else "it is below")
        return OffsetOutOfRangeError(
            f"{self.tip.topic}-{self.tip.partition}: cannot restore to offset {offset}: {why} "
            f"the log start offset {self.log_start}")


def commit_cut_prefix(rlm: RemoteLogManager, log_: TieredLog,
                      state: PartitionRestore) -> RemoteLogSegmentMetadata | None:
    """Upload the restored bytes below the cut (``log_``'s first local segment, closed at
    the cut) to the tier as a new segment, through the RemoteLogManager's copy path, when
    :attr:`PartitionRestore.uploads_prefix`; returns its metadata (None: nothing to do).
    Must be committed before :func:`cut_tier` runs: it is the only copy of those records
    in the tier once the segment they came from is deleted."""
    if not state.uploads_prefix:
        return None
    prefix = log_.segments.get(state.local_start)
    if prefix is None or log_.log_end_offset != state.end_offset \
            or log_.segments.get(state.end_offset) is None:
        raise RemoteStorageError(
            f"{state.tip}: the restored log must hold offsets {state.local_start}-"
            f"{state.end_offset - 1} in a segment closed at the cut {state.end_offset} "
            f"before its prefix is uploaded")
    metadata = rlm.copy_segment(log_, prefix, state.end_offset)
    log.info("%s: uploaded offsets %d-%d below the cut as segment %s", state.tip,
             metadata.start_offset, metadata.end_offset, metadata.remote_log_segment_id.id)
    return metadata


def cut_tier(rlmm: RemoteLogMetadataStore, rsm: RemoteStorageManager,
             restores: Sequence[PartitionRestore], *, time_ms: Callable[[], int]) -> None:
    """Take each restore's ``dropped`` segments (those at or above its cut) out of the tier,
    once :func:`commit_cut_prefix` has committed the records below each cut that the
    segment the cut falls in held: no record below a cut is lost whichever step fails.

    Each is marked DELETE_SEGMENT_STARTED (no reader or tiering run takes it for data), the
    highest first so a partition's committed segments stay a prefix of its log. Then the
    objects go and each is marked DELETE_SEGMENT_FINISHED; a delete that fails is logged
    and left DELETE_SEGMENT_STARTED for the partition's next tiering run (or ``tierlog
    scrub --repair``). A failure to mark is raised."""
    rollback = StoreRollback(rlmm, rsm, time_ms)
    doomed = [m for restore in restores
              for m in sorted(restore.dropped, key=lambda m: m.start_offset, reverse=True)]
    for metadata in doomed:
        rollback.mark(metadata, _DELETE_STARTED)
    for metadata in doomed:
        started = dataclasses.replace(metadata, state=_DELETE_STARTED)
        try:
            rollback.roll_back(started)
        except (RemoteStorageError, OSError) as exc:
            log.warning("%s: segment %d-%d is out of the restored log but its objects stay "
                        "until the next tiering run: %s", metadata.remote_log_segment_id.
                        topic_id_partition, metadata.start_offset, metadata.end_offset, exc)


__all__ = ["Download", "PartitionRestore", "RestorePlan", "commit_cut_prefix", "cut_tier",
           "plan_restore", "tier_topics"]
