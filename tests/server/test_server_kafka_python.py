"""kafka-python against a real ``tierlog serve`` subprocess: every codec, keys and headers,
consumption by assignment, seeks by timestamp, and the admin client's topic verbs."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

kafka = pytest.importorskip("kafka")

from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import ConfigResource, ConfigResourceType, NewPartitions, NewTopic
from support.server_process import ServerProcess, start

CODECS = ["gzip", "snappy", "lz4", "zstd", None]


def consume_all(bootstrap: str, topic: str, partition: int = 0, expected: int = 0,
                **config: object) -> list[object]:
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False,
                             group_id=None, consumer_timeout_ms=3000, **config)
    try:
        consumer.assign([TopicPartition(topic, partition)])
        consumer.seek_to_beginning()
        out = []
        for message in consumer:
            out.append(message)
            if expected and len(out) >= expected:
                break
        return out
    finally:
        consumer.close()


@pytest.mark.parametrize("codec", CODECS)
def test_every_codec_round_trips_keys_values_and_headers(server: ServerProcess,
                                                         codec: str | None) -> None:
    topic = f"codec-{codec}"
    producer = KafkaProducer(bootstrap_servers=server.bootstrap, compression_type=codec,
                             enable_idempotence=False, acks="all", linger_ms=5)
    sent = [(f"k{i}".encode(), f"value-{i}-".encode() * 20, [("h", str(i).encode())])
            for i in range(200)]
    for key, value, headers in sent:
        producer.send(topic, key=key, value=value, headers=headers)
    producer.flush()
    producer.close()
    got = consume_all(server.bootstrap, topic, expected=len(sent))
    assert [(m.key, m.value, m.headers) for m in got] == sent
    assert [m.offset for m in got] == list(range(len(sent)))


def test_acks_zero_and_one_append(server: ServerProcess) -> None:
    for acks in (0, 1):
        producer = KafkaProducer(bootstrap_servers=server.bootstrap, acks=acks,
                                 enable_idempotence=False)
        futures = [producer.send(f"acks-{acks}", value=b"x%d" % i) for i in range(50)]
        producer.flush()
        producer.close()
        if acks == 1:
            assert [f.get(5).offset for f in futures] == list(range(50))
        assert len(consume_all(server.bootstrap, f"acks-{acks}", expected=50)) == 50


def test_seek_by_timestamp(server: ServerProcess) -> None:
    producer = KafkaProducer(bootstrap_servers=server.bootstrap, enable_idempotence=False)
    base = int(time.time() * 1000) - 100_000
    for i in range(10):
        producer.send("times", value=b"%d" % i, timestamp_ms=base + i * 1000)
    producer.flush()
    producer.close()
    consumer = KafkaConsumer(bootstrap_servers=server.bootstrap, group_id=None,
                             enable_auto_commit=False)
    tp = TopicPartition("times", 0)
    found = consumer.offsets_for_times({tp: base + 4500})
    assert found[tp].offset == 5 and found[tp].timestamp == base + 5000
    assert consumer.offsets_for_times({tp: base + 10**9})[tp] is None
    assert consumer.beginning_offsets([tp])[tp] == 0
    assert consumer.end_offsets([tp])[tp] == 10
    consumer.close()


def test_admin_create_describe_alter_grow_delete_records_and_delete(
        server: ServerProcess) -> None:
    admin = KafkaAdminClient(bootstrap_servers=server.bootstrap)
    admin.create_topics([NewTopic("admin-t", 2, 1, topic_configs={"retention.ms": "3600000"})])
    assert "admin-t" in admin.list_topics()
    with pytest.raises(kafka.errors.TopicAlreadyExistsError):
        admin.create_topics([NewTopic("admin-t", 1, 1)])
    with pytest.raises(kafka.errors.InvalidReplicationFactorError):
        admin.create_topics([NewTopic("admin-rf", 1, 3)])
    topic_resource = ConfigResource(ConfigResourceType.TOPIC, "admin-t")
    described = admin.describe_configs([topic_resource])["topic"]["admin-t"]
    assert described["retention.ms"]["value"] == "3600000"
    assert described["retention.ms"]["config_source"] == "DYNAMIC_TOPIC_CONFIG"
    altered = admin.alter_configs([ConfigResource(ConfigResourceType.TOPIC, "admin-t",
                                                  configs={"segment.bytes": "1048576"})])
    assert altered["topic"]["admin-t"] == "OK"
    described = admin.describe_configs([topic_resource])["topic"]["admin-t"]
    assert described["segment.bytes"]["value"] == "1048576"
    admin.create_partitions({"admin-t": NewPartitions(4)})
    topics = admin.describe_topics(["admin-t"])
    assert len(topics[0]["partitions"]) == 4

    producer = KafkaProducer(bootstrap_servers=server.bootstrap, enable_idempotence=False)
    for i in range(20):
        producer.send("admin-t", value=b"%d" % i, partition=0)
    producer.flush()
    producer.close()
    result = admin.delete_records({TopicPartition("admin-t", 0): 7})
    assert result[TopicPartition("admin-t", 0)]["low_watermark"] == 7
    got = consume_all(server.bootstrap, "admin-t", expected=13)
    assert got[0].offset == 7 and len(got) == 13

    admin.delete_topics(["admin-t"])
    assert "admin-t" not in admin.list_topics()
    admin.close()


def test_fetch_long_poll_is_woken_by_an_append(server: ServerProcess) -> None:
    producer = KafkaProducer(bootstrap_servers=server.bootstrap, enable_idempotence=False)
    producer.send("poll", value=b"first").get(5)
    consumer = KafkaConsumer(bootstrap_servers=server.bootstrap, group_id=None,
                             enable_auto_commit=False, fetch_max_wait_ms=10_000)
    tp = TopicPartition("poll", 0)
    consumer.assign([tp])
    consumer.seek(tp, 1)
    started = time.monotonic()
    producer.send("poll", value=b"second").get(5)
    records = consumer.poll(timeout_ms=8000)
    assert [m.value for m in records.get(tp, [])] == [b"second"]
    assert time.monotonic() - started < 8
    consumer.close()
    producer.close()


def test_log_dirs_written_through_the_server_open_with_log_open(tmp_path: Path) -> None:
    from tierlog.config import LogConfig
    from tierlog.log.log import Log

    proc = start(tmp_path)
    producer = KafkaProducer(bootstrap_servers=proc.bootstrap, enable_idempotence=False,
                             compression_type="gzip")
    for i in range(30):
        producer.send("through", key=b"%d" % i, value=b"v%d" % i)
    producer.flush()
    producer.close()
    assert proc.terminate() == 0
    assert (proc.data_dir / ".kafka_cleanshutdown").exists()
    with Log.open(proc.data_dir / "through-0", LogConfig({})) as log:
        records = list(log.read(0, 1 << 20).records())
    assert [(r.key, r.value) for r in records] == [(b"%d" % i, b"v%d" % i) for i in range(30)]
