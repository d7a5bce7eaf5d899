"""Topic admin on replicating nodes (issue 24): three real ``tierlog serve`` processes sharing a
metadata store, driven by Kafka's clients (confluent-kafka's AdminClient, Producer and
Consumer) and by hand-made requests (kio) where a test must ask one particular node.

A deleted topic leaves every node's Metadata and log dirs, and one created again under its
name (a new id) carries only its own records; a grown topic's new partitions are led and
replicated; DeleteRecords is the leader's alone and the followers' log starts follow it; a
topic config altered on one node is described by another and takes effect on the leader.
"""

from __future__ import annotations

import asyncio
import datetime
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from confluent_kafka import KafkaError, KafkaException, Producer
from confluent_kafka.admin import AdminClient, NewPartitions
from kio.schema.delete_records.v2 import request as delete_records
from kio.schema.delete_records.v2.response import DeleteRecordsResponse
from kio.schema.describe_configs.v4.request import DescribeConfigsRequest, DescribeConfigsResource
from kio.schema.describe_configs.v4.response import DescribeConfigsResponse
from kio.schema.errors import ErrorCode
from kio.schema.incremental_alter_configs.v1 import request as alter_configs
from kio.schema.incremental_alter_configs.v1.response import IncrementalAlterConfigsResponse
from kio.schema.metadata.v12.request import MetadataRequest, MetadataRequestTopic
from kio.schema.metadata.v12.response import MetadataResponse, MetadataResponseTopic
from kio.schema.produce.v9.request import PartitionProduceData, ProduceRequest, TopicProduceData
from kio.schema.produce.v9.response import ProduceResponse
from kio.schema.types import TopicName
from kio.static.primitive import i8, i16, i32, i32Timedelta, i64
from support.cluster_procs import Cluster, consume_exactly, wait_until

from tierlog import Record
from tierlog.checkpoint.partition_metadata import PartitionMetadataFile, new_topic_id
from tierlog.cluster.keys import TopicRecord
from tierlog.manager.log_manager import LogManager
from tierlog.records import build_batch
from tierlog.server.replication.node import local_changes
from tierlog.server.replication.wire_client import BrokerConnection

TOPIC_RESOURCE = 2


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    root = tmp_path_factory.mktemp("cluster-topics")
    # Log start offsets checkpointed often: the test reads each replica's from its dir.
    with Cluster(root, 3, {"log.flush.start.offset.checkpoint.interval.ms": 200}) as running:
        wait_until(lambda: running.live_brokers() == [1, 2, 3], "three live nodes")
        yield running


def _ask(port: int, request: object, response_type: type) -> object:
    async def run() -> object:
        connection = BrokerConnection("127.0.0.1", port, client_id="test-cluster-topics")
        try:
            return await connection.send(request, response_type)
        finally:
            await connection.close()
    return asyncio.run(run())


def _metadata_topic(port: int, topic: str) -> MetadataResponseTopic:
    """What a node's Metadata answers about ``topic`` (never auto-creating it)."""
    answer = _ask(port, MetadataRequest(
        topics=(MetadataRequestTopic(topic_id=None, name=TopicName(topic)),),
        allow_auto_topic_creation=False, include_topic_authorized_operations=False),
        MetadataResponse)
    assert isinstance(answer, MetadataResponse)
    return answer.topics[0]


def _metadata_code(port: int, topic: str) -> ErrorCode:
    return _metadata_topic(port, topic).error_code


def _partition_count(port: int, topic: str) -> int:
    return len(_metadata_topic(port, topic).partitions)


def _wait_on_node(cluster: Cluster, n: int, check: Callable[[], object], what: str) -> None:
    """wait_until(check), failing with the end of node ``n``'s log (why it did not)."""
    try:
        wait_until(check, f"node {n}: {what}")
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n--- node {n}'s log ---\n"
                             f"{cluster.nodes[n].log_text()[-6000:]}") from None


