"""Replication between real ``tierlog serve`` processes (issue 24): three nodes sharing one
metadata store, a topic replicated on all of them, and what Kafka's clients see when a leader
dies, a follower stalls or a request names the wrong leader or epoch.

The clients are librdkafka (confluent-kafka) for the produce/consume paths, and hand-made
Fetch/Produce/OffsetForLeaderEpoch requests (kio) where a test needs the exact error code a
node answers.
"""

from __future__ import annotations

import asyncio
import datetime
import time
from pathlib import Path

import pytest
from confluent_kafka import KafkaError, Producer
from confluent_kafka.admin import AdminClient
from kio.schema.errors import ErrorCode
from kio.schema.fetch.v12.response import FetchResponse
from kio.schema.find_coordinator.v3.request import FindCoordinatorRequest
from kio.schema.find_coordinator.v3.response import FindCoordinatorResponse
from kio.schema.init_producer_id.v2.request import InitProducerIdRequest
from kio.schema.init_producer_id.v2.response import InitProducerIdResponse
from kio.schema.offset_for_leader_epoch.v4 import request as epoch_request
from kio.schema.offset_for_leader_epoch.v4.response import OffsetForLeaderEpochResponse
from kio.schema.produce.v9.request import PartitionProduceData, ProduceRequest, TopicProduceData
from kio.schema.produce.v9.response import ProduceResponse
from kio.schema.types import BrokerId, TopicName
from kio.static.primitive import i8, i16, i32, i32Timedelta
from support.cluster_procs import FAST_CLUSTER, Cluster, consume_exactly, wait_until
from support.jepsen_checks import check_replicas_identical, replica_batches
from support.replication_wire import fetch
from support.secure_server import SecureServer

from tierlog import Record
from tierlog.records import build_batch
from tierlog.server.replication.wire_client import BrokerConnection


def _ask(port: int, request: object, response_type: type) -> object:
    async def run() -> object:
        connection = BrokerConnection("127.0.0.1", port, client_id="test")
        try:
            return await connection.send(request, response_type)
        finally:
            await connection.close()
    return asyncio.run(run())


def _produce_request(topic: str, values: list[bytes], acks: int,
                     timeout_ms: int = 30_000) -> ProduceRequest:
    batch = build_batch([Record(None, v, timestamp=int(time.time() * 1000)) for v in values])
    return ProduceRequest(transactional_id=None, acks=i16(acks),
                          timeout=i32Timedelta.parse(datetime.timedelta(milliseconds=timeout_ms)),
                          topic_data=(TopicProduceData(name=TopicName(topic), partition_data=(
                              PartitionProduceData(index=i32(0), records=batch),)),))


def _produce_code(port: int, topic: str, acks: int, timeout_ms: int = 30_000) -> ErrorCode:
    answer = _ask(port, _produce_request(topic, [b"x"], acks, timeout_ms), ProduceResponse)
    assert isinstance(answer, ProduceResponse)
    return answer.responses[0].partition_responses[0].error_code


def _produce_all(bootstrap: str, topic: str, values: list[bytes]) -> list[bytes]:
    """Produce ``values`` with an idempotent acks=all producer; the values acknowledged."""
    acked: list[bytes] = []
    errors: list[KafkaError] = []

    def delivered(err: KafkaError | None, msg: object) -> None:
        if err is None:
            acked.append(msg.value())  # type: ignore[attr-defined]
        else:
            errors.append(err)

    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True,
                         "acks": "all", "message.timeout.ms": 60_000, "linger.ms": 5})
    for value in values:
        producer.produce(topic, value, partition=0, on_delivery=delivered)
    assert producer.flush(90) == 0
    assert not errors, errors
    return acked


@pytest.fixture
def cluster(tmp_path):  # type: ignore[no-untyped-def]
    with Cluster(tmp_path, 3) as running:
        yield running


