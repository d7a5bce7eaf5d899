"""The settings the coordinators read, in Kafka's names (the server hands them to the
coordinators rather than to the engine's ManagerConfig)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tierlog.config import parse_int_at_least

COORDINATOR_KEYS = frozenset({
    "offsets.topic.num.partitions", "transaction.state.log.num.partitions",
    "group.min.session.timeout.ms", "group.max.session.timeout.ms",
    "group.initial.rebalance.delay.ms", "offset.metadata.max.bytes",
    "transaction.max.timeout.ms",
    "transaction.abort.timed.out.transaction.cleanup.interval.ms",
    # A replicating node's internal topics (cluster.metadata.url), Kafka's names and defaults.
    "offsets.topic.replication.factor", "transaction.state.log.replication.factor",
    "transaction.state.log.min.isr", "offsets.commit.timeout.ms",
})


def setting_int(values: Mapping[str, Any], key: str, default: int, minimum: int = 0) -> int:
    """The integer setting ``key`` (``default`` when absent); ConfigError naming the key when
    it is not an integer of at least ``minimum``."""
    return parse_int_at_least(key, values.get(key, default), minimum)
