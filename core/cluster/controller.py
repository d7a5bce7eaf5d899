"""The controller: one node at a time holds the claim (``controller``) and keeps the cluster's
partitions led, applying ``controller_rules``' decisions as compare-and-swaps on the store.

Every node runs a :class:`Controller` and calls :meth:`Controller.step` every
``controller.claim.interval.ms``:

1. **Claim.** The holder renews its claim (a replace at the version it wrote). Another node
   takes it when it is free, or when it has not changed for ``broker.session.timeout.ms`` by
   the taker's own clock (its holder stopped renewing), with the next ``controller_epoch``.
   Any lost compare-and-swap means another node holds it: this one is not the controller.
2. **Duties**, while the claim holds: brokers silent for a session are fenced (a
   compare-and-swap that fails if they heartbeated meanwhile), and every partition's state is
   moved as the rules say for the live brokers (dead ones out of the in-sync set, a leader
   elected from it), each change a compare-and-swap at the partition's version: a change
   made meanwhile by the leader (an in-sync set change) or by another controller makes this
   one re-read at its next step, never overwrite.

A deposed controller's writes are harmless: each is derived from the partition state it read
and lands only if that state is still current, so every state the store ever holds follows
the rules from the one before (no unclean election, the in-sync set never emptied). A new
controller gives every broker a whole session before judging it dead.

:func:`create_topic` writes a new topic's assignment and its partitions' first states (over
a deleted topic of the same name: see ``topic_changes``, which owns the later changes).
"""

from __future__ import annotations

import logging
import random
import uuid
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field

from tierlog.cluster.controller_rules import assign_replicas, new_partition, on_brokers_changed
from tierlog.cluster.keys import (
    CONTROLLER,
    ControllerRecord,
    PartitionRecord,
    TopicRecord,
    is_deleted_partition,
    partition_key,
    topic_key,
)
from tierlog.cluster.registry import LivenessTracker, fence, live_brokers, read_brokers
from tierlog.cluster.store import MetadataStore, Versioned
from tierlog.cluster.topic_changes import (
    MAX_PREVIOUS_IDS,
    mark_partitions_deleted,
    read_topic,
    read_topic_records,
    write_first_states,
)
from tierlog.errors import MetadataConflictError, TopicExistsError

__all__ = ["Controller", "ControllerStep", "create_topic", "partition_states", "read_topics"]

log = logging.getLogger(__name__)


@dataclass
class ControllerStep:
    """What one step did."""

    controller: bool
    """Whether this node held the claim through the step."""
    epoch: int = 0
    """The controller epoch it held (0: none)."""
    fenced: list[int] = field(default_factory=list)
    """Brokers it fenced."""
    changed: list[tuple[str, int, PartitionRecord]] = field(default_factory=list)
    """Partitions it moved, with their new state."""
    conflicts: int = 0
    """Compare-and-swaps it lost (each re-read at the next step)."""


def read_topics(store: MetadataStore) -> dict[str, TopicRecord]:
    """Every live topic's assignment (a LIST, then a GET each; one removed between the two,
    or deleted, is left out)."""
    return {topic: record for topic, (record, _) in read_topic_records(store).items()
            if not record.deleted}


def partition_states(store: MetadataStore, topics: Mapping[str, TopicRecord] | None = None
                     ) -> Iterator[tuple[str, int, PartitionRecord, Versioned | None]]:
    """Every partition of every topic (``topics``, as :func:`read_topics` gives them; read
    here when None), in order, with its state and version; a partition the topic's assignment
    names but the store does not hold (its creator stopped before writing it, or it still
    holds a deleted topic's marker) comes with its first state and version None."""
    for topic, record in (read_topics(store) if topics is None else topics).items():
        for partition, replicas in enumerate(record.assignment):
            pkey = partition_key(topic, partition)
            current = store.read(pkey)
            if current is None or is_deleted_partition(current.value):
                yield topic, partition, new_partition(replicas), None
            else:
                yield topic, partition, PartitionRecord.from_value(pkey, current.value), current


