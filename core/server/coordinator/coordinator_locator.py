"""Which node coordinates a group id or a transactional id (FindCoordinator's answer).

The coordinator of a key is the leader of the key's partition of the internal topic
(``__consumer_offsets`` for groups, ``__transaction_state`` for transactional ids). A node that
is a cluster of one leads them all. On a replicating node the internal topics are replicated
topics of the cluster, created on the first FindCoordinator that needs one, as Kafka creates
them: ``offsets.topic.replication.factor`` / ``transaction.state.log.replication.factor``
replicas (3), refused with COORDINATOR_NOT_AVAILABLE while fewer brokers are alive, and
``transaction.state.log.min.isr`` (2) for the transaction log. The partition count of an
existing topic is the cluster's, whatever this node was configured with.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol

from kio.schema.errors import ErrorCode

from tierlog.errors import TierlogError, TopicExistsError
from tierlog.server.context import BrokerServices
from tierlog.server.coordinator.coordinator_config import setting_int
from tierlog.server.coordinator.internal_topics import (
    CONSUMER_OFFSETS,
    INTERNAL_TOPIC_CONFIG,
    TRANSACTION_STATE,
)

__all__ = ["GROUP", "TRANSACTION", "CoordinatorLocator"]

log = logging.getLogger(__name__)

#: FindCoordinator's key types.
GROUP, TRANSACTION = 0, 1
#: Kafka's defaults.
DEFAULT_REPLICATION_FACTOR = 3
DEFAULT_TXN_MIN_ISR = 2


class PartitionedTopic(Protocol):
    """An internal topic as its coordinator sees it (OffsetsTopic, TxnStateTopic)."""

    partitions: int

    def partition_of(self, key: str) -> int: ...


@dataclass(frozen=True, slots=True)
class _Internal:
    name: str
    topic: PartitionedTopic
    replication_factor: int
    configs: Mapping[str, str]


class CoordinatorLocator:
    """Finds each key's coordinating node (see the module docstring)."""

    def __init__(self, services: BrokerServices, offsets: PartitionedTopic,
                 txn_state: PartitionedTopic, settings: Mapping[str, object]) -> None:
        self.services = services
        base = {k: str(v) for k, v in INTERNAL_TOPIC_CONFIG.items()}
        base["remote.storage.enable"] = "false"  # the coordinators' topics stay on the nodes
        txn_factor = setting_int(settings, "transaction.state.log.replication.factor",
                                 DEFAULT_REPLICATION_FACTOR, 1)
        min_isr = min(setting_int(settings, "transaction.state.log.min.isr",
                                  DEFAULT_TXN_MIN_ISR, 1), txn_factor)
        self._internal = {
            GROUP: _Internal(CONSUMER_OFFSETS, offsets, setting_int(
                settings, "offsets.topic.replication.factor", DEFAULT_REPLICATION_FACTOR, 1),
                base),
            TRANSACTION: _Internal(TRANSACTION_STATE, txn_state, txn_factor,
                                   {**base, "min.insync.replicas": str(min_isr)}),
        }

    def learn_partitions(self) -> None:
        """Take each existing internal topic's partition count from the cluster."""
        cluster = self.services.cluster
        if cluster is None:
            return
        for internal in self._internal.values():
            record = cluster.view.topics.get(internal.name)
            if record is not None:
                internal.topic.partitions = len(record.assignment)

    async def locate(self, key_type: int, key: str,
                     listener: str) -> tuple[ErrorCode, int, str, int]:
        """(error, node id, host, port) of the node coordinating ``key`` of ``key_type``,
        addressed on ``listener``."""
        services = self.services
        cluster = services.cluster
        if cluster is None:
            return (ErrorCode.none, services.node_id, *services.advertised(listener))
        internal = self._internal[key_type]
        if internal.name not in cluster.view.topics:
            error = await self._create(internal)
            if error is not ErrorCode.none:
                return error, -1, "", -1
        self.learn_partitions()
        state = cluster.view.partition(internal.name, internal.topic.partition_of(key))
        broker = None if state is None else cluster.view.brokers.get(state.leader)
        if state is None or broker is None or state.leader not in cluster.view.live:
            return ErrorCode.coordinator_not_available, -1, "", -1
        return (ErrorCode.none, state.leader, *broker.endpoint(listener))

    async def _create(self, internal: _Internal) -> ErrorCode:
        cluster = self.services.cluster
        assert cluster is not None
        live = len(cluster.view.live)
        if live < internal.replication_factor:
            log.warning("%s not created: %d live broker(s), its replication factor is %d",
                        internal.name, live, internal.replication_factor)
            return ErrorCode.coordinator_not_available
        try:
            await cluster.create_topic(internal.name, internal.topic.partitions,
                                       internal.replication_factor, internal.configs)
        except TopicExistsError:
            await cluster.refresh()
        except (TierlogError, OSError) as exc:
            log.warning("%s not created: %s", internal.name, exc)
            return ErrorCode.coordinator_not_available
        else:
            log.info("created %s in the cluster: %d partitions, %d replicas each",
                     internal.name, internal.topic.partitions, internal.replication_factor)
        return ErrorCode.none