def _partition_dirs(cluster: Cluster, node: int, topic: str) -> list[Path]:
    """The node's partition directories of ``topic`` (not those renamed for deletion)."""
    return sorted(p for p in cluster.data_dir(node).rglob(f"{topic}-*")
                  if p.is_dir() and p.name.rpartition("-")[2].isdigit())


def _produce(bootstrap: str, topic: str, values: list[bytes], partition: int = 0) -> None:
    """Produce ``values`` with acks=all; every one acknowledged."""
    errors: list[KafkaError] = []
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all",
                         "message.timeout.ms": 60_000})
    for value in values:
        producer.produce(topic, value, partition=partition,
                         on_delivery=lambda err, _: errors.append(err) if err else None)
    assert producer.flush(90) == 0
    assert not errors, errors


def _produce_code(port: int, topic: str, value: bytes) -> ErrorCode:
    batch = build_batch([Record(None, value, timestamp=int(time.time() * 1000))])
    answer = _ask(port, ProduceRequest(
        transactional_id=None, acks=i16(-1),
        timeout=i32Timedelta.parse(datetime.timedelta(seconds=30)),
        topic_data=(TopicProduceData(name=TopicName(topic), partition_data=(
            PartitionProduceData(index=i32(0), records=batch),)),)), ProduceResponse)
    assert isinstance(answer, ProduceResponse)
    return answer.responses[0].partition_responses[0].error_code


def _admin_error(future: object) -> int | None:
    try:
        future.result(30)  # type: ignore[attr-defined]
    except KafkaException as exc:
        return int(exc.args[0].code())
    return None


def test_a_deleted_topic_leaves_every_node_and_comes_back_new(cluster: Cluster) -> None:
    cluster.create_topic("doomed", partitions=2, replication_factor=3)
    _produce(cluster.bootstrap, "doomed", [b"old-%d" % i for i in range(5)])
    old_ids = {PartitionMetadataFile(d / "partition.metadata").read()
               for n in cluster.nodes for d in _partition_dirs(cluster, n, "doomed")}
    assert len(old_ids) == 1  # every replica records the topic's one id

    admin = cluster.admin()
    futures = admin.delete_topics(["doomed", "never-made", "__consumer_offsets"])
    assert _admin_error(futures["doomed"]) is None
    assert _admin_error(futures["never-made"]) == KafkaError.UNKNOWN_TOPIC_OR_PART
    assert _admin_error(futures["__consumer_offsets"]) is not None  # internal: refused
    for node in cluster.nodes.values():
        wait_until(lambda node=node: _metadata_code(node.port, "doomed")
                   == ErrorCode.unknown_topic_or_partition, "the topic gone from Metadata")
    for n in cluster.nodes:
        _wait_on_node(cluster, n, lambda n=n: not _partition_dirs(cluster, n, "doomed"),
                      "its logs of the topic deleted")

    cluster.create_topic("doomed", partitions=1, replication_factor=3)
    for n in cluster.nodes:  # the store names the replicas a poll before each creates its log
        _wait_on_node(cluster, n, lambda n=n: [
            d.name for d in _partition_dirs(cluster, n, "doomed")
            if (d / "partition.metadata").exists()] == ["doomed-0"], "its log of the new topic")
    new_ids = {PartitionMetadataFile(d / "partition.metadata").read()
               for n in cluster.nodes for d in _partition_dirs(cluster, n, "doomed")}
    assert len(new_ids) == 1 and new_ids != old_ids
    fresh = [b"new-%d" % i for i in range(5)]
    _produce(cluster.bootstrap, "doomed", fresh)
    assert consume_exactly(cluster.bootstrap, "doomed", 5) == fresh


