"""Consumer-group and transaction coordinators that move with the leadership of their
internal topics' partitions, between real ``tierlog serve`` nodes (issue 24), driven by
confluent-kafka: committed offsets and transactional ids survive their coordinator's SIGKILL,
a transaction spanning partitions led by different nodes is atomic to read_committed
readers (its markers go to other leaders as WriteTxnMarkers), and offsets sent with a
transaction count only once it commits."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from support.cluster_procs import Cluster, wait_until

from tierlog.server.coordinator.coordinator_wire import partition_for
from tierlog.server.coordinator.internal_topics import CONSUMER_OFFSETS, TRANSACTION_STATE

#: Few internal partitions: the test cluster creates, replicates and loads them in seconds.
INTERNAL_PARTITIONS = 3
CONFIG = {"offsets.topic.num.partitions": INTERNAL_PARTITIONS,
          "transaction.state.log.num.partitions": INTERNAL_PARTITIONS,
          "group.initial.rebalance.delay.ms": 0}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    with Cluster(tmp_path_factory.mktemp("coordinators"), config=CONFIG) as started:
        wait_until(lambda: len(started.live_brokers()) == 3, "three live nodes")
        yield started


def _revive(cluster: Cluster) -> None:
    """Restart every dead node and wait until all three are live again."""
    for node in cluster.nodes.values():
        if not node.alive():
            node.restart()
    wait_until(lambda: len(cluster.live_brokers()) == 3, "three live nodes")


def _consumer(cluster: Cluster, group: str, **extra: object) -> Consumer:
    return Consumer({"bootstrap.servers": cluster.live_bootstrap(), "group.id": group,
                     "auto.offset.reset": "earliest", "enable.auto.commit": False,
                     "session.timeout.ms": 6000, **extra})


def _read_all(consumer: Consumer, topic: str, partitions: int, expected: int,
              timeout_s: float = 60.0) -> list[bytes]:
    """Every value of ``topic`` the consumer reads until ``expected`` are in (bounded)."""
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    values: list[bytes] = []

    def enough() -> bool | None:
        for message in consumer.consume(100, timeout=0.5):
            if message.error() is None:
                values.append(message.value())
        return True if len(values) >= expected else None

    wait_until(enough, f"{expected} records of {topic}", timeout_s)
    return values


def _coordinator_of(cluster: Cluster, internal: str, key: str) -> int:
    return cluster.leader(internal, partition_for(key, INTERNAL_PARTITIONS))


def test_committed_offsets_survive_their_coordinators_kill(cluster: Cluster) -> None:
    topic, group = f"events-{uuid.uuid4().hex[:6]}", "g-offsets"
    cluster.create_topic(topic, partitions=2)
    producer = Producer({"bootstrap.servers": cluster.live_bootstrap(), "acks": "all"})
    for i in range(20):
        producer.produce(topic, value=b"v%d" % i, partition=i % 2)
    assert producer.flush(30) == 0
    consumer = _consumer(cluster, group)
    consumer.subscribe([topic])
    read = 0

    def some() -> bool | None:
        nonlocal read
        read += sum(1 for m in consumer.consume(20, timeout=0.5) if m.error() is None)
        return True if read >= 5 else None

    wait_until(some, "a few records read by the group")
    committed = consumer.commit(asynchronous=False)
    assert committed is not None
    wanted = {(tp.topic, tp.partition): tp.offset for tp in committed}
    consumer.close()
    coordinator = _coordinator_of(cluster, CONSUMER_OFFSETS, group)
    cluster.nodes[coordinator].kill()
    try:
        wait_until(lambda: _coordinator_of(cluster, CONSUMER_OFFSETS, group) != coordinator,
                   "a new coordinator of the group")
        again = _consumer(cluster, group)
        found = again.committed([TopicPartition(t, p) for t, p in wanted], timeout=30)
        again.close()
        assert {(tp.topic, tp.partition): tp.offset for tp in found} == wanted
    finally:
        _revive(cluster)


def test_transactions_span_leaders_and_survive_their_coordinators_kill(
        cluster: Cluster) -> None:
    topic, txn_id = f"tx-{uuid.uuid4().hex[:6]}", "txn-across-nodes"
    cluster.create_topic(topic, partitions=3)

    def producer() -> Producer:
        made = Producer({"bootstrap.servers": cluster.live_bootstrap(),
                         "transactional.id": txn_id, "transaction.timeout.ms": 20000})
        made.init_transactions(30)
        return made

    first = producer()  # its FindCoordinator created __transaction_state
    leaders = {cluster.leader(topic, p) for p in range(3)}
    coordinator = _coordinator_of(cluster, TRANSACTION_STATE, txn_id)
    # The markers of a transaction over these partitions go to other nodes' leaders.
    assert leaders - {coordinator}
    for outcome in ("commit", "abort", "commit"):
        first.begin_transaction()
        for p in range(3):
            first.produce(topic, value=f"{outcome}-{p}".encode(), partition=p)
        if outcome == "commit":
            first.commit_transaction(30)
        else:
            first.abort_transaction(30)
    cluster.nodes[coordinator].kill()
    try:
        wait_until(lambda: _coordinator_of(cluster, TRANSACTION_STATE, txn_id) != coordinator,
                   "a new transaction coordinator")
        second = producer()  # the new coordinator knows the id: the first producer is fenced
        second.begin_transaction()
        for p in range(3):
            second.produce(topic, value=f"after-{p}".encode(), partition=p)
        second.commit_transaction(30)
        with pytest.raises(KafkaException):
            first.begin_transaction()
            first.produce(topic, value=b"zombie", partition=0)
            first.commit_transaction(10)
        reader = _consumer(cluster, "reader", **{"isolation.level": "read_committed"})
        values = _read_all(reader, topic, 3, expected=9)
        reader.close()
        assert sorted(values) == sorted(
            [f"commit-{p}".encode() for p in range(3)] * 2
            + [f"after-{p}".encode() for p in range(3)])
    finally:
        _revive(cluster)


def test_offsets_sent_with_a_transaction_count_once_it_commits(cluster: Cluster) -> None:
    source, sink = f"in-{uuid.uuid4().hex[:6]}", f"out-{uuid.uuid4().hex[:6]}"
    cluster.create_topic(source)
    cluster.create_topic(sink)
    plain = Producer({"bootstrap.servers": cluster.live_bootstrap(), "acks": "all"})
    for i in range(6):
        plain.produce(source, value=b"in-%d" % i, partition=0)
    assert plain.flush(30) == 0
    group = "g-transform"
    consumer = _consumer(cluster, group, **{"isolation.level": "read_committed"})
    consumer.subscribe([source])
    producer = Producer({"bootstrap.servers": cluster.live_bootstrap(),
                         "transactional.id": "transformer"})
    producer.init_transactions(30)
    got: list[object] = []

    def some() -> bool | None:
        got.extend(m for m in consumer.consume(10, timeout=0.5) if m.error() is None)
        return True if len(got) >= 6 else None

    wait_until(some, "the source read")
    for outcome in ("abort", "commit"):
        producer.begin_transaction()
        producer.produce(sink, value=outcome.encode(), partition=0)
        producer.send_offsets_to_transaction(
            [TopicPartition(source, 0, 3 if outcome == "abort" else 6)],
            consumer.consumer_group_metadata(), 30)
        if outcome == "abort":
            producer.abort_transaction(30)
            found = consumer.committed([TopicPartition(source, 0)], timeout=30)
            assert found[0].offset < 0  # the aborted transaction's offsets never counted
        else:
            producer.commit_transaction(30)
    found = consumer.committed([TopicPartition(source, 0)], timeout=30)
    consumer.close()
    assert found[0].offset == 6
