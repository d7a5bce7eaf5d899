"""Writing a transaction's COMMIT or ABORT markers to every partition it touched (Kafka's
``TransactionMarkerChannelManager``): the one home of where a marker goes.

On a node that is a cluster of one every partition is local: each marker is appended to its
log. On a replicating node each marker goes to its partition's leader: appended here through
the :class:`~tierlog.server.coordinator.internal_log.InternalLog` when this node leads it
(answered once replicated), else sent as a WriteTxnMarkers request to the leader, which
appends it the same way. A marker that fails (its leader moved or is unreachable, too few
in-sync replicas) is retried against the partition's leader as the node's cluster view next
names it, until written, or until this node stops coordinating the transaction: then the
transaction stays in its Prepare state and the next coordinator completes it when it loads
the partition, as Kafka's does.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Sequence

from kio.schema.errors import ErrorCode
from kio.schema.types import ProducerId, TopicName
from kio.schema.write_txn_markers.v1.request import (
    WritableTxnMarker,
    WritableTxnMarkerTopic,
    WriteTxnMarkersRequest,
)
from kio.schema.write_txn_markers.v1.response import WriteTxnMarkersResponse
from kio.static.primitive import i16, i32

from tierlog.errors import (
    BrokerConnectionError,
    MarkersAbandonedError,
    TierlogError,
    UnknownTopicOrPartitionError,
)
from tierlog.server.context import BrokerServices
from tierlog.server.coordinator.internal_log import InternalLog
from tierlog.server.coordinator.internal_topics import CONSUMER_OFFSETS
from tierlog.server.error_codes import error_code_for
from tierlog.server.replication.wire_client import BrokerConnection

__all__ = ["MarkersAbandonedError", "TxnMarkers"]

log = logging.getLogger(__name__)

TopicPartitionKey = tuple[str, int]
#: Between two rounds of retrying the markers not yet written.
RETRY_BACKOFF_S = 0.2


class TxnMarkers:
    """The markers of the transactions one coordinator completes."""

    def __init__(self, services: BrokerServices, internal: InternalLog) -> None:
        self.services = services
        self.internal = internal
        self._connections: dict[tuple[int, str, int], BrokerConnection] = {}

    async def write(self, producer_id: int, producer_epoch: int,
                    partitions: Sequence[TopicPartitionKey], commit: bool, *,
                    coordinator_epoch: int, coordinating: Callable[[], bool]) -> list[int]:
        """Write the marker, stamped with ``coordinator_epoch`` (the leader epoch of the
        coordinator's ``__transaction_state`` partition: a partition refuses the markers of an
        older coordinator once it has one of a newer), to each of ``partitions``; returns the
        ``__consumer_offsets`` partitions whose marker was appended on this node (their
        groups' pending offsets settle here; a leader elsewhere settles its own).
        MarkersAbandonedError once ``coordinating()`` turns false with markers unwritten, or
        when a newer coordinator fenced this one."""
        if self.services.cluster is None:
            return await self.services.run_blocking(lambda: self._write_local(
                producer_id, producer_epoch, partitions, commit, coordinator_epoch))
        pending = list(partitions)
        settled: list[int] = []
        while True:
            failed = []
            for tp, error in (await self._round(producer_id, producer_epoch, pending, commit,
                                                coordinator_epoch, settled)).items():
                if error is ErrorCode.transaction_coordinator_fenced:
                    raise MarkersAbandonedError(
                        f"markers of producer {producer_id}: {tp[0]}-{tp[1]} has one of a "
                        f"newer coordinator than epoch {coordinator_epoch}")
                if error is not ErrorCode.none:
                    failed.append(tp)
                    log.info("marker of producer %d on %s-%d not written (%s); retrying",
                             producer_id, tp[0], tp[1], error.name)
            if not failed:
                return settled
            if not coordinating():
                raise MarkersAbandonedError(
                    f"markers of producer {producer_id} on {failed}: this node no longer "
                    f"coordinates the transaction; its next coordinator completes it")
            pending = failed
            await asyncio.sleep(RETRY_BACKOFF_S)

    def _write_local(self, producer_id: int, producer_epoch: int,
                     partitions: Sequence[TopicPartitionKey], commit: bool,
                     coordinator_epoch: int) -> list[int]:
        manager = self.services.manager
        settled = []
        for topic, partition in partitions:
            try:
                manager.log(topic, partition).append_marker(
                    producer_id, producer_epoch, commit=commit,
                    coordinator_epoch=coordinator_epoch)
            except UnknownTopicOrPartitionError:
                log.warning("no marker for %s-%d of producer %d: the partition is gone", topic,
                            partition, producer_id)
                continue
            if topic == CONSUMER_OFFSETS:
                settled.append(partition)
        self.services.appended()
        return settled

    async def _round(self, producer_id: int, producer_epoch: int,
                     partitions: Sequence[TopicPartitionKey], commit: bool,
                     coordinator_epoch: int,
                     settled: list[int]) -> dict[TopicPartitionKey, ErrorCode]:
        """One attempt at every marker: each partition's error code."""
        cluster = self.services.cluster
        assert cluster is not None
        view = cluster.view
        results: dict[TopicPartitionKey, ErrorCode] = {}
        remote: dict[int, list[TopicPartitionKey]] = {}
        for tp in partitions:
            if tp[0] not in view.topics:
                log.warning("no marker for %s-%d of producer %d: the topic is gone", tp[0],
                            tp[1], producer_id)
                results[tp] = ErrorCode.none
                continue
            state = view.partition(*tp)
            if state is None or state.leader < 0:
                results[tp] = ErrorCode.leader_not_available
            elif state.leader == self.services.node_id:
                results[tp] = await self.append_here(tp, producer_id, producer_epoch, commit,
                                                     coordinator_epoch)
                if results[tp] is ErrorCode.none and tp[0] == CONSUMER_OFFSETS:
                    settled.append(tp[1])
            else:
                remote.setdefault(state.leader, []).append(tp)
        for leader, tps in remote.items():
            results.update(await self._send(leader, tps, producer_id, producer_epoch, commit,
                                            coordinator_epoch))
        return results

    async def append_here(self, tp: TopicPartitionKey, producer_id: int, producer_epoch: int,
                          commit: bool, coordinator_epoch: int) -> ErrorCode:
        """Append the marker on this node, as the partition's leader, once replicated."""
        try:
            await self.internal.append(*tp, lambda log_, at: log_.append_marker(
                producer_id, producer_epoch, commit=commit,
                coordinator_epoch=coordinator_epoch, as_leader_at=at))
        except (TierlogError, OSError) as exc:
            return error_code_for(exc)
        return ErrorCode.none

    async def _send(self, leader: int, partitions: Sequence[TopicPartitionKey],
                    producer_id: int, producer_epoch: int, commit: bool,
                    coordinator_epoch: int) -> dict[TopicPartitionKey, ErrorCode]:
        cluster = self.services.cluster
        assert cluster is not None
        broker = cluster.view.brokers.get(leader)
        if broker is None:
            return dict.fromkeys(partitions, ErrorCode.leader_not_available)
        by_topic: dict[str, list[int]] = {}
        for topic, partition in partitions:
            by_topic.setdefault(topic, []).append(partition)
        request = WriteTxnMarkersRequest(markers=(WritableTxnMarker(
            producer_id=ProducerId(producer_id), producer_epoch=i16(producer_epoch),
            transaction_result=commit, coordinator_epoch=i32(coordinator_epoch),
            topics=tuple(WritableTxnMarkerTopic(name=TopicName(t), partition_indexes=tuple(
                i32(p) for p in ps)) for t, ps in by_topic.items())),))
        connection = self._connection(leader, broker.host, broker.port)
        try:
            answer = await connection.send(request, WriteTxnMarkersResponse)
        except BrokerConnectionError as exc:
            log.info("WriteTxnMarkers to node %d: %s", leader, exc)
            return dict.fromkeys(partitions, ErrorCode.coordinator_not_available)
        results = dict.fromkeys(partitions, ErrorCode.unknown_server_error)
        for marker in answer.markers:
            for answered in marker.topics:
                for part in answered.partitions:
                    results[(answered.name, int(part.partition_index))] = part.error_code
        return results

    def _connection(self, node_id: int, host: str, port: int) -> BrokerConnection:
        key = (node_id, host, port)
        connection = self._connections.get(key)
        if connection is None:
            cluster = self.services.cluster
            assert cluster is not None
            connection = BrokerConnection(
                host, port, client_id=f"tierlog-txn-markers-{self.services.node_id}",
                security=cluster.replicas.security)
            self._connections[key] = connection
        return connection

    async def close(self) -> None:
        connections, self._connections = list(self._connections.values()), {}
        for connection in connections:
            with contextlib.suppress(Exception):
                await connection.close()