def test_a_grown_topics_new_partitions_are_led_and_replicated(cluster: Cluster) -> None:
    cluster.create_topic("growing", partitions=1, replication_factor=3)
    admin = cluster.admin()
    checked = admin.create_partitions([NewPartitions("growing", 5)], validate_only=True)
    assert _admin_error(checked["growing"]) is None
    refused = admin.create_partitions([NewPartitions("growing", 1), NewPartitions("nope", 2)])
    assert _admin_error(refused["growing"]) == KafkaError.INVALID_PARTITIONS
    assert _admin_error(refused["nope"]) == KafkaError.UNKNOWN_TOPIC_OR_PART
    assert _admin_error(admin.create_partitions([NewPartitions("growing", 3)])["growing"]) \
        is None
    for p in (1, 2):
        wait_until(lambda p=p: len(cluster.isr("growing", p)) == 3, f"growing-{p} in sync")
    assert cluster.partition_state("growing", 3) is None  # validate_only grew nothing
    explicit = admin.create_partitions([NewPartitions("growing", 4,
                                                      replica_assignment=[[2, 3, 1]])])
    assert _admin_error(explicit["growing"]) is None
    # Any node may answer, each from its own last poll: wait for one that saw the change.
    state = wait_until(lambda: cluster.partition_state("growing", 3), "growing-3 listed")
    assert state[1] == [2, 3, 1]

    for node in cluster.nodes.values():  # a client told of 3 partitions would refuse the 4th
        wait_until(lambda node=node: _partition_count(node.port, "growing") == 4,
                   "every node listing the 4 partitions")
    cluster.leader("growing", 2)
    _produce(cluster.bootstrap, "growing", [b"a", b"b"], partition=2)
    assert consume_exactly(cluster.bootstrap, "growing", 2, partition=2) == [b"a", b"b"]
    for n in cluster.nodes:
        assert [d.name for d in _partition_dirs(cluster, n, "growing")] == [
            f"growing-{p}" for p in range(4)]


def _delete_records(port: int, topic: str, offset: int) -> tuple[ErrorCode, int]:
    answer = _ask(port, delete_records.DeleteRecordsRequest(
        topics=(delete_records.DeleteRecordsTopic(name=TopicName(topic), partitions=(
            delete_records.DeleteRecordsPartition(partition_index=i32(0),
                                                  offset=i64(offset)),)),),
        timeout=i32Timedelta.parse(datetime.timedelta(seconds=30))), DeleteRecordsResponse)
    assert isinstance(answer, DeleteRecordsResponse)
    part = answer.topics[0].partitions[0]
    return part.error_code, int(part.low_watermark)


def _checkpointed_start(cluster: Cluster, node: int, topic: str) -> int | None:
    """The log start offset of ``topic``-0 in the node's checkpoint file."""
    for path in cluster.data_dir(node).rglob("log-start-offset-checkpoint"):
        for line in path.read_text().splitlines()[2:]:
            name, partition, offset = line.split()
            if (name, partition) == (topic, "0"):
                return int(offset)
    return None


def test_delete_records_is_the_leaders_and_the_followers_follow(cluster: Cluster) -> None:
    cluster.create_topic("trim", partitions=1, replication_factor=3)
    _produce(cluster.bootstrap, "trim", [b"r%d" % i for i in range(10)])
    leader = cluster.leader("trim")
    follower = next(n for n in cluster.nodes if n != leader)
    assert _delete_records(cluster.nodes[follower].port, "trim", 4) == (
        ErrorCode.not_leader_or_follower, -1)
    assert _delete_records(cluster.nodes[leader].port, "trim", 4) == (ErrorCode.none, 4)
    for n in cluster.nodes:
        _wait_on_node(cluster, n, lambda n=n: _checkpointed_start(cluster, n, "trim") == 4,
                      "its log start at 4")
    assert consume_exactly(cluster.bootstrap, "trim", 6) == [b"r%d" % i for i in range(4, 10)]


def _describe(port: int, topic: str, key: str) -> tuple[str | None, int] | None:
    answer = _ask(port, DescribeConfigsRequest(resources=(DescribeConfigsResource(
        resource_type=i8(TOPIC_RESOURCE), resource_name=topic, configuration_keys=(key,)),)),
        DescribeConfigsResponse)
    assert isinstance(answer, DescribeConfigsResponse)
    result = answer.results[0]
    assert result.error_code == ErrorCode.none, result.error_message
    return next(((c.value, int(c.config_source)) for c in result.configs), None)


