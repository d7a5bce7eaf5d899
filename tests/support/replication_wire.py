"""Test helper for the replication tests against a real ``tierlog serve``: the requests a
test sends by hand (a consumer's Fetch v12, an OffsetForLeaderEpoch v4), records produced
with kafka-python, and the leader's log bytes as a consumer fetch returns them."""

from __future__ import annotations

import datetime

from kafka import KafkaProducer
from kio.schema.fetch.v12 import request as fetch_request
from kio.schema.fetch.v12.response import FetchResponse
from kio.schema.offset_for_leader_epoch.v4 import request as epoch_request
from kio.schema.types import BrokerId, TopicName
from kio.static.primitive import i8, i32, i32Timedelta, i64

from support.server_process import ServerProcess
from tierlog.server.replication.wire_client import BrokerConnection


def fetch(topic: str, offset: int, *, replica_id: int = -1) -> fetch_request.FetchRequest:
    """A Fetch v12 of partition 0 of ``topic`` from ``offset`` (1 MiB at most)."""
    partition = fetch_request.FetchPartition(
        partition=i32(0), current_leader_epoch=i32(-1), fetch_offset=i64(offset),
        last_fetched_epoch=i32(-1), log_start_offset=i64(-1), partition_max_bytes=i32(1 << 20))
    return fetch_request.FetchRequest(
        cluster_id=None, replica_id=BrokerId(replica_id), max_wait=i32Timedelta.parse(
            datetime.timedelta(milliseconds=10)), min_bytes=i32(1), max_bytes=i32(1 << 20),
        isolation_level=i8(0), session_id=i32(0), session_epoch=i32(-1),
        topics=(fetch_request.FetchTopic(topic=TopicName(topic), partitions=(partition,)),),
        forgotten_topics_data=(), rack_id="")


def end_of_epoch(topic: str, epoch: int) -> epoch_request.OffsetForLeaderEpochRequest:
    """An OffsetForLeaderEpoch v4 of partition 0 of ``topic`` for ``epoch``."""
    return epoch_request.OffsetForLeaderEpochRequest(
        replica_id=BrokerId(-2), topics=(epoch_request.OffsetForLeaderTopic(
            topic=TopicName(topic), partitions=(epoch_request.OffsetForLeaderPartition(
                partition=i32(0), current_leader_epoch=i32(-1), leader_epoch=i32(epoch)),)),))


def produce(server: ServerProcess, topic: str, n: int, compression: str | None = None) -> None:
    """``n`` records to ``topic`` with acks=all (a few batches: linger 5 ms)."""
    producer = KafkaProducer(bootstrap_servers=server.bootstrap, acks="all",
                             compression_type=compression, linger_ms=5)
    for i in range(n):
        producer.send(topic, key=b"k%d" % i, value=b"value %d " % i * 8)
    producer.flush()
    producer.close()


async def leader_bytes(server: ServerProcess, topic: str) -> bytes:
    """Partition 0 of ``topic`` on ``server`` from offset 0, as a consumer's fetch returns it."""
    connection = BrokerConnection("127.0.0.1", server.port, client_id="test")
    try:
        answer = await connection.send(fetch(topic, 0), FetchResponse)
    finally:
        await connection.close()
    return bytes(answer.responses[0].partitions[0].records or b"")
