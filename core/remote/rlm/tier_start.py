"""An empty (or far-behind) follower starts its log from the remote tier (issue 24; Kafka's
``TierStateMachine``, the KIP-1023 flavour: it starts at the last tiered offset + 1).

When the leader answers a follower's fetch with OFFSET_MOVED_TO_TIERED_STORAGE (the offsets
it asks for are only in the tier), the follower reads the partition's metadata from the tier
again (read-only: a follower never writes it), takes the committed segment that ends last,
and from that segment's own indexes the leader-epoch checkpoint and the producer snapshot at
its end; then its log restarts empty after it (``Log.start_from_tier``), with the tier's log
start offset, those epochs and that producer state, and fetches from there. Nothing below
that offset is copied to the follower's disk: if it becomes leader it serves those offsets
from the tier, as its leader did.
"""

from __future__ import annotations

import logging
from typing import Protocol

from tierlog.checkpoint.checkpoint_file import decode_leader_epoch_checkpoint
from tierlog.errors import RemoteStorageError
from tierlog.log.log import Log
from tierlog.remote.api import (
    IndexType,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentState,
    RemoteStorageManager,
    TopicIdPartition,
)
from tierlog.remote.metadata_api import RemoteLogMetadataStore
from tierlog.remote.rlm.remote_reader import RemoteLogReader, topic_id_partition
from tierlog.remote.tier.manifest import tier_log_start

__all__ = ["TierStart", "start_from_tier"]

log = logging.getLogger(__name__)


class _Tier(Protocol):
    @property
    def rsm(self) -> RemoteStorageManager: ...

    @property
    def rlmm(self) -> RemoteLogMetadataStore: ...


class TierStart:
    """Where a follower's log restarts: after ``segment``, the committed segment ending last."""

    def __init__(self, tip: TopicIdPartition, segment: RemoteLogSegmentMetadata,
                 log_start_offset: int) -> None:
        self.tip = tip
        self.segment = segment
        self.log_start_offset = log_start_offset

    @property
    def next_offset(self) -> int:
        return self.segment.end_offset + 1


def plan_tier_start(tier: _Tier, tip: TopicIdPartition) -> TierStart:
    """The committed segment ending last and the tier's log start offset, read again from the
    tier; RemoteStorageError naming the partition when the tier holds nothing committed."""
    reconcile = getattr(tier.rlmm, "reconcile", None)
    if callable(reconcile):
        reconcile(tip)  # what the leader committed since this node last read it
    committed = [m for m in tier.rlmm.list_remote_log_segments(tip)
                 if m.state is RemoteLogSegmentState.COPY_SEGMENT_FINISHED]
    if not committed:
        raise RemoteStorageError(f"{tip}: the remote tier holds no committed segment to "
                                 f"start the follower's log from")
    last = max(committed, key=lambda m: m.end_offset)
    return TierStart(tip, last, tier_log_start(committed, tier.rlmm.log_start_offset(tip)))


def start_from_tier(log_: Log) -> int:
    """Restart the follower ``log_`` from its tier (see the module docstring); returns the
    offset it now fetches from. RemoteStorageError when the tier is not attached or holds
    nothing committed, CorruptCheckpointError / CorruptSnapshotError naming the object read."""
    reader = log_.remote
    if not isinstance(reader, RemoteLogReader):
        raise RemoteStorageError(f"{log_.directory.name}: the remote tier is not attached "
                                 f"({reader!r}); the follower cannot start from it")
    tier = reader.services
    start = plan_tier_start(tier, topic_id_partition(log_))
    segment = start.segment
    where = f"segment {segment.remote_log_segment_id} of {start.tip}"
    with tier.rsm.fetch_index(segment, IndexType.LEADER_EPOCH) as stream:
        epochs = decode_leader_epoch_checkpoint(stream.read(),
                                                f"the leader-epoch checkpoint of {where}")
    with tier.rsm.fetch_index(segment, IndexType.PRODUCER_SNAPSHOT) as stream:
        snapshot: bytes = stream.read()
    log_.start_from_tier(start.next_offset, min(start.log_start_offset, start.next_offset),
                         epochs, snapshot, f"the producer snapshot of {where}")
    log.info("%s: started from the remote tier at offset %d (log start offset %d, %d leader "
             "epochs)", log_.directory.name, start.next_offset, start.log_start_offset,
             len(epochs))
    return start.next_offset
