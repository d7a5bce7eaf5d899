"""WriteTxnMarkers (API 27), the inter-broker request of Kafka's transaction coordinators:
write a transaction's COMMIT or ABORT marker to partitions this node leads.

Each marker is appended as the partition's leader and answered once every in-sync replica
holds it (Kafka appends markers with ``acks=all``); a partition led elsewhere answers
NOT_LEADER_OR_FOLLOWER and the coordinator resends it to the new leader. A marker on a
``__consumer_offsets`` partition also settles the transaction's pending offsets in this
node's group coordinator. Only a principal with CLUSTER_ACTION on the cluster may send it
(the other brokers).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import TYPE_CHECKING

from kio.schema.errors import ErrorCode

from tierlog.security.acl import AclOperation
from tierlog.server.authorization import request_auth
from tierlog.server.context import HandlerRegistry, RequestContext
from tierlog.server.coordinator.group.groups import GroupCoordinator
from tierlog.server.coordinator.internal_topics import CONSUMER_OFFSETS
from tierlog.server.coordinator.txn.txn_markers import TxnMarkers
from tierlog.server.framing import make, nested
from tierlog.server.registry import Endpoint, register

if TYPE_CHECKING:
    from tierlog.server.api.messages import WriteTxnMarkersRequest, WriteTxnMarkersResponse

__all__ = ["ENDPOINTS", "install", "write_txn_markers"]

API_KEY = 27
MIN_VERSION, MAX_VERSION = 1, 1


@dataclass(frozen=True, slots=True)
class MarkerApis:
    """What WriteTxnMarkers serves from: the markers' writer and the group coordinator."""

    markers: TxnMarkers
    groups: GroupCoordinator


async def write_txn_markers(apis: MarkerApis, ctx: RequestContext,
                            request: WriteTxnMarkersRequest) -> WriteTxnMarkersResponse:
    """Append each marker to each of its partitions (concurrently), each partition's error
    code in the answer."""
    cls: type[WriteTxnMarkersResponse] = ctx.response_type
    auth = request_auth(apis.groups.services, ctx)
    allowed = not auth.enabled or auth.may_cluster(AclOperation.CLUSTER_ACTION)

    async def one(producer_id: int, producer_epoch: int, commit: bool, coordinator_epoch: int,
                  topic: str, partition: int) -> ErrorCode:
        if not allowed:
            return ErrorCode.cluster_authorization_failed
        error = await apis.markers.append_here((topic, partition), producer_id,
                                               producer_epoch, commit, coordinator_epoch)
        if error is ErrorCode.none and topic == CONSUMER_OFFSETS:
            apis.groups.complete_txn(producer_id, [partition], commit)
        return error

    asked = [(m, t, int(p)) for m in request.markers for t in m.topics
             for p in t.partition_indexes]
    codes = await asyncio.gather(*(
        one(int(m.producer_id), int(m.producer_epoch), bool(m.transaction_result),
            int(m.coordinator_epoch), t.name, p)
        for m, t, p in asked))
    found: dict[int, dict[str, list[tuple[int, ErrorCode]]]] = {}
    for (marker, topic, partition), code in zip(asked, codes, strict=True):
        found.setdefault(int(marker.producer_id), {}).setdefault(topic.name, []).append(
            (partition, code))
    marker_t = nested(cls, "WritableTxnMarkerResult")
    topic_t = nested(cls, "WritableTxnMarkerTopicResult")
    part_t = nested(cls, "WritableTxnMarkerPartitionResult")
    return make(cls, markers=tuple(
        make(marker_t, producer_id=pid, topics=tuple(
            make(topic_t, name=name, partitions=tuple(
                make(part_t, partition_index=p, error_code=code) for p, code in parts))
            for name, parts in topics.items()))
        for pid, topics in found.items()))


ENDPOINTS = (Endpoint(API_KEY, write_txn_markers, MIN_VERSION, MAX_VERSION),)


def install(registry: HandlerRegistry, markers: TxnMarkers, groups: GroupCoordinator) -> None:
    """Register WriteTxnMarkers' handler."""
    register(registry, MarkerApis(markers, groups), ENDPOINTS)
