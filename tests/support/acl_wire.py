"""Test helper for the ACL tests against a real ``tierlog serve`` with an authorizer: kio
requests sent from a chosen loopback address (the server sees each client's host, so one
principal, ``User:ANONYMOUS`` until a listener authenticates, can be granted ACLs from one
host and none from another), ACLs created over the wire, and every error code of an answer."""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
from collections.abc import Iterable, Iterator
from typing import Any

from kio.schema.create_acls.v3 import request as create_acls_request
from kio.schema.create_acls.v3.response import CreateAclsResponse
from kio.schema.create_topics.v7 import request as create_topics
from kio.schema.errors import ErrorCode
from kio.schema.fetch.v12 import request as fetch
from kio.schema.metadata.v12 import request as metadata
from kio.schema.offset_commit.v8 import request as offset_commit
from kio.schema.produce.v9 import request as produce
from kio.static.primitive import Records

from tierlog.records.builder import build_batch
from tierlog.records.record import Record
from tierlog.security.acl import AclOperation, AclPermissionType, PatternType, ResourceType
from tierlog.server.framing import response_class
from tierlog.server.replication.wire_client import BrokerConnection

#: authorizer.class.name, as a Kafka broker's server.properties names it (and one partition
#: per internal topic: a server starts in a second).
AUTHORIZER = {"authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
              "offsets.topic.num.partitions": "1", "transaction.state.log.num.partitions": "1"}
PRINCIPAL = "User:ANONYMOUS"
#: The errors an authorizer answers.
AUTH_FAILURES = frozenset({ErrorCode.topic_authorization_failed,
                           ErrorCode.group_authorization_failed,
                           ErrorCode.cluster_authorization_failed,
                           ErrorCode.transactional_id_authorization_failed})


class BoundConnection(BrokerConnection):
    """A BrokerConnection whose socket is bound to ``source`` (a loopback address)."""

    def __init__(self, source: str, port: int) -> None:
        super().__init__("127.0.0.1", port, client_id=f"acl-test-{source}", timeout_s=30.0)
        self.source = source

    async def _connected(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        if self._streams is None:
            self._streams = await asyncio.open_connection(self.host, self.port,
                                                          local_addr=(self.source, 0))
        return self._streams


def send(port: int, source: str, request: object) -> Any:
    """``request`` sent from ``source`` on a new connection, and its answer."""
    async def run() -> Any:
        connection = BoundConnection(source, port)
        try:
            kind: Any = type(request)
            return await connection.send(request, response_class(int(kind.__api_key__),
                                                                 int(kind.__version__)))
        finally:
            await connection.close()
    return asyncio.run(run())


def acl(resource_type: ResourceType, name: str, operation: AclOperation, host: str, *,
        pattern: PatternType = PatternType.LITERAL,
        permission: AclPermissionType = AclPermissionType.ALLOW,
        principal: str = PRINCIPAL) -> create_acls_request.AclCreation:
    """One AclCreation of a CreateAcls v3."""
    return create_acls_request.AclCreation(
        resource_type=int(resource_type), resource_name=name, resource_pattern_type=int(pattern),
        principal=principal, host=host, operation=int(operation),
        permission_type=int(permission))


def create_acls(port: int, source: str,
                creations: Iterable[create_acls_request.AclCreation]) -> CreateAclsResponse:
    """A CreateAcls v3 of ``creations`` sent from ``source``."""
    answer: CreateAclsResponse = send(port, source, create_acls_request.CreateAclsRequest(
        creations=tuple(creations)))
    return answer


_MS = datetime.timedelta(milliseconds=1)


def produce_request(topic: str, transactional_id: str | None = None) -> produce.ProduceRequest:
    """A Produce v9 (acks=all) of one record to partition 0 of ``topic``; with a
    ``transactional_id``, a transactional batch (of producer id 7, epoch 0)."""
    transactional = transactional_id is not None
    batch = build_batch([Record(b"k", b"v")], is_transactional=transactional,
                        producer_id=7 if transactional else -1,
                        producer_epoch=0 if transactional else -1,
                        base_sequence=0 if transactional else -1)
    return produce.ProduceRequest(
        transactional_id=transactional_id, acks=-1, timeout=10_000 * _MS,
        topic_data=(produce.TopicProduceData(name=topic, partition_data=(
            produce.PartitionProduceData(index=0, records=Records(batch)),)),))


def fetch_request(topic: str, partitions: Iterable[int] = (0,), *,
                  replica_id: int = -1) -> fetch.FetchRequest:
    """A Fetch v12 of ``topic``'s ``partitions`` from offset 0 (no wait)."""
    return fetch.FetchRequest(
        cluster_id=None, replica_id=replica_id, max_wait=10 * _MS, min_bytes=0,
        max_bytes=1 << 20, isolation_level=0, session_id=0, session_epoch=-1,
        topics=(fetch.FetchTopic(topic=topic, partitions=tuple(fetch.FetchPartition(
            partition=p, current_leader_epoch=-1, fetch_offset=0, last_fetched_epoch=-1,
            log_start_offset=-1, partition_max_bytes=1 << 20) for p in partitions)),),
        forgotten_topics_data=(), rack_id="")


def metadata_request(topics: Iterable[str] | None, *,
                     auto_create: bool = False) -> metadata.MetadataRequest:
    """A Metadata v12 of ``topics`` (None: every topic), asking for authorized operations."""
    return metadata.MetadataRequest(
        topics=None if topics is None else tuple(
            metadata.MetadataRequestTopic(topic_id=None, name=n) for n in topics),
        allow_auto_topic_creation=auto_create, include_topic_authorized_operations=True)


def commit_request(group: str, topic: str) -> offset_commit.OffsetCommitRequest:
    """An OffsetCommit v8 of offset 1 of partition 0 of ``topic`` by ``group`` (no member:
    a simple commit)."""
    return offset_commit.OffsetCommitRequest(
        group_id=group, generation_id_or_member_epoch=-1, member_id="", group_instance_id=None,
        topics=(offset_commit.OffsetCommitRequestTopic(name=topic, partitions=(
            offset_commit.OffsetCommitRequestPartition(
                partition_index=0, committed_offset=1, committed_leader_epoch=-1,
                committed_metadata=""),)),))


def create_topic_request(name: str, partitions: int = 1) -> create_topics.CreateTopicsRequest:
    """A CreateTopics v7 of ``name``."""
    return create_topics.CreateTopicsRequest(topics=(create_topics.CreatableTopic(
        name=name, num_partitions=partitions, replication_factor=1, assignments=(),
        configs=()),), timeout=10_000 * _MS, validate_only=False)


def error_codes(entity: object) -> Iterator[ErrorCode]:
    """Every error code in an answer, at any depth (``error_code``, ``partition_error_code``)."""
    if isinstance(entity, tuple):
        for item in entity:
            yield from error_codes(item)
        return
    if not dataclasses.is_dataclass(entity):
        return
    for field in dataclasses.fields(entity):
        value = getattr(entity, field.name)
        if field.name.endswith("error_code"):
            yield ErrorCode(value)
        else:
            yield from error_codes(value)