class Controller:
    """This node's part in the controller role (see the module docstring). ``time_ms`` is its
    monotonic clock; not thread-safe: one task drives it."""

    def __init__(self, store: MetadataStore, node_id: int, *, session_timeout_ms: int,
                 time_ms: Callable[[], int]) -> None:
        self.store = store
        self.node_id = node_id
        self._tracker = LivenessTracker(session_timeout_ms, time_ms)
        self._incarnation = uuid.uuid4().hex
        self._claim: Versioned | None = None
        self.epoch = 0

    @property
    def active(self) -> bool:
        """Whether this node held the claim at its last step."""
        return self._claim is not None

    def step(self) -> ControllerStep:
        """Claim (or renew), then the duties while it holds (see the module docstring)."""
        if not self._claimed():
            return ControllerStep(False)
        done = ControllerStep(True, self.epoch)
        brokers = read_brokers(self.store)
        live = live_brokers(brokers, self._tracker)
        for node_id, (record, registered) in sorted(brokers.items()):
            if not record.fenced and node_id not in live:
                try:
                    fence(self.store, node_id, registered)
                except MetadataConflictError:  # it heartbeated after all
                    done.conflicts += 1
                    continue
                done.fenced.append(node_id)
                log.warning("controller (epoch %d) fenced node %d: silent for %d ms",
                            self.epoch, node_id, self._tracker.session_timeout_ms)
        topics = read_topics(self.store)
        for topic, partition, state, version in partition_states(self.store, topics):
            if version is None:  # a creator stopped before writing it: its first state
                topic_record = topics[topic]
                if write_first_states(self.store, topic, topic_record.topic_id,
                                      topic_record.assignment, [partition]):
                    done.changed.append((topic, partition, state))
                continue
            after = on_brokers_changed(state, live)
            if after == state:
                continue
            try:
                self.store.replace(partition_key(topic, partition), after.to_value(), version)
            except MetadataConflictError:
                done.conflicts += 1
                continue
            done.changed.append((topic, partition, after))
            log.info("controller (epoch %d): %s-%d leader %d -> %d (epoch %d), in-sync %s",
                     self.epoch, topic, partition, state.leader, after.leader,
                     after.leader_epoch, list(after.isr))
        return done

    def _claimed(self) -> bool:
        """Renew this node's claim or take a free or silent one; whether it holds it now."""
        try:
            if self._claim is not None:
                record = ControllerRecord(self.node_id, self.epoch, self._incarnation)
                self._claim = self.store.replace(CONTROLLER, record.to_value(), self._claim)
                return True
            current = self.store.read(CONTROLLER)
            if current is None:
                epoch = 1
                self._claim = self.store.create(CONTROLLER, ControllerRecord(
                    self.node_id, epoch, self._incarnation).to_value())
            else:
                self._tracker.observe(current, CONTROLLER)
                if self._tracker.alive(CONTROLLER):
                    return False
                held = ControllerRecord.from_value(CONTROLLER, current.value)
                epoch = held.controller_epoch + 1
                self._claim = self.store.replace(CONTROLLER, ControllerRecord(
                    self.node_id, epoch, self._incarnation).to_value(), current)
        except MetadataConflictError:
            if self._claim is not None:
                log.warning("node %d lost the controller claim (epoch %d)", self.node_id,
                            self.epoch)
            self._claim = None
            return False
        self.epoch = epoch
        log.info("node %d is the controller (epoch %d)", self.node_id, epoch)
        return True


def create_topic(store: MetadataStore, topic: str, topic_id: str, partitions: int,
                 replication_factor: int, live: set[int], *,
                 configs: Mapping[str, str] | None = None,
                 rng: random.Random | None = None) -> TopicRecord:
    """Assign ``topic``'s replicas over the ``live`` brokers (Kafka's round robin from a random
    start) and write its assignment, then each partition's first state (every replica in
    sync, the preferred one leading). TopicExistsError when the topic exists;
    InvalidReplicationFactorError when the factor exceeds the live brokers."""
    rng = rng or random.Random()
    n = max(1, len(live))
    assignment = assign_replicas(live, partitions, replication_factor,
                                 start=rng.randrange(n), shift=rng.randrange(n))
    key = topic_key(topic)
    found = read_topic(store, topic)
    if found is not None and not found[0].deleted:
        raise TopicExistsError(f"topic {topic!r} already exists in the cluster")
    previous: tuple[str, ...] = ()
    if found is not None:  # created again: the deleted one's partitions marked first
        tombstone = found[0]
        mark_partitions_deleted(store, topic, tombstone.topic_id)
        previous = (*tombstone.previous_ids, tombstone.topic_id)[-MAX_PREVIOUS_IDS:]
    record = TopicRecord(topic_id, tuple(assignment), dict(configs or {}),
                         previous_ids=previous)
    try:
        if found is None:
            store.create(key, record.to_value())
        else:
            store.replace(key, record.to_value(), found[1])
    except MetadataConflictError as e:
        raise TopicExistsError(f"topic {topic!r} already exists in the cluster") from e
    write_first_states(store, topic, topic_id, assignment, range(partitions))
    log.info("created topic %s (%d partitions, %d replicas each)", topic, partitions,
             replication_factor)
    return record

