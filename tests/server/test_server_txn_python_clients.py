"""Transactions from the two Python clients against a real ``tierlog serve`` (confluent-kafka's
are in test_server_txn.py, so all three clients drive them): aiokafka and kafka-python
transactional producers commit and abort, offsets sent to a transaction count only when it
commits, and a read_committed consumer of each client sees only committed records (a
read_uncommitted one sees them all)."""

from __future__ import annotations

import asyncio

import pytest

aiokafka = pytest.importorskip("aiokafka")
kafka = pytest.importorskip("kafka")

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.structs import OffsetAndMetadata as AioOffset
from aiokafka.structs import TopicPartition as AioPartition
from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from support.server_process import ServerProcess

SERVER_CONFIG = {"group.initial.rebalance.delay.ms": 0, "offsets.topic.num.partitions": 3,
                 "transaction.state.log.num.partitions": 3}
SERVER_TOPICS = ("aio-tx", "kp-tx", "src")
DEADLINE_S = 60.0


async def aio_read(bootstrap: str, topic: str, isolation: str) -> list[bytes]:
    """Every record of ``topic``-0 up to its end (for read_committed: the last stable
    offset), read by an aiokafka consumer with ``isolation``."""
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, isolation_level=isolation,
                                enable_auto_commit=False)
    await consumer.start()
    tp = AioPartition(topic, 0)
    try:
        consumer.assign([tp])
        await consumer.seek_to_beginning(tp)
        end = (await consumer.end_offsets([tp]))[tp]
        out: list[bytes] = []
        async with asyncio.timeout(DEADLINE_S):
            while await consumer.position(tp) < end:
                batch = await consumer.getmany(tp, timeout_ms=200)
                out += [m.value for m in batch.get(tp, [])]
        return out
    finally:
        await consumer.stop()


def test_aiokafka_transactions_commit_and_abort(server: ServerProcess) -> None:
    async def scenario() -> tuple[list[bytes], list[bytes], int | None]:
        producer = AIOKafkaProducer(bootstrap_servers=server.bootstrap,
                                    transactional_id="aio-writer")
        await producer.start()
        try:
            async with producer.transaction():
                await producer.send_and_wait("aio-tx", b"c1", partition=0)
                await producer.send_and_wait("aio-tx", b"c2", partition=0)
            await producer.begin_transaction()
            await producer.send_and_wait("aio-tx", b"aborted", partition=0)  # written
            await producer.send_offsets_to_transaction(
                {AioPartition("src", 0): AioOffset(7, "")}, "aio-group")
            await producer.abort_transaction()
            async with producer.transaction():
                await producer.send_and_wait("aio-tx", b"c3", partition=0)
                await producer.send_offsets_to_transaction(
                    {AioPartition("src", 0): AioOffset(3, "")}, "aio-group")
        finally:
            await producer.stop()
        committed = await aio_read(server.bootstrap, "aio-tx", "read_committed")
        everything = await aio_read(server.bootstrap, "aio-tx", "read_uncommitted")
        consumer = AIOKafkaConsumer(bootstrap_servers=server.bootstrap, group_id="aio-group",
                                    enable_auto_commit=False)
        await consumer.start()
        try:
            offset = await consumer.committed(AioPartition("src", 0))
        finally:
            await consumer.stop()
        return committed, everything, offset

    committed, everything, offset = asyncio.run(scenario())
    assert committed == [b"c1", b"c2", b"c3"]
    assert everything == [b"c1", b"c2", b"aborted", b"c3"]
    assert offset == 3  # the aborted transaction's offset 7 never counted


def test_kafka_python_transactions_commit_and_abort(server: ServerProcess) -> None:
    producer = KafkaProducer(bootstrap_servers=server.bootstrap, transactional_id="kp-writer")
    try:
        producer.init_transactions()
        producer.begin_transaction()
        producer.send("kp-tx", b"c1", partition=0)
        producer.commit_transaction()
        producer.begin_transaction()
        producer.send("kp-tx", b"aborted", partition=0).get(DEADLINE_S)  # written
        producer.abort_transaction()
        producer.begin_transaction()
        producer.send("kp-tx", b"c2", partition=0)
        producer.commit_transaction()
    finally:
        producer.close()

    def read(isolation: str) -> list[bytes]:
        consumer = KafkaConsumer(bootstrap_servers=server.bootstrap, isolation_level=isolation,
                                 enable_auto_commit=False, consumer_timeout_ms=3000)
        try:
            consumer.assign([TopicPartition("kp-tx", 0)])
            consumer.seek_to_beginning()
            return [m.value for m in consumer]
        finally:
            consumer.close()

    assert read("read_committed") == [b"c1", b"c2"]
    assert read("read_uncommitted") == [b"c1", b"aborted", b"c2"]
    # The aiokafka reader agrees with kafka-python's on the other client's transactions.
    assert asyncio.run(aio_read(server.bootstrap, "kp-tx", "read_committed")) == [b"c1", b"c2"]