def test_a_replicated_topic_survives_its_leaders_kill(cluster: Cluster) -> None:
    wait_until(lambda: cluster.live_brokers() == [1, 2, 3], "three live nodes")
    cluster.create_topic("orders", replication_factor=3)
    first = [b"v%d" % i for i in range(100)]
    assert sorted(_produce_all(cluster.bootstrap, "orders", first)) == sorted(first)
    old_leader = cluster.leader("orders")

    cluster.nodes[old_leader].kill()
    second = [b"v%d" % i for i in range(100, 200)]
    assert sorted(_produce_all(cluster.bootstrap, "orders", second)) == sorted(second)
    new_leader = cluster.leader("orders")
    assert new_leader != old_leader
    survivors = sorted(set(cluster.nodes) - {old_leader})
    wait_until(lambda: cluster.live_brokers() == survivors, "the dead node left the metadata")
    _, replicas, isr = cluster.partition_state("orders") or (0, [], [])
    assert sorted(isr) == survivors and sorted(replicas) == [1, 2, 3]

    # Every acknowledged record exactly once, in order.
    assert consume_exactly(cluster.bootstrap, "orders", 200) == first + second

    # The survivors hold the same batches, byte for byte.
    for node in survivors:
        cluster.nodes[node].terminate()
    batches = {node: replica_batches(cluster.data_dir(node), "orders", 0)
               for node in survivors}
    assert check_replicas_identical(batches, 200, partition="orders-0") == []


def test_a_killed_node_comes_back_as_an_in_sync_follower(cluster: Cluster) -> None:
    cluster.create_topic("events", replication_factor=3)
    follower = next(n for n in (1, 2, 3) if n != cluster.leader("events"))
    cluster.nodes[follower].kill()
    wait_until(lambda: follower not in cluster.isr("events") and cluster.isr("events"),
               "the dead follower out of the in-sync set")
    values = [b"e%d" % i for i in range(50)]
    _produce_all(cluster.bootstrap, "events", values)
    cluster.nodes[follower].start()
    wait_until(lambda: follower in cluster.isr("events"), "the restarted follower back in sync")
    cluster.stop()
    assert len(replica_batches(cluster.data_dir(follower), "events", 0)) >= 1
    batches = {n: replica_batches(cluster.data_dir(n), "events", 0) for n in (1, 2, 3)}
    assert check_replicas_identical(batches, 50, partition="events-0") == []


def test_only_the_leader_answers_and_only_at_its_epoch(cluster: Cluster) -> None:
    cluster.create_topic("t", replication_factor=3)
    leader = cluster.leader("t")
    follower = next(n for n in (1, 2, 3) if n != leader)
    leader_port, follower_port = cluster.nodes[leader].port, cluster.nodes[follower].port

    assert _produce_code(follower_port, "t", acks=1) == ErrorCode.not_leader_or_follower
    answer = _ask(follower_port, fetch("t", 0), FetchResponse)
    assert isinstance(answer, FetchResponse)
    assert answer.responses[0].partitions[0].error_code == ErrorCode.not_leader_or_follower

    def epoch_answer(port: int, current: int) -> ErrorCode:
        request = epoch_request.OffsetForLeaderEpochRequest(
            replica_id=BrokerId(-1), topics=(epoch_request.OffsetForLeaderTopic(
                topic=TopicName("t"), partitions=(epoch_request.OffsetForLeaderPartition(
                    partition=i32(0), current_leader_epoch=i32(current),
                    leader_epoch=i32(0)),)),))
        found = _ask(port, request, OffsetForLeaderEpochResponse)
        assert isinstance(found, OffsetForLeaderEpochResponse)
        return found.topics[0].partitions[0].error_code

    # The first leader's epoch is 0: a client naming an older one is fenced, a newer one is
    # not known yet, and a follower is never asked. (The store names the leader a poll before
    # the leader itself takes the role up: until then it answers NOT_LEADER_OR_FOLLOWER.)
    wait_until(lambda: epoch_answer(leader_port, 0) == ErrorCode.none,
               "the leader answering as leader")
    assert epoch_answer(leader_port, 5) == ErrorCode.unknown_leader_epoch
    assert epoch_answer(follower_port, 0) == ErrorCode.not_leader_or_follower
    # Every node hands out producer ids no other node holds (a shared id would make one
    # producer's records another's duplicates, dropped as such).
    ids = []
    for node in cluster.nodes.values():
        found = _ask(node.port, InitProducerIdRequest(
            transactional_id=None, transaction_timeout=i32Timedelta.parse(
                datetime.timedelta(seconds=60))), InitProducerIdResponse)
        assert isinstance(found, InitProducerIdResponse)
        assert found.error_code == ErrorCode.none
        ids.append(int(found.producer_id))
    assert len(set(ids)) == 3, ids
    # Every node names the same coordinator for a group: the leader of its partition of
    # __consumer_offsets (created by the first FindCoordinator; until a node has read the new
    # topic's partitions it answers COORDINATOR_NOT_AVAILABLE, which clients retry).
    coordinators = set()
    for node in cluster.nodes.values():
        def found(port: int = node.port) -> tuple[int, int] | None:
            answer = _ask(port, FindCoordinatorRequest(key="g", key_type=i8(0)),
                          FindCoordinatorResponse)
            assert isinstance(answer, FindCoordinatorResponse)
            assert answer.error_code in (ErrorCode.none, ErrorCode.coordinator_not_available)
            return ((int(answer.node_id), int(answer.port))
                    if answer.error_code == ErrorCode.none else None)
        coordinators.add(wait_until(found, f"node {node.port}'s answer for group g"))
    assert len(coordinators) == 1
    (coordinator, port), = coordinators
    assert cluster.nodes[coordinator].port == port
    # A replica that is not one of the partition's followers may not fetch as one.
    answer = _ask(leader_port, fetch("t", 0, replica_id=99), FetchResponse)
    assert isinstance(answer, FetchResponse)
    assert answer.responses[0].partitions[0].error_code == ErrorCode.not_leader_or_follower


