"""Adoption: a LogManager takes over a topic the remote tier holds and no log owns (one
written by Spark's ``df.write.format("tierlog")``, the backfill) and continues it at its end.

The adopted partition's local log is what a tiered log whose older segments all moved to
the tier looks like: log start offset = the tier's start, one empty active segment at the
tier's end (the next offset), the leader-epoch cache from the checkpoint copied with the
tier's last segment, and the producer state from that segment's producer snapshot (the
loader fetches it, as for any tiered log whose snapshot at its local start is gone:
``LogLoader._keep_snapshot_at_local_start``). Reads below the local start come from the tier,
appends continue at the end, and tiering copies the new segments after the tier's ones.

:func:`plan_adoption` reads the tier (rolling forward any backfill commit a crash left
first, so the end offset is final); :func:`seed_log_dir` prepares the local directory;
``LogManager.adopt_topic`` opens and attaches the logs (the attach records the owner, so a
later backfill refuses the partition). Restoring a whole LogManager from the bucket extends
this: the same two steps for every topic of the tier.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from tierlog import filenames
from tierlog.checkpoint import LeaderEpochCheckpointFile, decode_leader_epoch_checkpoint
from tierlog.errors import ConfigError, UnknownTopicOrPartitionError
from tierlog.leader_epoch import EpochEntry
from tierlog.remote.api import (
    IndexType,
    RemoteLogSegmentState,
    RemoteStorageManager,
    TopicIdPartition,
)
from tierlog.remote.backfill_commit import BackfillCommitter
from tierlog.remote.manifest import tier_log_start
from tierlog.remote.metadata_api import RemoteLogMetadataStore
from tierlog.remote.object_store import RemoteTier
from tierlog.remote.ownership import check_not_owned, tier_of
from tierlog.remote.topics import topic_partitions
from tierlog.segment import LogSegment

log = logging.getLogger(__name__)

_FINISHED = RemoteLogSegmentState.COPY_SEGMENT_FINISHED


@dataclass(frozen=True, slots=True)
class AdoptedPartition:
    """What the tier holds of one partition, as its adopting log starts from it."""

    tip: TopicIdPartition
    log_start_offset: int
    """The tier's start: its first committed offset, or the recorded remote log start."""
    end_offset: int
    """The next offset: one past the tier's last committed offset (0 for an empty one)."""
    epochs: tuple[EpochEntry, ...]
    """The leader-epoch checkpoint copied with the tier's last segment (empty when none)."""


def plan_adoption(rlmm: RemoteLogMetadataStore, rsm: RemoteStorageManager, topic: str, *,
                  time_ms: Callable[[], int]) -> list[AdoptedPartition]:
    """Every partition of ``topic``'s incarnation in the tier (the one readers read), in
    partition order. UnknownTopicOrPartitionError when the tier has no such topic;
    PartitionOwnedError when a log owns one of its partitions; ConfigError when the remote
    storage exposes no fsspec tier to list (a third-party RemoteStorageManager)."""
    tier = tier_of(rlmm) or tier_of(rsm)
    if tier is None:
        raise ConfigError("remote.storage.manager", "adopting a topic needs a remote storage "
                                                    "whose tier tierlog can list (local or s3)")
    _roll_forward_backfills(tier, time_ms)
    found = topic_partitions(tier, topic)
    if not found:
        raise UnknownTopicOrPartitionError(f"the remote tier at {tier.root} holds no topic "
                                           f"{topic!r} to adopt")
    planned = []
    for p in sorted(found):
        tip = found[p]
        check_not_owned(tier, tip)
        planned.append(_partition_state(rlmm, rsm, tip))
    return planned


def _roll_forward_backfills(tier: RemoteTier, time_ms: Callable[[], int]) -> None:
    committer = BackfillCommitter(tier, time_ms=time_ms)
    try:
        committer.recover()
    finally:
        committer.close()


def _partition_state(rlmm: RemoteLogMetadataStore, rsm: RemoteStorageManager,
                     tip: TopicIdPartition) -> AdoptedPartition:
    committed = sorted((m for m in rlmm.list_remote_log_segments(tip) if m.state is _FINISHED),
                       key=lambda m: (m.end_offset, m.start_offset))
    if not committed:
        return AdoptedPartition(tip, 0, 0, ())
    last = committed[-1]
    start = tier_log_start(committed, rlmm.log_start_offset(tip))
    source = f"the leader-epoch checkpoint of {tip} segment {last.remote_log_segment_id}"
    with rsm.fetch_index(last, IndexType.LEADER_EPOCH) as stream:
        epochs = decode_leader_epoch_checkpoint(stream.read(), source)
    return AdoptedPartition(tip, start, last.end_offset + 1, tuple(epochs))


def seed_log_dir(directory: Path, state: AdoptedPartition, *, index_interval_bytes: int,
                 max_index_size: int) -> None:
    """Prepare an empty partition directory as the tier's continuation: the leader-epoch
    checkpoint (written atomically) and an empty segment at the tier's end offset. The log
    opened on it with ``log_start_offset=state.log_start_offset`` and ``remote_snapshots``
    loads the producer snapshot the tier holds at the end offset."""
    if any(p.name.endswith(filenames.LOG_SUFFIX) for p in directory.iterdir()):
        raise ConfigError("directory", f"{directory} holds segments: adoption starts a log "
                                       f"afresh")
    LeaderEpochCheckpointFile(directory / filenames.LEADER_EPOCH_CHECKPOINT).write(
        list(state.epochs))
    LogSegment.open(directory, state.end_offset, index_interval_bytes=index_interval_bytes,
                    max_index_size=max_index_size).close()
    log.info("%s: seeded to continue the tier at offset %d (log start %d)", directory.name,
             state.end_offset, state.log_start_offset)


__all__ = ["AdoptedPartition", "plan_adoption", "seed_log_dir"]
