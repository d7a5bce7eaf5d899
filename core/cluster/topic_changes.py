"""Changes to a cluster's topics after their creation, in the store: deletion, growth
(CreatePartitions) and configuration overrides, each a compare-and-swap on the topic's record
(``topics/t_<topic>``), and the writes of partitions' first states shared with creation.

**Deletion** replaces the topic's record with its tombstone (one compare-and-swap: from then on
every reader takes the topic for absent, whatever its partition objects still hold), then
replaces each partition object with :data:`~tierlog.cluster.keys.DELETED_PARTITION`. A crash
between the two leaves partition objects no reader looks at (readers reach partitions through
a live topic record only); the topic's next creation marks them before it writes its record.
So a half-deleted topic never looks alive, and a topic created again never starts from its
predecessor's leaders or in-sync sets.

**Partition first states** are written only over nothing or a deleted marker, and only while
the topic's record still names the id they are written for (read after the partition, so a
topic deleted and created again meanwhile is never given the old one's replicas). Marking is
guarded the same way: only while the tombstone of the deleted id is in place.

Every function here is blocking store I/O; a lost compare-and-swap is read again and retried
(a few times: a topic changed that often is a caller's loop, answered with the conflict).
"""

from __future__ import annotations

import logging
import random
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import replace

from tierlog.cluster.controller_rules import assign_replicas, new_partition
from tierlog.cluster.keys import (
    DELETED_PARTITION,
    TOPICS,
    TopicRecord,
    is_deleted_partition,
    partition_key,
    partitions_prefix,
    topic_key,
    topic_of,
)
from tierlog.cluster.store import MetadataStore, Versioned
from tierlog.errors import (
    InvalidPartitionsError,
    InvalidReplicaAssignmentError,
    MetadataConflictError,
    UnknownTopicOrPartitionError,
)

__all__ = ["MAX_PREVIOUS_IDS", "alter_topic_configs", "create_partitions", "delete_topic",
           "grown", "mark_partitions_deleted", "read_topic", "read_topic_records",
           "write_first_states"]

log = logging.getLogger(__name__)

#: How many earlier ids of a topic name its record keeps (``previous_ids``): a node down
#: through more deletions of the name than this keeps its old logs (and logs a warning).
MAX_PREVIOUS_IDS = 1000
_ATTEMPTS = 8


def read_topic_records(store: MetadataStore) -> dict[str, tuple[TopicRecord, Versioned]]:
    """Every topic record, tombstones included, with its version (a LIST, then a GET each;
    one gone between the two is left out)."""
    topics: dict[str, tuple[TopicRecord, Versioned]] = {}
    for key in store.list_keys(TOPICS):
        topic = topic_of(key)
        found = None if topic is None else store.read(key)
        if topic is not None and found is not None:
            topics[topic] = (TopicRecord.from_value(key, found.value), found)
    return topics


def read_topic(store: MetadataStore, topic: str) -> tuple[TopicRecord, Versioned] | None:
    """``topic``'s record and version, tombstone or not; None when the store never held it."""
    key = topic_key(topic)
    found = store.read(key)
    return None if found is None else (TopicRecord.from_value(key, found.value), found)


def _live(store: MetadataStore, topic: str) -> tuple[TopicRecord, Versioned]:
    found = read_topic(store, topic)
    if found is None or found[0].deleted:
        raise UnknownTopicOrPartitionError(f"unknown topic {topic} (in the cluster)")
    return found


def _conflict(topic: str, what: str) -> MetadataConflictError:
    key = topic_key(topic)
    return MetadataConflictError(f"{what} of topic {topic!r}: its record kept changing "
                                 f"({_ATTEMPTS} attempts)", key=key, expected=None, found=None)


def delete_topic(store: MetadataStore, topic: str) -> TopicRecord:
    """Delete ``topic`` (see the module docstring): its tombstone, then its partitions
    marked. Returns the tombstone. UnknownTopicOrPartitionError when it is absent or deleted
    already."""
    for _ in range(_ATTEMPTS):
        record, version = _live(store, topic)
        tombstone = replace(record, deleted=True)
        try:
            store.replace(topic_key(topic), tombstone.to_value(), version)
        except MetadataConflictError:
            continue
        mark_partitions_deleted(store, topic, tombstone.topic_id)
        log.info("deleted topic %s (id %s) from the cluster", topic, record.topic_id)
        return tombstone
    raise _conflict(topic, "deletion")


def mark_partitions_deleted(store: MetadataStore, topic: str, deleted_id: str) -> None:
    """Replace each of ``topic``'s partition objects with the deleted marker, while the
    topic's record is the tombstone of ``deleted_id`` (it stops when the topic is created
    again: the new topic's creator marked what it needed)."""
    for key in store.list_keys(partitions_prefix(topic)):
        while True:
            current = store.read(key)
            if current is None or is_deleted_partition(current.value):
                break
            found = read_topic(store, topic)
            if found is None or not found[0].deleted or found[0].topic_id != deleted_id:
                return
            try:
                store.replace(key, dict(DELETED_PARTITION), current)
                break
            except MetadataConflictError:
                continue  # the leader or the controller changed it meanwhile: again


