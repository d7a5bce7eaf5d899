"""The server's handlers called one by one, without a socket: each is a module-level function
of (what it serves from, RequestContext, kio request) -> kio response, so a test imports it and
calls it with the real Services over a real LogManager (in tmp_path).

Also: every handler table row is typed against the kio classes of exactly the versions it is
registered for (tierlog.server.api.messages), and the version-dependent fields are read by
one function per API.
"""

from __future__ import annotations

import ast
import asyncio
import inspect
import uuid
from collections.abc import Awaitable, Callable, Iterator
from datetime import timedelta
from pathlib import Path
from typing import TypeVar

import pytest
from kio.index import load_request_schema
from kio.schema.api_versions.v3.request import ApiVersionsRequest
from kio.schema.create_topics.v7.request import CreatableTopic, CreateTopicsRequest
from kio.schema.delete_topics.v1.request import DeleteTopicsRequest as DeleteTopicsRequestV1
from kio.schema.delete_topics.v6.request import DeleteTopicsRequest as DeleteTopicsRequestV6
from kio.schema.delete_topics.v6.request import DeleteTopicState
from kio.schema.errors import ErrorCode
from kio.schema.fetch.v4.request import FetchPartition as FetchPartitionV4
from kio.schema.fetch.v4.request import FetchRequest as FetchRequestV4
from kio.schema.fetch.v4.request import FetchTopic as FetchTopicV4
from kio.schema.fetch.v12.request import FetchPartition, FetchRequest, FetchTopic
from kio.schema.find_coordinator.v1.request import FindCoordinatorRequest
from kio.schema.join_group.v0.request import JoinGroupRequest as JoinGroupRequestV0
from kio.schema.join_group.v0.request import JoinGroupRequestProtocol as JoinGroupProtocolV0
from kio.schema.list_offsets.v1.request import ListOffsetsPartition as ListOffsetsPartitionV1
from kio.schema.list_offsets.v1.request import ListOffsetsRequest as ListOffsetsRequestV1
from kio.schema.list_offsets.v1.request import ListOffsetsTopic as ListOffsetsTopicV1
from kio.schema.metadata.v0.request import MetadataRequest as MetadataRequestV0
from kio.schema.metadata.v12.request import MetadataRequest, MetadataRequestTopic
from kio.schema.produce.v9.request import PartitionProduceData, ProduceRequest, TopicProduceData
from kio.schema.types import BrokerId, GroupId, TopicName
from kio.serial import entity_reader
from kio.static.primitive import i8, i16, i32, i32Timedelta, i64

from tierlog import Record
from tierlog.manager.log_manager import LogManager
from tierlog.records import build_batch
from tierlog.server.api import (
    admin_configs,
    admin_topics,
    api_versions,
    fetch,
    find_coordinator,
    groups_api,
    list_offsets,
    metadata,
    produce,
    txn_api,
    txn_markers_api,
)
from tierlog.server.config import ServerConfig
from tierlog.server.context import request_context
from tierlog.server.coordinator.coordinator_locator import CoordinatorLocator
from tierlog.server.coordinator.group.offsets_topic import OffsetsTopic
from tierlog.server.coordinator.internal_log import InternalLog
from tierlog.server.coordinator.internal_topics import CONSUMER_OFFSETS, AdminChange, refusal
from tierlog.server.coordinator.txn.txn_state_topic import TxnStateTopic
from tierlog.server.framing import EncodedResponse, SplicedResponse
from tierlog.server.registry import Endpoint, Registry, register
from tierlog.server.server import SERVICE_APIS, install_handlers
from tierlog.server.services import Services

_T = TypeVar("_T")
MESSAGES = Path(inspect.getfile(api_versions)).with_name("messages.py")
ALL_TABLES = (*SERVICE_APIS, api_versions, find_coordinator, groups_api, txn_api,
              txn_markers_api)


@pytest.fixture
def services(tmp_path: Path) -> Iterator[Services]:
    """The Services the server builds, over a LogManager in tmp_path (no scheduler)."""
    data = tmp_path / "data"
    with LogManager.open(data, {}, start_scheduler=False) as manager:
        server_services = Services(ServerConfig(log_dirs=(data,)), manager)
        try:
            yield server_services
        finally:
            server_services.close()


