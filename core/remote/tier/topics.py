"""Which partitions of a topic the remote tier holds: the one home of the choice between a
topic's incarnations (a topic deleted and re-created against the same tier is there under
several topic ids), for the tier reader (``tierlog.reader``) and the backfill writer
(``tierlog.remote.ops.backfill``), which must append to the incarnation readers read.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

from tierlog.errors import RemoteStorageError
from tierlog.remote.api import TopicIdPartition
from tierlog.remote.tier.layout import table_key
from tierlog.remote.tier.manifest import load_partition, remote_partitions
from tierlog.remote.tier.object_store import RemoteTier

log = logging.getLogger(__name__)


def topic_partitions(tier: RemoteTier, topic: str, topic_id: str | None = None
                     ) -> dict[int, TopicIdPartition]:
    """The partitions of ``topic`` in the tier (one LIST of the root), of the incarnation
    ``topic_id`` when given.

    A topic deleted and re-created (or re-created from another data dir) against the same
    tier is there under several topic ids. Without ``topic_id`` the newest incarnation is
    read: the one whose segment metadata holds the latest event time (every copy and delete
    stamps one; one manifest GET per partition of each incarnation). RemoteStorageError when
    that cannot tell them apart.
    """
    found = [p for p in remote_partitions(tier) if p.topic == topic
             and (topic_id is None or p.topic_id == topic_id)]
    by_id: dict[str, list[TopicIdPartition]] = {}
    for p in found:
        by_id.setdefault(p.topic_id, []).append(p)
    if len(by_id) > 1:
        chosen = newest_incarnation(tier, topic, by_id)
        found = by_id[chosen]
    return {p.partition: p for p in found}


def newest_incarnation(tier: RemoteTier, topic: str,
                       by_id: Mapping[str, list[TopicIdPartition]]) -> str:
    """The topic id of the incarnation with the latest segment event time."""
    latest = {tid: max((_last_event_ms(tier, p) for p in parts), default=-1)
              for tid, parts in by_id.items()}
    ranked = sorted(latest.items(), key=lambda item: item[1], reverse=True)
    if ranked[0][1] == ranked[1][1]:
        raise RemoteStorageError(
            f"topic {topic!r} is in the tier under several topic ids "
            f"({', '.join(sorted(by_id))}) and none is newer by its metadata; pass topic_id "
            f"(Spark: the topicId option) to choose one"
        )
    log.info("topic %r has %d incarnations in the tier; reading the newest, %s",
             topic, len(by_id), ranked[0][0])
    return ranked[0][0]


def _last_event_ms(tier: RemoteTier, tip: TopicIdPartition) -> int:
    manifest, _ = load_partition(tier, tip, verify=False)
    return max((m.event_timestamp_ms for m in manifest.segments), default=-1)


def has_table(tier: RemoteTier, topic: str, topic_id: str) -> bool:
    """Whether the tier holds the Iceberg table of the topic incarnation ``topic_id`` (one
    LIST of ``_tables/``; no pyiceberg import, so a reader of a topic without one pays nothing
    more)."""
    directory, _, name = table_key(topic, topic_id).rpartition("/")
    return name in tier.list_names(tier.path(directory), dirs=True)
