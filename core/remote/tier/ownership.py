"""Which log owns (tiers) a partition of the remote tier: ``<partition dir>/_owner.json``.

A LogManager's RemoteLogManager records itself as a partition's owner when it attaches the
log; a backfill (Spark's ``df.write.format("tierlog")``) refuses an owned partition with
PartitionOwnedError, since writing behind a live owner's back would fork the partition. A
partition written by Spark has no owner until a LogManager adopts it
(``LogManager.adopt_topic``).

JSON: ``{"owner": "<who>", "sinceMs": <epoch ms>, "version": 1}``, compact, sorted keys.

A replicated partition (issue 24) is owned by its leader at a leader epoch: version 2,
``{"leaderEpoch": E, "owner": "node-<id>", "sinceMs": ..., "version": 2}``, written by
compare-and-swap (:func:`claim_leadership`) and only ever replaced by a higher epoch; a
LogManager's version-1 record never replaces it. Both versions are read.
"""

from __future__ import annotations

import logging
import os
import socket
from dataclasses import dataclass
from typing import TypeGuard

from tierlog.errors import (
    CorruptRemoteMetadataError,
    MetadataConflictError,
    PartitionOwnedError,
    TierFencedError,
)
from tierlog.records.timestamps import format_timestamp_ms
from tierlog.remote.api import TopicIdPartition, dumps, load_json_object
from tierlog.remote.tier.layout import owner_key
from tierlog.remote.tier.object_store import RemoteTier

log = logging.getLogger(__name__)

OWNER_VERSION = 1
#: The version of a replicated partition's record: it names the leader epoch.
LEADER_OWNER_VERSION = 2
#: How often a claim re-reads and tries again after losing a compare-and-swap.
CLAIM_ATTEMPTS = 5


@dataclass(frozen=True, slots=True)
class PartitionOwner:
    """The owner record of one partition."""

    owner: str
    """Who tiers the partition, e.g. ``LogManager on host:/data/kafka-logs``, ``node-2``."""
    since_ms: int
    leader_epoch: int | None = None
    """The leader epoch of a replicated partition's leader (version 2); None: a LogManager's."""

    def __str__(self) -> str:
        """How messages name the owner: ``<owner> (since <ms> (<ISO time>))``."""
        epoch = "" if self.leader_epoch is None else f" at leader epoch {self.leader_epoch}"
        return f"{self.owner}{epoch} (since {format_timestamp_ms(self.since_ms)})"

    def to_json(self) -> str:
        if self.leader_epoch is None:
            return dumps({"version": OWNER_VERSION, "owner": self.owner,
                          "sinceMs": self.since_ms})
        return dumps({"version": LEADER_OWNER_VERSION, "owner": self.owner,
                      "sinceMs": self.since_ms, "leaderEpoch": self.leader_epoch})

    @classmethod
    def from_json(cls, data: bytes, source: str) -> PartitionOwner:
        """CorruptRemoteMetadataError naming ``source`` for malformed content."""
        obj = load_json_object(data, source)
        owner, since, epoch = obj.get("owner"), obj.get("sinceMs"), obj.get("leaderEpoch")
        version = obj.get("version")
        if version == OWNER_VERSION:
            epoch = None
        elif version != LEADER_OWNER_VERSION or not _is_int(epoch) or epoch < 0:
            raise CorruptRemoteMetadataError(f"{source} is not a partition owner record")
        if not isinstance(owner, str) or not _is_int(since):
            raise CorruptRemoteMetadataError(f"{source} is not a partition owner record")
        return cls(owner, since, epoch)


def _is_int(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


def manager_owner(log_dir: str | os.PathLike[str]) -> str:
    """How a LogManager names itself as the owner of the partitions it tiers from
    ``log_dir``: ``LogManager on <host>:<absolute log dir>`` (a restore into that same
    directory takes the partitions back without --force-takeover)."""
    return f"LogManager on {socket.gethostname()}:{os.path.abspath(log_dir)}"


def read_owner(tier: RemoteTier, tip: TopicIdPartition) -> PartitionOwner | None:
    """The partition's owner record, or None when nobody owns it."""
    path = tier.path(owner_key(tip))
    if not tier.fs.exists(path):
        return None
    return PartitionOwner.from_json(tier.get_bytes(path), path)


def record_owner(tier: RemoteTier, tip: TopicIdPartition, owner: str, now_ms: int) -> None:
    """Record ``owner`` as the partition's owner (one PUT; kept when it is already so, and
    when a replicated partition's leader owns it: only a higher leader epoch replaces that)."""
    current = read_owner(tier, tip)
    if current is not None and current.owner == owner:
        return
    if current is not None and current.leader_epoch is not None:
        log.warning("%s: owned by its leader %s; %r does not take it over", tip, current,
                    owner)
        return
    if current is not None:
        log.info("%s: owner changes from %r to %r", tip, current.owner, owner)
    tier.put_bytes(PartitionOwner(owner, now_ms).to_json().encode(), tier.path(owner_key(tip)))


def claim_leadership(tier: RemoteTier, tip: TopicIdPartition, owner: str, leader_epoch: int,
                     now_ms: int) -> PartitionOwner:
    """Record ``owner`` (``node-<id>``) as the partition's owner at ``leader_epoch`` by
    compare-and-swap on the record read (kept when it says so already). TierFencedError when
    the record names a higher leader epoch (a newer leader claimed it: this one is stale),
    or when the swap keeps losing to other writers."""
    path = tier.path(owner_key(tip))
    for _ in range(CLAIM_ATTEMPTS):
        found = tier.read_versioned(path)
        current = None if found is None else PartitionOwner.from_json(found[0], path)
        if current is not None and current.leader_epoch is not None:
            if current.leader_epoch > leader_epoch:
                raise TierFencedError(
                    f"{tip}: {path} names {current}, newer than leader epoch {leader_epoch} "
                    f"of {owner}: another node leads the partition")
            if current.leader_epoch == leader_epoch and current.owner == owner:
                return current
        claimed = PartitionOwner(owner, now_ms, leader_epoch)
        try:
            tier.replace_if(claimed.to_json().encode(), path,
                            None if found is None else found[1])
        except MetadataConflictError:
            continue  # another claim landed first: read it and decide again
        if current is not None and current.owner != owner:
            log.info("%s: owner changes from %s to %s", tip, current, claimed)
        return claimed
    raise TierFencedError(f"{tip}: the claim of {path} by {owner} at leader epoch "
                          f"{leader_epoch} lost {CLAIM_ATTEMPTS} compare-and-swaps in a row")


def check_not_owned(tier: RemoteTier, tip: TopicIdPartition) -> None:
    """PartitionOwnedError naming the topic-partition and its owner when a log owns it."""
    current = read_owner(tier, tip)
    if current is not None:
        raise PartitionOwnedError(
            f"{tip.topic}-{tip.partition} (topic id {tip.topic_id}) is owned by "
            f"{current}: a backfill must not write a "
            f"partition a live LogManager tiers; produce to it through that LogManager instead")


def tier_of(component: object) -> RemoteTier | None:
    """The fsspec tier a RemoteStorageManager or metadata store works on (their ``tier``
    attribute), or None for one without a tier (a third-party RSM)."""
    tier = getattr(component, "tier", None)
    return tier if isinstance(tier, RemoteTier) else None