def run(call: Callable[[], Awaitable[_T]]) -> _T:
    async def main() -> _T:
        return await call()
    return asyncio.run(main())


def create(services: Services, name: str, partitions: int = 1) -> CreateTopicsRequest:
    request = CreateTopicsRequest(topics=(CreatableTopic(
        name=TopicName(name), num_partitions=i32(partitions), replication_factor=i16(1),
        assignments=(), configs=()),), timeout=i32Timedelta.parse(timedelta(seconds=5)))
    response = run(lambda: admin_topics.create_topics(services, request_context(19, 7), request))
    assert [(t.name, t.error_code) for t in response.topics] == [(name, ErrorCode.none)]
    return request


def produce_request(topic: str, partition: int, *values: bytes, acks: int = 1) -> ProduceRequest:
    batch = build_batch([Record(key=None, value=v) for v in values])
    return ProduceRequest(acks=i16(acks), timeout=i32Timedelta.parse(timedelta(seconds=5)),
                          topic_data=(TopicProduceData(name=TopicName(topic), partition_data=(
                              PartitionProduceData(index=i32(partition), records=batch),)),))


def partition_errors(response: object) -> list[ErrorCode]:
    """The partition error codes of a Produce handler's self-encoded response."""
    assert isinstance(response, EncodedResponse)
    decoded, _ = entity_reader(response.response_type)(response.body, 0)
    return [p.error_code for t in decoded.responses for p in t.partition_responses]


# -- one by one --------------------------------------------------------------------------

def test_api_versions_lists_what_is_registered(services: Services) -> None:
    registry = Registry()
    api_versions.bind(registry)
    register(registry, services, metadata.ENDPOINTS)
    response = run(lambda: api_versions.api_versions(
        registry, request_context(18, 3), ApiVersionsRequest(
            client_software_name="test", client_software_version="1")))
    assert response.error_code == ErrorCode.none
    assert [(k.api_key, k.min_version, k.max_version) for k in response.api_keys] == [
        (3, metadata.MIN_VERSION, metadata.MAX_VERSION),
        (18, api_versions.MIN_VERSION, api_versions.MAX_VERSION)]


def test_create_produce_fetch_and_list_offsets(services: Services) -> None:
    create(services, "orders", 2)
    meta = run(lambda: metadata.metadata(services, request_context(3, 12), MetadataRequest(
        topics=(MetadataRequestTopic(topic_id=None, name=TopicName("orders")),),
        allow_auto_topic_creation=False, include_topic_authorized_operations=False)))
    assert [(t.name, t.error_code, len(t.partitions)) for t in meta.topics] == [
        ("orders", ErrorCode.none, 2)]

    produced = run(lambda: produce.produce(services, request_context(0, 9),
                                           produce_request("orders", 1, b"a", b"b")))
    assert isinstance(produced, EncodedResponse)
    assert services.manager.log("orders", 1).high_watermark == 2

    request = FetchRequest(max_wait=i32Timedelta.parse(timedelta(0)), min_bytes=i32(1),
                           topics=(FetchTopic(topic=TopicName("orders"), partitions=(
                               FetchPartition(partition=i32(1), fetch_offset=i64(0),
                                              partition_max_bytes=i32(1 << 20)),)),),
                           forgotten_topics_data=())
    fetched = run(lambda: fetch.fetch(services, request_context(1, 12), request))
    assert isinstance(fetched, SplicedResponse)
    (part,) = fetched.response.responses[0].partitions
    assert (part.error_code, part.high_watermark) == (ErrorCode.none, 2)
    values = [r.value for batch in fetched.slices[bytes(part.records)].batches()
              for r in batch.records()]
    assert values == [b"a", b"b"]

    listed = run(lambda: list_offsets.list_offsets(
        services, request_context(2, 1), ListOffsetsRequestV1(
            replica_id=BrokerId(-1), topics=(ListOffsetsTopicV1(
                name=TopicName("orders"), partitions=(
                    ListOffsetsPartitionV1(partition_index=i32(1), timestamp=i64(-1)),
                    ListOffsetsPartitionV1(partition_index=i32(7), timestamp=i64(-1)))),))))
    assert [(p.partition_index, p.error_code, p.offset)
            for p in listed.topics[0].partitions] == [
        (1, ErrorCode.none, 2), (7, ErrorCode.unknown_topic_or_partition, -1)]


