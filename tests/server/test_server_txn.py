"""Transactions and idempotent producers against a real ``tierlog serve`` subprocess:
confluent-kafka (librdkafka) commits and aborts, read_committed and read_uncommitted
consumers, consume-transform-produce with send_offsets_to_transaction, a transaction left
open by a SIGKILL, and producer ids never reused across restarts."""

from __future__ import annotations

import time

import pytest

ck = pytest.importorskip("confluent_kafka")

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from support.server_process import ServerProcess

SERVER_CONFIG = {"group.initial.rebalance.delay.ms": 0, "offsets.topic.num.partitions": 5,
                 "transaction.state.log.num.partitions": 5}
SERVER_PER_TEST = True  # each test restarts its server or reads its data
DEADLINE_S = 30.0


def create(bootstrap: str, topic: str, partitions: int = 1) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(topic, partitions, 1)]).values():
        future.result(DEADLINE_S)


def read_all(bootstrap: str, topic: str, isolation: str, expected: int) -> list[bytes]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"reader-{isolation}",
                         "auto.offset.reset": "earliest", "enable.auto.commit": False,
                         "isolation.level": isolation, "enable.partition.eof": True})
    consumer.assign([TopicPartition(topic, 0, 0)])
    out: list[bytes] = []
    deadline = time.monotonic() + DEADLINE_S
    try:
        while time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is None:
                continue
            if message.error():
                if message.error().code() == ck.KafkaError._PARTITION_EOF:
                    if len(out) >= expected:
                        break
                    continue
                raise AssertionError(message.error())
            out.append(message.value())
    finally:
        consumer.close()
    return out


def txn_producer(bootstrap: str, tid: str) -> Producer:
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": tid})
    producer.init_transactions(DEADLINE_S)
    return producer


def test_committed_and_aborted_transactions(server: ServerProcess) -> None:
    create(server.bootstrap, "tx")
    producer = txn_producer(server.bootstrap, "writer")
    producer.begin_transaction()
    producer.produce("tx", b"c1")
    producer.produce("tx", b"c2")
    producer.commit_transaction(DEADLINE_S)
    producer.begin_transaction()
    producer.produce("tx", b"aborted")
    producer.flush(DEADLINE_S)  # written, then aborted
    producer.abort_transaction(DEADLINE_S)
    producer.begin_transaction()
    producer.produce("tx", b"c3")
    producer.commit_transaction(DEADLINE_S)
    assert read_all(server.bootstrap, "tx", "read_committed", 3) == [b"c1", b"c2", b"c3"]
    assert read_all(server.bootstrap, "tx", "read_uncommitted", 4) == [
        b"c1", b"c2", b"aborted", b"c3"]


def test_consume_transform_produce(server: ServerProcess) -> None:
    create(server.bootstrap, "src")
    create(server.bootstrap, "dst")
    plain = Producer({"bootstrap.servers": server.bootstrap})
    for i in range(4):
        plain.produce("src", f"{i}".encode())
    plain.flush(DEADLINE_S)
    consumer = Consumer({"bootstrap.servers": server.bootstrap, "group.id": "ctp",
                         "auto.offset.reset": "earliest", "enable.auto.commit": False,
                         "isolation.level": "read_committed"})
    consumer.subscribe(["src"])
    producer = txn_producer(server.bootstrap, "ctp-writer")
    seen: list[bytes] = []
    deadline = time.monotonic() + DEADLINE_S
    while len(seen) < 4 and time.monotonic() < deadline:
        message = consumer.poll(0.5)
        if message is not None and not message.error():
            seen.append(message.value())
    assert len(seen) == 4
    producer.begin_transaction()
    for value in seen:
        producer.produce("dst", value * 2)
    producer.send_offsets_to_transaction([TopicPartition("src", 0, 4)],
                                         consumer.consumer_group_metadata(), DEADLINE_S)
    producer.commit_transaction(DEADLINE_S)
    assert consumer.committed([TopicPartition("src", 0)], DEADLINE_S)[0].offset == 4
    # An aborted transaction's offsets do not count.
    producer.begin_transaction()
    producer.send_offsets_to_transaction([TopicPartition("src", 0, 1)],
                                         consumer.consumer_group_metadata(), DEADLINE_S)
    producer.abort_transaction(DEADLINE_S)
    assert consumer.committed([TopicPartition("src", 0)], DEADLINE_S)[0].offset == 4
    consumer.close()
    assert read_all(server.bootstrap, "dst", "read_committed", 4) == [
        b"00", b"11", b"22", b"33"]


def test_open_transaction_of_a_killed_server_is_aborted(server: ServerProcess) -> None:
    create(server.bootstrap, "crash")
    producer = txn_producer(server.bootstrap, "crasher")
    producer.begin_transaction()
    producer.produce("crash", b"lost")
    producer.flush(DEADLINE_S)
    server.restart(hard=True)
    # The next producer of the transactional id fences the old one and aborts its work.
    again = txn_producer(server.bootstrap, "crasher")
    again.begin_transaction()
    again.produce("crash", b"kept")
    again.commit_transaction(DEADLINE_S)
    assert read_all(server.bootstrap, "crash", "read_committed", 1) == [b"kept"]


def test_idempotent_producer_ids_are_never_reused(server: ServerProcess) -> None:
    create(server.bootstrap, "idem")
    kafka = pytest.importorskip("kafka")
    ids = []
    for hard in (True, False):
        producer = kafka.KafkaProducer(bootstrap_servers=server.bootstrap,
                                       enable_idempotence=True, acks="all")
        producer.send("idem", b"x").get(DEADLINE_S)
        ids.append(producer._transaction_manager.producer_id_and_epoch.producer_id)
        producer.close()
        server.restart(hard=hard)
    producer = kafka.KafkaProducer(bootstrap_servers=server.bootstrap,
                                   enable_idempotence=True)
    producer.send("idem", b"y").get(DEADLINE_S)
    ids.append(producer._transaction_manager.producer_id_and_epoch.producer_id)
    producer.close()
    assert len(set(ids)) == 3 and all(i >= 0 for i in ids)
    assert read_all(server.bootstrap, "idem", "read_uncommitted", 3) == [b"x", b"x", b"y"]
