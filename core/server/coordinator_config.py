"""The settings the coordinators read, in Kafka's names (the server hands them to the
coordinators rather than to the engine's ManagerConfig)."""

from __future__ import annotations

COORDINATOR_KEYS = frozenset({
    "offsets.topic.num.partitions", "transaction.state.log.num.partitions",
    "group.min.session.timeout.ms", "group.max.session.timeout.ms",
    "group.initial.rebalance.delay.ms", "offset.metadata.max.bytes",
    "transaction.max.timeout.ms",
    "transaction.abort.timed.out.transaction.cleanup.interval.ms",
})