def test_unknown_topics_and_bad_acks_are_answered_per_partition(services: Services) -> None:
    meta = run(lambda: metadata.metadata(services, request_context(3, 12), MetadataRequest(
        topics=(MetadataRequestTopic(topic_id=None, name=TopicName("nowhere")),),
        allow_auto_topic_creation=False, include_topic_authorized_operations=False)))
    assert [(t.name, t.error_code) for t in meta.topics] == [
        ("nowhere", ErrorCode.unknown_topic_or_partition)]
    assert services.manager.partitions("nowhere") == []

    ctx = request_context(0, 9)
    missing = run(lambda: produce.produce(services, ctx, produce_request("nowhere", 0, b"x")))
    bad_acks = run(lambda: produce.produce(services, ctx,
                                           produce_request("nowhere", 0, b"x", acks=2)))
    assert [partition_errors(missing), partition_errors(bad_acks)] == [
        [ErrorCode.unknown_topic_or_partition], [ErrorCode.invalid_required_acks]]
    assert services.manager.partitions("nowhere") == []
    # acks=0: no response at all
    assert run(lambda: produce.produce(services, ctx, produce_request("nowhere", 0, b"x",
                                                                      acks=0))) is None


def test_bad_admin_requests_are_refused_per_item(services: Services) -> None:
    """A replication factor one node cannot hold, deletion by topic id (v6, a null name)
    and of an internal topic, and topics deleted by name in v1's ``topic_names``."""
    create(services, "keep")
    created = run(lambda: admin_topics.create_topics(
        services, request_context(19, 7), CreateTopicsRequest(topics=(CreatableTopic(
            name=TopicName("wide"), num_partitions=i32(1), replication_factor=i16(3),
            assignments=(), configs=()),), timeout=i32Timedelta.parse(timedelta(seconds=5)))))
    assert created.topics[0].error_code == ErrorCode.invalid_replication_factor
    assert services.manager.partitions("wide") == []

    timeout = i32Timedelta.parse(timedelta(seconds=5))
    by_id = DeleteTopicsRequestV6(topics=(
        DeleteTopicState(name=None, topic_id=uuid.uuid4()),
        DeleteTopicState(name=TopicName(CONSUMER_OFFSETS), topic_id=None)), timeout=timeout)
    deleted = run(lambda: admin_topics.delete_topics(services, request_context(20, 6), by_id))
    refused = refusal(CONSUMER_OFFSETS, AdminChange.DELETE_TOPIC)
    assert refused is not None
    assert [r.error_code for r in deleted.responses] == [ErrorCode.unknown_topic_id, refused[0]]
    by_name = DeleteTopicsRequestV1(topic_names=(TopicName("keep"),), timeout=timeout)
    assert admin_topics.deleted_topic_names(by_name) == ["keep"]
    deleted = run(lambda: admin_topics.delete_topics(services, request_context(20, 1), by_name))
    assert [(r.name, r.error_code) for r in deleted.responses] == [("keep", ErrorCode.none)]
    assert services.manager.partitions("keep") == []


