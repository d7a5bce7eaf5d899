"""An idempotent producer's retries against a real ``tierlog serve``, at the protocol level:
aiokafka's low-level client sends the very same ProduceRequest (same producer id, epoch and
sequence) twice, as a producer does when a response is lost. Kafka answers a duplicate of
one of the producer's last 5 batches with success and the original base offset, and the log
holds it once; a sequence gap is OUT_OF_ORDER_SEQUENCE_NUMBER and writes nothing."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

aiokafka = pytest.importorskip("aiokafka")

from aiokafka.client import AIOKafkaClient
from aiokafka.protocol.produce import ProduceRequest
from aiokafka.protocol.transaction import InitProducerIdRequest
from aiokafka.record.default_records import DefaultRecordBatchBuilder
from kafka import KafkaConsumer, TopicPartition
from support.server_process import ServerProcess

from tierlog.log.log import Log

SERVER_CONFIG = {"offsets.topic.num.partitions": 1, "transaction.state.log.num.partitions": 1}
TOPIC = "idem"
SERVER_TOPICS = (TOPIC,)
SERVER_PER_TEST = True  # each test reads its server's data
NONE, OUT_OF_ORDER_SEQUENCE_NUMBER = 0, 45


def batch(producer_id: int, epoch: int, sequence: int, values: list[bytes]) -> bytes:
    """One v2 record batch of ``values`` with the producer's id, epoch and first sequence."""
    builder = DefaultRecordBatchBuilder(2, 0, is_transactional=0, producer_id=producer_id,
                                        producer_epoch=epoch, base_sequence=sequence,
                                        batch_size=1 << 20)
    for i, value in enumerate(values):
        builder.append(i, timestamp=None, key=b"k", value=value, headers=[])
    return bytes(builder.build())


async def produce(client: AIOKafkaClient, node: int, data: bytes) -> tuple[int, int]:
    """Send one acks=-1 ProduceRequest of ``data``: (error code, base offset)."""
    response: Any = await client.send(node, ProduceRequest(None, -1, 30_000,
                                                           [(TOPIC, [(0, data)])]))
    (topic, partitions), = response.topics
    partition = partitions[0]
    assert topic == TOPIC and partition[0] == 0
    return partition[1], partition[2]


def test_a_retried_batch_is_written_once_with_its_original_offset(
        server: ServerProcess) -> None:
    async def scenario() -> None:
        client = AIOKafkaClient(bootstrap_servers=server.bootstrap)
        await client.bootstrap()
        try:
            node = client.get_random_node()
            init: Any = await client.send(node, InitProducerIdRequest(None, 60_000))
            assert init.error_code == NONE
            pid, epoch = init.producer_id, init.producer_epoch
            first = batch(pid, epoch, 0, [b"a0", b"a1", b"a2"])
            second = batch(pid, epoch, 3, [b"b0", b"b1"])
            assert await produce(client, node, first) == (NONE, 0)
            assert await produce(client, node, second) == (NONE, 3)
            # Both retried (the last batch and one before it): success, original offsets.
            assert await produce(client, node, second) == (NONE, 3)
            assert await produce(client, node, first) == (NONE, 0)
            # A gap in the sequence is refused, and nothing of it is written.
            gap = batch(pid, epoch, 9, [b"c0"])
            error, _ = await produce(client, node, gap)
            assert error == OUT_OF_ORDER_SEQUENCE_NUMBER
            assert await produce(client, node, batch(pid, epoch, 5, [b"c0"])) == (NONE, 5)
        finally:
            await client.close()

    asyncio.run(scenario())
    consumer = KafkaConsumer(bootstrap_servers=server.bootstrap, enable_auto_commit=False,
                             consumer_timeout_ms=3000)
    try:
        tp = TopicPartition(TOPIC, 0)
        consumer.assign([tp])
        consumer.seek_to_beginning(tp)
        seen = [(m.offset, m.value) for m in consumer]
    finally:
        consumer.close()
    assert seen == [(0, b"a0"), (1, b"a1"), (2, b"a2"), (3, b"b0"), (4, b"b1"), (5, b"c0")]
    server.terminate()
    log = Log.open(server.data_dir / f"{TOPIC}-0")
    try:
        assert log.log_end_offset == 6
        assert [b.base_sequence for b in log.read(0, 1 << 20).data.batches()] == [0, 3, 5]
    finally:
        log.close()