def write_first_states(store: MetadataStore, topic: str, topic_id: str,
                       assignment: Sequence[Sequence[int]], partitions: Collection[int]
                       ) -> list[int]:
    """Write the first state (every replica in sync, the preferred one leading) of each of
    ``partitions`` of ``topic`` whose object is absent or a deleted marker, while the topic's
    record is live with ``topic_id``; an object holding a state is kept (an earlier attempt
    wrote it, and its leader may have moved on). Returns the partitions written."""
    written: list[int] = []
    for p in sorted(partitions):
        key = partition_key(topic, p)
        state = new_partition(assignment[p]).to_value()
        while True:
            current = store.read(key)
            if current is not None and not is_deleted_partition(current.value):
                break
            found = read_topic(store, topic)
            if found is None or found[0].deleted or found[0].topic_id != topic_id:
                return written
            try:
                store.swap(key, state, current)
            except MetadataConflictError:
                continue
            written.append(p)
            break
    return written


def grown(record: TopicRecord, topic: str, count: int, live: Collection[int],
          assignments: Sequence[Sequence[int]] | None = None,
          rng: random.Random | None = None) -> TopicRecord:
    """``record`` grown to ``count`` partitions (pure): the new partitions' replicas are
    ``assignments`` when given (one list per new partition, each of the topic's replication
    factor, distinct live nodes), else assigned over the ``live`` nodes as a new topic's are.
    InvalidPartitionsError when ``count`` does not grow the topic,
    InvalidReplicaAssignmentError for a wrong assignment, InvalidReplicationFactorError when
    fewer nodes are live than the topic's replication factor."""
    current = len(record.assignment)
    if count <= current:
        raise InvalidPartitionsError(f"topic {topic} has {current} partitions; the new count "
                                     f"{count} must be larger")
    factor = len(record.assignment[0])
    added = count - current
    if assignments:
        if len(assignments) != added:
            raise InvalidReplicaAssignmentError(
                f"topic {topic}: {len(assignments)} replica assignments for the {added} new "
                f"partitions")
        for i, replicas in enumerate(assignments):
            p = current + i
            if len(replicas) != factor or len(set(replicas)) != len(replicas):
                raise InvalidReplicaAssignmentError(
                    f"{topic}-{p}: replicas {list(replicas)} are not {factor} distinct nodes "
                    f"(the topic's replication factor)")
            missing = sorted(set(replicas) - set(live))
            if missing:
                raise InvalidReplicaAssignmentError(
                    f"{topic}-{p}: replicas {list(replicas)} name nodes {missing} that are not "
                    f"live (live: {sorted(live)})")
        new = [tuple(int(n) for n in r) for r in assignments]
    else:
        rng = rng or random.Random()
        n = max(1, len(live))
        new = assign_replicas(live, added, factor, start=rng.randrange(n),
                              shift=rng.randrange(n))
    return replace(record, assignment=(*record.assignment, *new))


def create_partitions(store: MetadataStore, topic: str, count: int, live: Collection[int],
                      assignments: Sequence[Sequence[int]] | None = None, *,
                      rng: random.Random | None = None) -> TopicRecord:
    """Grow ``topic`` to ``count`` partitions (:func:`grown`) by a compare-and-swap of its
    record, then write the new partitions' first states. Returns the new record;
    UnknownTopicOrPartitionError when the topic is absent or deleted."""
    for _ in range(_ATTEMPTS):
        record, version = _live(store, topic)
        after = grown(record, topic, count, live, assignments, rng)
        try:
            store.replace(topic_key(topic), after.to_value(), version)
        except MetadataConflictError:
            continue
        write_first_states(store, topic, after.topic_id, after.assignment,
                           range(len(record.assignment), count))
        log.info("grew topic %s from %d to %d partitions", topic, len(record.assignment),
                 count)
        return after
    raise _conflict(topic, "growth")


def alter_topic_configs(store: MetadataStore, topic: str,
                        change: Callable[[Mapping[str, str]], Mapping[str, str]]
                        ) -> TopicRecord:
    """Replace ``topic``'s configuration overrides with ``change(current overrides)`` (which
    validates them, raising to refuse) by a compare-and-swap of its record. Returns the new
    record; UnknownTopicOrPartitionError when the topic is absent or deleted."""
    for _ in range(_ATTEMPTS):
        record, version = _live(store, topic)
        after = replace(record, configs=dict(change(dict(record.configs))))
        if after == record:
            return record
        try:
            store.replace(topic_key(topic), after.to_value(), version)
        except MetadataConflictError:
            continue
        log.info("altered topic %s's configs in the cluster: %s", topic, dict(after.configs))
        return after
    raise _conflict(topic, "config change")