def test_version_dependent_fields_are_read_in_one_place(services: Services) -> None:
    """v0 of Metadata asks for every topic with an empty list and may not auto-create; v4 of
    Fetch has no session; v1 of ListOffsets no isolation level; v0 of JoinGroup no rebalance
    timeout; v1 of FindCoordinator one key."""
    create(services, "a")
    create(services, "b")
    assert metadata.requested_topics(MetadataRequestV0(topics=()), 0) == (None, False)
    all_topics = run(lambda: metadata.metadata(services, request_context(3, 0),
                                               MetadataRequestV0(topics=())))
    assert sorted(t.name for t in all_topics.topics) == ["a", "b"]

    v4 = FetchRequestV4(replica_id=BrokerId(-1), max_wait=i32Timedelta.parse(timedelta(0)),
                        min_bytes=i32(0), max_bytes=i32(1 << 20), isolation_level=i8(1),
                        topics=(FetchTopicV4(topic=TopicName("a"), partitions=(
                            FetchPartitionV4(partition=i32(0), fetch_offset=i64(0),
                                             partition_max_bytes=i32(100)),)),))
    args = fetch.fetch_args(v4)
    assert (args.isolation, args.session_id, args.session_epoch, list(args.wanted)) == (
        "read_committed", 0, -1, [(("a", 0), 0, 100)])
    answered = run(lambda: fetch.fetch(services, request_context(1, 4), v4))
    assert isinstance(answered, SplicedResponse)
    assert answered.response.responses[0].partitions[0].error_code == ErrorCode.none
    assert len(services.fetch_sessions) == 0  # a sessionless fetch opens none

    assert not list_offsets.reads_committed(ListOffsetsRequestV1(
        replica_id=BrokerId(-1), topics=()))
    join = JoinGroupRequestV0(group_id=GroupId("g"),
                              session_timeout=i32Timedelta.parse(timedelta(seconds=10)),
                              member_id="", protocol_type="consumer",
                              protocols=(JoinGroupProtocolV0(name="range", metadata=b""),))
    assert groups_api.join_timeouts(join) == (10_000, 10_000, None)

    locator = CoordinatorLocator(services, OffsetsTopic(services.manager, InternalLog(services)),
                                 TxnStateTopic(services.manager, InternalLog(services)), {})
    found = run(lambda: find_coordinator.find_coordinator(
        locator, request_context(10, 1), FindCoordinatorRequest(key="g", key_type=i8(0))))
    assert (found.error_code, found.node_id, found.port) == (
        ErrorCode.none, services.node_id, services.port)
    unknown_type = run(lambda: find_coordinator.find_coordinator(
        locator, request_context(10, 1), FindCoordinatorRequest(key="g", key_type=i8(7))))
    assert (unknown_type.error_code, unknown_type.node_id) == (ErrorCode.invalid_request, -1)


def test_describe_and_alter_configs_directly(services: Services) -> None:
    from kio.schema.describe_configs.v4.request import (
        DescribeConfigsRequest,
        DescribeConfigsResource,
    )
    create(services, "t")
    response = run(lambda: admin_configs.describe_configs(
        services, request_context(32, 4), DescribeConfigsRequest(resources=(
            DescribeConfigsResource(resource_type=i8(admin_configs.TOPIC),
                                    resource_name="t", configuration_keys=("retention.ms",)),
            DescribeConfigsResource(resource_type=i8(admin_configs.TOPIC),
                                    resource_name="missing", configuration_keys=None)),
            include_synonyms=False, include_documentation=False)))
    (found, missing) = response.results
    assert [(c.name, c.config_source) for c in found.configs] == [
        ("retention.ms", admin_configs.DEFAULT_CONFIG)]
    assert missing.error_code == ErrorCode.unknown_topic_or_partition


# -- the tables and their types ----------------------------------------------------------

def _aliases() -> dict[str, set[str]]:
    """Alias name -> the kio classes (module.Class) in messages.py's union."""
    tree = ast.parse(MESSAGES.read_text())
    out: dict[str, set[str]] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names = {ast.unparse(n) for n in ast.walk(node.value)
                     if isinstance(n, ast.Attribute) and not isinstance(n.ctx, ast.Store)
                     and ast.unparse(n).startswith("kio.schema.")
                     and ast.unparse(n).split(".")[-1][:1].isupper()}
            out[node.target.id] = names
    return out


def test_every_handler_takes_the_kio_classes_of_exactly_its_versions() -> None:
    aliases = _aliases()
    rows: list[Endpoint[object]] = [row for module in ALL_TABLES for row in module.ENDPOINTS]
    assert len(rows) == 32 and len({r.api_key for r in rows}) == 32
    for row in rows:
        annotation = inspect.signature(row.handler).parameters["request"].annotation
        served = {f"{cls.__module__.rsplit('.', 1)[0]}.{cls.__name__}"
                  for v in range(row.min_version, row.max_version + 1)
                  for cls in [load_request_schema(row.api_key, v)]}
        assert aliases[annotation] == served, (row.api_key, annotation)


def test_the_server_registers_every_table_as_it_stands(services: Services) -> None:
    """What the server registers (and ApiVersions advertises) is the union of the tables."""
    registry = Registry()
    api_versions.bind(registry)
    install_handlers(registry, services)
    assert {(r.api_key, r.min_version, r.max_version) for r in registry.registrations()} == {
        (row.api_key, row.min_version, row.max_version)
        for module in ALL_TABLES for row in module.ENDPOINTS}
