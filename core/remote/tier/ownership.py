"""Which log owns (tiers) a partition of the remote tier: ``<partition dir>/_owner.json``.

A LogManager's RemoteLogManager records itself as a partition's owner when it attaches the
log; a backfill (Spark's ``df.write.format("tierlog")``) refuses an owned partition with
PartitionOwnedError, since writing behind a live owner's back would fork the partition. A
partition written by Spark has no owner until a LogManager adopts it
(``LogManager.adopt_topic``).

JSON: ``{"owner": "<who>", "sinceMs": <epoch ms>, "version": 1}``, compact, sorted keys.
"""

from __future__ import annotations

import logging
import os
import socket
from dataclasses import dataclass

from tierlog.errors import CorruptRemoteMetadataError, PartitionOwnedError
from tierlog.records.timestamps import format_timestamp_ms
from tierlog.remote.api import TopicIdPartition, dumps, load_json_object
from tierlog.remote.tier.layout import owner_key
from tierlog.remote.tier.object_store import RemoteTier

log = logging.getLogger(__name__)

OWNER_VERSION = 1


@dataclass(frozen=True, slots=True)
class PartitionOwner:
    """The owner record of one partition."""

    owner: str
    """Who tiers the partition, e.g. ``LogManager on host:/data/kafka-logs``."""
    since_ms: int

    def __str__(self) -> str:
        """How messages name the owner: ``<owner> (since <ms> (<ISO time>))``."""
        return f"{self.owner} (since {format_timestamp_ms(self.since_ms)})"

    def to_json(self) -> str:
        return dumps({"version": OWNER_VERSION, "owner": self.owner, "sinceMs": self.since_ms})

    @classmethod
    def from_json(cls, data: bytes, source: str) -> PartitionOwner:
        """CorruptRemoteMetadataError naming ``source`` for malformed content."""
        obj = load_json_object(data, source)
        owner, since = obj.get("owner"), obj.get("sinceMs")
        if obj.get("version") != OWNER_VERSION or not isinstance(owner, str) \
                or isinstance(since, bool) or not isinstance(since, int):
            raise CorruptRemoteMetadataError(f"{source} is not a partition owner record")
        return cls(owner, since)


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
    """Record ``owner`` as the partition's owner (one PUT; kept when it is already so)."""
    current = read_owner(tier, tip)
    if current is not None and current.owner == owner:
        return
    if current is not None:
        log.info("%s: owner changes from %r to %r", tip, current.owner, owner)
    tier.put_bytes(PartitionOwner(owner, now_ms).to_json().encode(), tier.path(owner_key(tip)))


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
