"""confluent-kafka (librdkafka) against a real ``tierlog serve`` subprocess: produce with
every codec, consume by assignment (read_uncommitted), and the admin client's verbs."""

from __future__ import annotations

import time

import pytest

ck = pytest.importorskip("confluent_kafka")

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewPartitions,
    NewTopic,
)
from support.server_process import ServerProcess


def consume(bootstrap: str, topic: str, count: int, partition: int = 0,
            offset: int = ck.OFFSET_BEGINNING) -> list[ck.Message]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "unused",
                         "enable.auto.commit": False,
                         "isolation.level": "read_uncommitted"})
    consumer.assign([TopicPartition(topic, partition, offset)])
    out: list[ck.Message] = []
    try:
        deadline = time.monotonic() + 30
        while len(out) < count and time.monotonic() < deadline:
            msg = consumer.poll(0.2)
            if msg is None:
                continue
            assert msg.error() is None, msg.error()
            out.append(msg)
    finally:
        consumer.close()
    return out


@pytest.mark.parametrize("codec", ["none", "gzip", "snappy", "lz4", "zstd"])
def test_librdkafka_produces_and_consumes_every_codec(server: ServerProcess, codec: str) -> None:
    topic = f"rd-{codec}"
    producer = Producer({"bootstrap.servers": server.bootstrap, "compression.type": codec,
                         "acks": "all", "linger.ms": 5, "enable.idempotence": False})
    delivered: list[int] = []
    for i in range(300):
        producer.produce(topic, key=b"k%d" % i, value=b"v%d" % i, headers=[("n", b"%d" % i)],
                         on_delivery=lambda err, msg: delivered.append(
                             -1 if err else msg.offset()))
    assert producer.flush(30) == 0
    assert sorted(delivered) == list(range(300))
    got = consume(server.bootstrap, topic, 300)
    assert [(m.key(), m.value(), m.headers()) for m in got] == [
        (b"k%d" % i, b"v%d" % i, [("n", b"%d" % i)]) for i in range(300)]


def test_librdkafka_seek_by_timestamp(server: ServerProcess) -> None:
    producer = Producer({"bootstrap.servers": server.bootstrap, "enable.idempotence": False})
    base = 1_700_000_000_000
    for i in range(10):
        producer.produce("rd-times", value=b"%d" % i, timestamp=base + i * 1000)
    producer.flush(30)
    consumer = Consumer({"bootstrap.servers": server.bootstrap, "group.id": "unused"})
    found = consumer.offsets_for_times([TopicPartition("rd-times", 0, base + 2500)], 10)
    assert found[0].offset == 3
    low, high = consumer.get_watermark_offsets(TopicPartition("rd-times", 0), 10)
    assert (low, high) == (0, 10)
    consumer.close()


def test_librdkafka_admin_verbs(server: ServerProcess) -> None:
    admin = AdminClient({"bootstrap.servers": server.bootstrap})
    admin.create_topics([NewTopic("rd-admin", 2, 1, config={"cleanup.policy": "delete"})],
                        )["rd-admin"].result(30)
    assert "rd-admin" in admin.list_topics(timeout=10).topics
    resource = ConfigResource("topic", "rd-admin")
    configs = admin.describe_configs([resource])[resource].result(30)
    assert configs["cleanup.policy"].value == "delete"
    alter = ConfigResource("topic", "rd-admin", incremental_configs=[
        ConfigEntry("retention.ms", "7200000",
                    incremental_operation=AlterConfigOpType.SET)])
    admin.incremental_alter_configs([alter])[alter].result(30)
    configs = admin.describe_configs([resource])[resource].result(30)
    assert configs["retention.ms"].value == "7200000"
    admin.create_partitions([NewPartitions("rd-admin", 3)])["rd-admin"].result(30)
    assert len(admin.list_topics(timeout=10).topics["rd-admin"].partitions) == 3

    producer = Producer({"bootstrap.servers": server.bootstrap, "enable.idempotence": False})
    for i in range(10):
        producer.produce("rd-admin", value=b"%d" % i, partition=1)
    producer.flush(30)
    done = admin.delete_records([TopicPartition("rd-admin", 1, 4)])
    assert done[TopicPartition("rd-admin", 1, 4)].result(30).low_watermark == 4
    got = consume(server.bootstrap, "rd-admin", 6, partition=1)
    assert [m.offset() for m in got] == list(range(4, 10))

    admin.delete_topics(["rd-admin"])["rd-admin"].result(30)
    assert "rd-admin" not in admin.list_topics(timeout=10).topics
