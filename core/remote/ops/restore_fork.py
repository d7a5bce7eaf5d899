"""A point-in-time restore into a NEW topic (``restore_topic(..., to_topic=NEW)``, ``tierlog
restore --to-topic NEW``): the source topic's tier data is only read, never changed.

The new topic gets a new topic id and tier data of its own: each committed segment the
restored log reads from the tier (:attr:`PartitionRestore.kept`) is copied under the new
topic, object by object through the RemoteStorageManager's fetch and copy calls and the
metadata store (COPY_SEGMENT_STARTED, the objects, COPY_SEGMENT_FINISHED: the very states a
tiering run's copy goes through), with the same offsets, epochs, sizes and bytes. The bytes
below the cut of the segment the cut falls in become the new log's first local segment and
are uploaded as the restore of the topic itself uploads them (``commit_cut_prefix``); nothing
is deleted (the plan's ``dropped`` is emptied). A copy failing part way removes what it
copied (:func:`discard_fork`), so the same restore can run again.
"""

from __future__ import annotations

import dataclasses
import logging
import tempfile
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path

from tierlog.checkpoint.partition_metadata import new_topic_id
from tierlog.errors import RemoteResourceNotFoundError, RemoteStorageError, TopicExistsError
from tierlog.remote.api import (
    IndexType,
    LogSegmentData,
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemoteLogSegmentState,
    RemoteStorageManager,
    TopicIdPartition,
)
from tierlog.remote.metadata_api import RemoteLogMetadataStore
from tierlog.remote.ops.restore import PartitionRestore, RestorePlan
from tierlog.remote.rlm.unfinished import StoreRollback
from tierlog.remote.tier.fsspec_storage import extra_index_suffixes
from tierlog.remote.tier.manifest import remote_partitions
from tierlog.remote.tier.object_store import RemoteTier
from tierlog.remote.tier.ownership import read_owner, record_owner

log = logging.getLogger(__name__)

_STARTED = RemoteLogSegmentState.COPY_SEGMENT_STARTED
_FINISHED = RemoteLogSegmentState.COPY_SEGMENT_FINISHED


@dataclass(frozen=True, slots=True)
class _Suffix:
    """A plugin index type as ``fetch_index`` takes it: its object suffix."""

    suffix: str


def check_new_topic(rlmm: RemoteLogMetadataStore, tier: RemoteTier, to_topic: str,
                    owners: Collection[str]) -> None:
    """TopicExistsError when the tier already holds data (a committed segment) of a topic
    named ``to_topic`` that ``owners`` (this manager) did not write: a restore into a new
    topic never writes into another topic's tier data, nor shadows it. What a failed restore
    into it left (its partitions are recorded as ours before anything is copied) is not
    deleted either: the new incarnation shadows it, as a re-created topic does."""
    for tip in remote_partitions(tier):
        if tip.topic != to_topic or not any(
                m.state is _FINISHED for m in rlmm.list_remote_log_segments(tip)):
            continue
        owner = read_owner(tier, tip)
        if owner is None or owner.owner not in owners:
            raise TopicExistsError(
                f"the remote tier at {tier.root} already holds topic {to_topic!r} ({tip}"
                f"{'' if owner is None else f', owned by {owner.owner}'}): restore into a "
                f"topic it does not hold")
        log.warning("%s: an earlier restore into %s by this data dir left data in the tier; "
                    "the new topic id shadows it (it is not deleted)", tip, to_topic)


def fork_plan(plan: RestorePlan, to_topic: str) -> RestorePlan:
    """``plan`` for a new topic ``to_topic`` with a new topic id: the same cuts, log starts,
    epochs and bytes below the cut, nothing deleted, and the kept segments still the
    source's (:func:`copy_kept` copies them, :func:`commit_copies` commits the copies)."""
    topic_id = new_topic_id()
    return RestorePlan(to_topic, tuple(
        dataclasses.replace(state, tip=TopicIdPartition(topic_id, to_topic, state.tip.partition),
                            dropped=()) for state in plan.partitions))


def copy_kept(rlmm: RemoteLogMetadataStore, rsm: RemoteStorageManager,
              source: PartitionRestore, target: PartitionRestore, *,
              time_ms: Callable[[], int], tier: RemoteTier | None = None,
              owner: str | None = None) -> list[RemoteLogSegmentMetadata]:
    """Copy ``source.kept`` (segments of the source topic) under ``target.tip``, in offset
    order, and record the log start offset; returns the copies' metadata, still
    COPY_SEGMENT_STARTED (no reader takes them for data, and a retry of a failed restore is
    not refused for them) until :func:`commit_copies`. The source's objects and metadata are
    only read. On failure what was copied is removed, then the error raised. ``owner`` is
    recorded as the new partition's owner in ``tier`` first (:func:`check_new_topic`)."""
    if tier is not None and owner is not None:
        record_owner(tier, target.tip, owner, time_ms())
    copies: list[RemoteLogSegmentMetadata] = []
    try:
        for metadata in source.kept:
            copy = dataclasses.replace(
                metadata, remote_log_segment_id=RemoteLogSegmentId.generate(target.tip),
                event_timestamp_ms=time_ms(), state=_STARTED, custom_metadata=None)
            rlmm.add_remote_log_segment_metadata(copy)
            copies.append(copy)
            copies[-1] = _copy_objects(rlmm, rsm, metadata, copy, time_ms)
        if source.kept and target.log_start_offset > source.kept[0].start_offset:
            rlmm.update_log_start_offset(target.tip, target.log_start_offset)
    except BaseException:
        discard_fork(rlmm, rsm, copies, time_ms=time_ms)
        raise
    if copies:
        log.info("%s: copied %d segments (offsets %d-%d) from %s", target.tip, len(copies),
                 copies[0].start_offset, copies[-1].end_offset, source.tip)
    return copies