def _alter(port: int, topic: str, key: str, value: str) -> ErrorCode:
    answer = _ask(port, alter_configs.IncrementalAlterConfigsRequest(
        resources=(alter_configs.AlterConfigsResource(
            resource_type=i8(TOPIC_RESOURCE), resource_name=topic,
            configs=(alter_configs.AlterableConfig(name=key, config_operation=i8(0),
                                                   value=value),)),),
        validate_only=False), IncrementalAlterConfigsResponse)
    assert isinstance(answer, IncrementalAlterConfigsResponse)
    return answer.responses[0].error_code


def test_a_topic_config_altered_on_one_node_holds_on_every_node(cluster: Cluster) -> None:
    cluster.create_topic("tuned", partitions=1, replication_factor=3)
    leader = cluster.leader("tuned")
    asked, other = (n for n in cluster.nodes if n != leader)
    ports = {n: node.port for n, node in cluster.nodes.items()}
    assert _produce_code(ports[leader], "tuned", b"x" * 5000) == ErrorCode.none
    assert _alter(ports[asked], "tuned", "max.message.bytes", "2000") == ErrorCode.none
    assert _describe(ports[asked], "tuned", "max.message.bytes") == ("2000", 1)  # dynamic topic
    wait_until(lambda: _describe(ports[other], "tuned", "max.message.bytes") == ("2000", 1),
               "the other node describing the new value")
    wait_until(lambda: _produce_code(ports[leader], "tuned", b"x" * 5000)
               == ErrorCode.message_too_large, "the leader applying the new limit")
    # The leader (its log reopened with the new config) still replicates acks=all writes.
    assert _produce_code(ports[leader], "tuned", b"small") == ErrorCode.none
    assert _alter(ports[asked], "tuned", "no.such.config", "1") == ErrorCode.invalid_config
    assert _alter(ports[asked], "tuned", "min.insync.replicas", "0") == ErrorCode.invalid_config
    assert _describe(ports[other], "tuned", "max.message.bytes") == ("2000", 1)
    admin = AdminClient({"bootstrap.servers": cluster.nodes[other].bootstrap})
    assert admin.list_topics(timeout=10).topics["tuned"].error is None


def test_a_poll_deletes_logs_only_on_a_tombstone_or_an_earlier_id(tmp_path: Path) -> None:
    """What a node's poll decides for its local logs (no server: a LogManager and records)."""
    ids = {name: new_topic_id() for name in ("same", "old", "foreign", "gone", "tuned",
                                             "unlisted", "new")}
    with LogManager.open([tmp_path], start_scheduler=False) as manager:
        for name in ("same", "old", "foreign", "gone", "tuned", "unlisted"):
            manager.create_topic(name, 1, topic_id=ids[name])
        records = {
            # Created again while this node was away: its logs carry the earlier id.
            "old": TopicRecord(ids["new"], ((1,),), previous_ids=(ids["old"],)),
            # An id the store never named for the topic: kept (warned).
            "foreign": TopicRecord(new_topic_id(), ((1,),)),
            "gone": TopicRecord(ids["gone"], ((1,),), deleted=True),
            "tuned": TopicRecord(ids["tuned"], ((1,),), {"retention.ms": "1000"}),
            # Overrides this node cannot parse: to apply (which fails and says why).
            "same": TopicRecord(ids["same"], ((1,),), {"retention.ms": "soon"}),
            # "unlisted": a LIST that missed its record deletes nothing.
        }
        changes = local_changes(manager, records, {})
        assert sorted(changes.doomed) == ["gone", "old"]
        assert changes.foreign == ["foreign"]
        assert changes.reconfigured == {"tuned": {"retention.ms": "1000"},
                                        "same": {"retention.ms": "soon"}}
        # A record already applied is not compared with the disk again.
        assert local_changes(manager, records, records).reconfigured == {}