def test_consumers_never_read_past_the_high_watermark(cluster: Cluster) -> None:
    """A stalled in-sync follower holds the high watermark: an acks=1 write reaches the
    leader's log but no consumer until the follower has it."""
    cluster.create_topic("hw", replication_factor=3)
    leader = cluster.leader("hw")
    stalled = next(n for n in (1, 2, 3) if n != leader)
    port = cluster.nodes[leader].port
    cluster.nodes[stalled].proc.send_signal(19)  # SIGSTOP
    try:
        assert _produce_code(port, "hw", acks=1) == ErrorCode.none
        answer = _ask(port, fetch("hw", 0), FetchResponse)
        assert isinstance(answer, FetchResponse)
        part = answer.responses[0].partitions[0]
        assert part.high_watermark == 0 and not part.records
    finally:
        cluster.nodes[stalled].proc.send_signal(18)  # SIGCONT

    def visible() -> bool:
        found = _ask(port, fetch("hw", 0), FetchResponse)
        assert isinstance(found, FetchResponse)
        return found.responses[0].partitions[0].high_watermark == 1
    wait_until(visible, "the high watermark past the write once the follower has it")


def test_acks_all_needs_min_insync_replicas(tmp_path) -> None:  # type: ignore[no-untyped-def]
    with Cluster(tmp_path, 2) as cluster:
        cluster.create_topic("strict", replication_factor=2,
                             config={"min.insync.replicas": "2"})
        leader = cluster.leader("strict")
        follower = next(n for n in (1, 2) if n != leader)
        port = cluster.nodes[leader].port
        assert _produce_code(port, "strict", acks=-1) == ErrorCode.none
        cluster.nodes[follower].kill()
        # Until the follower leaves the in-sync set, acks=all waits for it and times out.
        assert _produce_code(port, "strict", acks=-1, timeout_ms=300) \
            == ErrorCode.request_timed_out
        wait_until(lambda: cluster.isr("strict") == [leader],
                   "the dead follower out of the in-sync set")
        assert _produce_code(port, "strict", acks=-1) == ErrorCode.not_enough_replicas
        assert _produce_code(port, "strict", acks=1) == ErrorCode.none


def test_metadata_answers_each_listeners_own_addresses(tmp_path: Path) -> None:
    """Nodes with a client listener beside the inter-broker one: Metadata through the client
    listener lists every node at its client address (Kafka's rule), not where the nodes reach
    each other."""
    config = {**FAST_CLUSTER, "cluster.metadata.url": str(tmp_path / "store"),
              "listeners": "PLAINTEXT://127.0.0.1:0,CLIENT://127.0.0.1:0",
              "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CLIENT:PLAINTEXT",
              "inter.broker.listener.name": "PLAINTEXT"}
    nodes = [SecureServer(tmp_path / f"node-{n}", {**config, "node.id": n}).start()
             for n in (1, 2)]
    try:
        clients = {n: int(node.bound["CLIENT"]["port"]) for n, node in zip((1, 2), nodes,
                                                                            strict=True)}
        admin = AdminClient({"bootstrap.servers": nodes[0].bootstrap("CLIENT")})

        def listed() -> dict[int, int] | None:
            found = {b.id: b.port for b in admin.list_topics(timeout=5).brokers.values()}
            return found if len(found) == 2 else None
        assert wait_until(listed, "both nodes listed") == clients
    finally:
        for node in nodes:
            node.stop()