def _copy_objects(rlmm: RemoteLogMetadataStore, rsm: RemoteStorageManager,
                  metadata: RemoteLogSegmentMetadata, copy: RemoteLogSegmentMetadata,
                  time_ms: Callable[[], int]) -> RemoteLogSegmentMetadata:
    """Upload ``metadata``'s objects as ``copy``'s (COPY_SEGMENT_STARTED); returns ``copy``
    with the custom metadata the RemoteStorageManager returned."""
    with tempfile.TemporaryDirectory(prefix="tierlog-fork-") as scratch:
        def fetched(name: str, read: Callable[[], bytes]) -> Path:
            path = Path(scratch) / name
            path.write_bytes(read())
            return path

        def index(kind: IndexType | _Suffix) -> bytes:
            with rsm.fetch_index(metadata, kind) as stream:
                data: bytes = stream.read()
            return data

        def segment() -> bytes:
            with rsm.fetch_log_segment(metadata, 0) as stream:
                data: bytes = stream.read()
            return data

        transaction = None
        if not metadata.txn_idx_empty:
            try:
                transaction = fetched("txnindex", lambda: index(IndexType.TRANSACTION))
            except RemoteResourceNotFoundError:
                transaction = None  # an empty transaction index is not uploaded
        data = LogSegmentData(
            log_segment=fetched("log", segment),
            offset_index=fetched("index", lambda: index(IndexType.OFFSET)),
            time_index=fetched("timeindex", lambda: index(IndexType.TIMESTAMP)),
            transaction_index=transaction,
            producer_snapshot_index=fetched("snapshot",
                                            lambda: index(IndexType.PRODUCER_SNAPSHOT)),
            leader_epoch_index=index(IndexType.LEADER_EPOCH),
            extra_indexes={s: fetched(f"extra{i}", partial(index, _Suffix(s)))
                           for i, s in enumerate(extra_index_suffixes(metadata))})
        custom = rsm.copy_log_segment_data(copy, data)
    return dataclasses.replace(copy, custom_metadata=custom)


def commit_copies(rlmm: RemoteLogMetadataStore, copies: Sequence[RemoteLogSegmentMetadata], *,
                  time_ms: Callable[[], int]) -> list[RemoteLogSegmentMetadata]:
    """Mark the copies :func:`copy_kept` made COPY_SEGMENT_FINISHED (in offset order per
    partition, so the committed segments always form a prefix); returns them committed."""
    committed = []
    for copy in sorted(copies, key=lambda m: (m.topic_id_partition.partition, m.start_offset)):
        if copy.state is _STARTED:
            rlmm.update_remote_log_segment_metadata(RemoteLogSegmentMetadataUpdate(
                remote_log_segment_id=copy.remote_log_segment_id,
                event_timestamp_ms=time_ms(), state=_FINISHED,
                custom_metadata=copy.custom_metadata))
            copy = dataclasses.replace(copy, state=_FINISHED)
        committed.append(copy)
    return committed


def discard_fork(rlmm: RemoteLogMetadataStore, rsm: RemoteStorageManager,
                 copies: Sequence[RemoteLogSegmentMetadata], *,
                 time_ms: Callable[[], int]) -> None:
    """Take the segments a failed restore into a new topic copied out of the tier again
    (DELETE_SEGMENT_STARTED, the objects, DELETE_SEGMENT_FINISHED), the highest first; a
    failure is logged and left to ``tierlog scrub --repair`` (a copy still
    COPY_SEGMENT_STARTED is a stuck copy it rolls back)."""
    rollback = StoreRollback(rlmm, rsm, time_ms)
    for metadata in sorted(copies, key=lambda m: m.start_offset, reverse=True):
        try:
            if metadata.state is _FINISHED:
                rollback.mark(metadata, RemoteLogSegmentState.DELETE_SEGMENT_STARTED)
                metadata = dataclasses.replace(
                    metadata, state=RemoteLogSegmentState.DELETE_SEGMENT_STARTED)
            rollback.roll_back(metadata)
        except (RemoteStorageError, OSError) as exc:  # the restore's own error is raised
            log.warning("%s: the copy of segment %d-%d stays in the tier (run `tierlog scrub "
                        "--repair`): %s", metadata.topic_id_partition, metadata.start_offset,
                        metadata.end_offset, exc)


__all__ = ["check_new_topic", "commit_copies", "copy_kept", "discard_fork", "fork_plan"]
