"""ListOffsets: Kafka's special timestamps and the search by timestamp.

-1 latest (the high watermark, or the last stable offset for read_committed), -2 earliest
(the log start offset), -3 the record with the largest timestamp, -4 the earliest offset
still on local disk, -5 the latest offset in the remote tier (-1 when nothing is tiered);
any other timestamp: the first offset whose record timestamp is at or after it, below the
high watermark (none: offset -1).
"""

from __future__ import annotations

import datetime
from collections.abc import Container
from typing import TYPE_CHECKING, Any

import kio.schema.list_offsets.v1
from kio.schema.errors import ErrorCode

from tierlog.log.log import Log
from tierlog.manager.log_manager import LogManager
from tierlog.security.acl import AclOperation, ResourceType
from tierlog.server.api.metadata import leader_epoch_of
from tierlog.server.authorization import request_auth
from tierlog.server.context import HandlerRegistry, RequestContext
from tierlog.server.error_codes import error_code_for
from tierlog.server.framing import by_topic, make, nested
from tierlog.server.registry import Endpoint, register
from tierlog.server.services import Services

if TYPE_CHECKING:
    from tierlog.server.api.messages import ListOffsetsRequest, ListOffsetsResponse

API_KEY = 2
MIN_VERSION, MAX_VERSION = 1, 9

LATEST = -1
EARLIEST = -2
MAX_TIMESTAMP = -3
EARLIEST_LOCAL = -4
LATEST_TIERED = -5


def offset_for(partition_log: Log, timestamp: int, read_committed: bool) -> tuple[int, int]:
    """(timestamp, offset) that ListOffsets answers for one partition."""
    if timestamp == LATEST:
        return -1, (partition_log.last_stable_offset if read_committed
                    else partition_log.high_watermark)
    if timestamp == EARLIEST:
        return -1, partition_log.log_start_offset
    if timestamp == EARLIEST_LOCAL:
        return -1, partition_log.local_log_start_offset
    if timestamp == LATEST_TIERED:
        return -1, (partition_log.highest_offset_in_remote
                    if partition_log.remote_storage_enabled else -1)
    found = partition_log.fetch_offset_by_timestamp(timestamp)
    upper = (partition_log.last_stable_offset if read_committed
             else partition_log.high_watermark)
    if found is None or found.offset < 0 or found.offset >= upper:
        return -1, -1
    return found.timestamp, found.offset


def reads_committed(request: ListOffsetsRequest) -> bool:
    """The version-dependent field of a ListOffsetsRequest: isolation_level came with v2
    (v1 reads uncommitted)."""
    return (not isinstance(request, kio.schema.list_offsets.v1.ListOffsetsRequest)
            and int(request.isolation_level) == 1)


def lookup_all(manager: LogManager, request: ListOffsetsRequest,
               described: Container[str] | None = None
               ) -> list[tuple[str, int, ErrorCode | tuple[int, int]]]:
    """(topic, partition, error code or (timestamp, offset)) of each partition asked; a topic
    not in ``described`` (None: every one) answers TOPIC_AUTHORIZATION_FAILED."""
    read_committed = reads_committed(request)
    results: list[tuple[str, int, ErrorCode | tuple[int, int]]] = []
    for topic in request.topics:
        for part in topic.partitions:
            if described is not None and topic.name not in described:
                results.append((topic.name, part.partition_index,
                                ErrorCode.topic_authorization_failed))
                continue
            try:
                found = offset_for(manager.log(topic.name, part.partition_index),
                                   int(part.timestamp), read_committed)
            except Exception as exc:  # noqa: BLE001 - an item's own error code
                results.append((topic.name, part.partition_index, error_code_for(exc)))
            else:
                results.append((topic.name, part.partition_index, found))
    return results


async def list_offsets(services: Services, ctx: RequestContext,
                       request: ListOffsetsRequest) -> ListOffsetsResponse:
    """The offset of each partition's special or searched timestamp (of the topics the
    principal may DESCRIBE)."""
    manager = services.manager
    auth = request_auth(services, ctx)
    described = (auth.names(AclOperation.DESCRIBE, ResourceType.TOPIC,
                            (t.name for t in request.topics)) if auth.enabled else None)
    results = await services.run_blocking(lambda: lookup_all(manager, request, described))
    cls: type[ListOffsetsResponse] = ctx.response_type
    topic_t, part_t = (nested(cls, "ListOffsetsTopicResponse"),
                       nested(cls, "ListOffsetsPartitionResponse"))
    partitions: list[tuple[str, Any]] = []
    for name, index, result in results:
        if isinstance(result, ErrorCode):
            part = make(part_t, partition_index=index, error_code=result, timestamp=-1,
                        offset=-1, leader_epoch=-1)
        else:
            part = make(part_t, partition_index=index, error_code=ErrorCode.none,
                        timestamp=result[0], offset=result[1],
                        leader_epoch=leader_epoch_of(services, name, index))
        partitions.append((name, part))
    return make(cls, throttle_time=datetime.timedelta(0),
                topics=by_topic(topic_t, "name", partitions))


ENDPOINTS = (Endpoint(API_KEY, list_offsets, MIN_VERSION, MAX_VERSION),)


def install(registry: HandlerRegistry, services: Services) -> None:
    register(registry, services, ENDPOINTS)
