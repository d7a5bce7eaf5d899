"""Consumer groups against a real ``tierlog serve`` subprocess: kafka-python and aiokafka
members rebalancing as members join and leave, and committed offsets surviving a clean
restart and a SIGKILL (read back from ``__consumer_offsets``)."""

from __future__ import annotations

import asyncio
import time

import pytest

kafka = pytest.importorskip("kafka")

from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import NewTopic
from support.server_process import ServerProcess

from tierlog.log.log import Log
from tierlog.server.coordinator.coordinator_wire import partition_for
from tierlog.server.coordinator.group import offsets_topic_records as rec

SERVER_CONFIG = {"group.initial.rebalance.delay.ms": 0, "offsets.topic.num.partitions": 5,
                 "transaction.state.log.num.partitions": 5}
SERVER_PER_TEST = True  # each test restarts its server or reads its data
#: Bound on waiting for real client behaviour (rebalances, polls).
DEADLINE_S = 60.0


def produce(bootstrap: str, topic: str, partitions: int, count: int) -> None:
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        admin.create_topics([NewTopic(topic, partitions, 1)])
    finally:
        admin.close()
    producer = KafkaProducer(bootstrap_servers=bootstrap)
    for i in range(count):
        producer.send(topic, f"v{i}".encode(), partition=i % partitions)
    producer.flush()
    producer.close()


def poll_until(consumers: list[KafkaConsumer], done: object) -> None:
    deadline = time.monotonic() + DEADLINE_S
    while not done():  # type: ignore[operator]
        assert time.monotonic() < deadline, "the group did not settle in time"
        for consumer in consumers:
            consumer.poll(timeout_ms=100)


def test_members_join_and_leave_with_rebalances(server: ServerProcess) -> None:
    produce(server.bootstrap, "rb", 4, 40)
    config = {"bootstrap_servers": server.bootstrap, "group_id": "rebalancers",
              "auto_offset_reset": "earliest", "enable_auto_commit": False,
              "heartbeat_interval_ms": 200, "session_timeout_ms": 6000}
    first = KafkaConsumer("rb", **config)
    second = None
    try:
        poll_until([first], lambda: len(first.assignment()) == 4)
        second = KafkaConsumer("rb", **config)
        poll_until([first, second], lambda: len(first.assignment()) == 2
                   and len(second.assignment()) == 2)
        assert first.assignment() | second.assignment() == {TopicPartition("rb", p)
                                                              for p in range(4)}
        second.close()  # LeaveGroup: the first member takes every partition back
        second = None
        poll_until([first], lambda: len(first.assignment()) == 4)
    finally:
        first.close()
        if second is not None:
            second.close()
    admin = KafkaAdminClient(bootstrap_servers=server.bootstrap)
    try:
        listed = admin.list_groups()
        assert {"group_id": "rebalancers", "protocol_type": "consumer",
                "group_state": "Empty"} in listed
        described = admin.describe_groups(["rebalancers"])["rebalancers"]
        assert described["group_state"] == "Empty" and described["members"] == []
        assert "rebalancers" in str(admin.delete_groups(["rebalancers"]))
        assert "rebalancers" not in str(admin.list_groups())
    finally:
        admin.close()


def committed(bootstrap: str, group: str, partitions: list[TopicPartition]) -> dict[int, int]:
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=group,
                             enable_auto_commit=False)
    try:
        return {tp.partition: consumer.committed(tp) for tp in partitions}
    finally:
        consumer.close()


@pytest.mark.parametrize("hard", [False, True], ids=["sigterm", "sigkill"])
def test_committed_offsets_survive_a_restart(server: ServerProcess, hard: bool) -> None:
    produce(server.bootstrap, "keep", 2, 20)
    consumer = KafkaConsumer("keep", bootstrap_servers=server.bootstrap, group_id="keepers",
                             auto_offset_reset="earliest", enable_auto_commit=False,
                             consumer_timeout_ms=5000)
    for seen, _ in enumerate(consumer, 1):
        if seen == 20:
            break
    consumer.commit()
    consumer.close()
    partitions = [TopicPartition("keep", 0), TopicPartition("keep", 1)]
    assert committed(server.bootstrap, "keepers", partitions) == {0: 10, 1: 10}
    server.restart(hard=hard)
    assert committed(server.bootstrap, "keepers", partitions) == {0: 10, 1: 10}
    # A restarted member resumes after the committed offsets: nothing is read again.
    producer = KafkaProducer(bootstrap_servers=server.bootstrap)
    producer.send("keep", b"new", partition=0)
    producer.flush()
    producer.close()
    again = KafkaConsumer("keep", bootstrap_servers=server.bootstrap, group_id="keepers",
                          auto_offset_reset="earliest", enable_auto_commit=False,
                          consumer_timeout_ms=5000)
    try:
        values = [m.value for m in again]
    finally:
        again.close()
    assert values == [b"new"]
    server.terminate()
    # The server's __consumer_offsets opens with Log.open and holds Kafka's records.
    partition = partition_for("keepers", SERVER_CONFIG["offsets.topic.num.partitions"])
    log = Log.open(server.data_dir / f"__consumer_offsets-{partition}")
    try:
        keys = [rec.decode_key(r.key) for r in log.read(0, 1 << 20).data.records()
                if r.key is not None]
    finally:
        log.close()
    assert rec.OffsetKey("keepers", "keep", 0) in keys and rec.GroupKey("keepers") in keys


def test_aiokafka_group_commits(server: ServerProcess) -> None:
    aiokafka = pytest.importorskip("aiokafka")
    produce(server.bootstrap, "aio", 1, 5)

    async def consume() -> list[bytes]:
        consumer = aiokafka.AIOKafkaConsumer(
            "aio", bootstrap_servers=server.bootstrap, group_id="aio-group",
            auto_offset_reset="earliest", enable_auto_commit=False)
        await consumer.start()
        try:
            out: list[bytes] = []
            async with asyncio.timeout(DEADLINE_S):
                while len(out) < 5:
                    batch = await consumer.getmany(timeout_ms=500)
                    out += [m.value for ms in batch.values() for m in ms]
            await consumer.commit()
            return out
        finally:
            await consumer.stop()

    assert asyncio.run(consume()) == [f"v{i}".encode() for i in range(5)]
    assert committed(server.bootstrap, "aio-group", [TopicPartition("aio", 0)]) == {0: 5}
