"""What the server does to the data dirs: an engine-written dir is served unchanged, reads
below the local log start come from the remote tier through the protocol, ListOffsets'
special timestamps, and SIGTERM's clean shutdown; plus aiokafka as a third client."""

from __future__ import annotations

import asyncio
import io
import socket
import struct
import time
from pathlib import Path

import pytest
from kio.index import load_request_schema, load_response_schema
from kio.serial import entity_reader, entity_writer
from support.server_process import ServerProcess, start

from tierlog.manager.log_manager import LogManager
from tierlog.records.record import Record

kafka = pytest.importorskip("kafka")
from kafka import KafkaConsumer, KafkaProducer, TopicPartition


def list_offsets(server: ServerProcess, topic: str, timestamp: int, version: int = 9) -> int:
    """The offset ListOffsets answers for partition 0 (raw request: -4 and -5 are not in
    every client's API)."""
    cls = load_request_schema(2, version)
    mod = __import__(cls.__module__, fromlist=["x"])
    body = cls(replica_id=-1, isolation_level=0, topics=(mod.ListOffsetsTopic(
        name=topic, partitions=(mod.ListOffsetsPartition(
            partition_index=0, current_leader_epoch=-1, timestamp=timestamp),)),))
    buf = io.BytesIO()
    header_t = cls.__header_schema__
    entity_writer(header_t)(buf, header_t(request_api_key=2, request_api_version=version,
                                          correlation_id=5, client_id="t"))
    entity_writer(cls)(buf, body)
    with socket.create_connection((server.host, server.port), timeout=10) as sock:
        sock.sendall(struct.pack(">i", len(buf.getvalue())) + buf.getvalue())
        size = struct.unpack(">i", sock.recv(4, socket.MSG_WAITALL))[0]
        reply = sock.recv(size, socket.MSG_WAITALL)
    response_t = load_response_schema(2, version)
    _, header_size = entity_reader(response_t.__header_schema__)(reply, 0)
    response, _ = entity_reader(response_t)(reply, header_size)
    part = response.topics[0].partitions[0]
    assert part.error_code.value == 0, part.error_code
    return int(part.offset)


def consume_values(bootstrap: str, topic: str, count: int) -> list[bytes]:
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=None,
                             enable_auto_commit=False, consumer_timeout_ms=5000)
    consumer.assign([TopicPartition(topic, 0)])
    consumer.seek_to_beginning()
    values = []
    for message in consumer:
        values.append(message.value)
        if len(values) >= count:
            break
    consumer.close()
    return values


def test_a_data_dir_written_by_the_engine_is_served_unchanged(tmp_path: Path) -> None:
    data = tmp_path / "data"
    with LogManager.open(data, start_scheduler=False) as mgr:
        log = mgr.create_topic("engine", 1)[0]
        for i in range(100):
            log.append_records([Record(key=b"%d" % i, value=b"engine-%d" % i)],
                               compression="zstd" if i % 2 else "none")
    before = sorted((p.name, p.stat().st_size) for p in (data / "engine-0").iterdir())
    with start(tmp_path, data_dir=data) as server:
        assert consume_values(server.bootstrap, "engine", 100) == [
            b"engine-%d" % i for i in range(100)]
        assert list_offsets(server, "engine", -1) == 100
        assert list_offsets(server, "engine", -2) == 0
        assert list_offsets(server, "engine", -3) in range(100)
        assert list_offsets(server, "engine", -5) == -1  # not tiered
    after = sorted((p.name, p.stat().st_size) for p in (data / "engine-0").iterdir())
    assert after == before


def test_offsets_tiered_and_removed_locally_are_read_through_the_protocol(
        tmp_path: Path) -> None:
    config = {"remote.storage.manager": "local",
              "remote.storage.url": (tmp_path / "tier").as_uri(),
              "remote.log.manager.task.interval.ms": 100,
              "log.retention.check.interval.ms": 100,
              "file.delete.delay.ms": 0}
    with start(tmp_path, config) as server:
        from kafka import KafkaAdminClient
        from kafka.admin import NewTopic
        admin = KafkaAdminClient(bootstrap_servers=server.bootstrap)
        admin.create_topics([NewTopic("tiered", 1, 1, topic_configs={
            "remote.storage.enable": "true", "segment.bytes": "4096",
            "local.retention.bytes": "1", "file.delete.delay.ms": "0"})])
        admin.close()
        producer = KafkaProducer(bootstrap_servers=server.bootstrap, enable_idempotence=False,
                                 linger_ms=0, batch_size=512)
        for i in range(400):
            producer.send("tiered", value=b"tiered-%04d" % i + b"." * 50)
        producer.flush()
        producer.close()
        # The server's scheduler tiers and then deletes locally; ask it until it has.
        deadline = time.monotonic() + 60
        while list_offsets(server, "tiered", -4) == 0:
            assert time.monotonic() < deadline, server.log_text()
            time.sleep(0.1)
        assert list_offsets(server, "tiered", -5) > 0
        assert list_offsets(server, "tiered", -2) == 0
        values = consume_values(server.bootstrap, "tiered", 400)
        assert values == [b"tiered-%04d" % i + b"." * 50 for i in range(400)]


def test_sigterm_writes_the_clean_shutdown_marker_and_sigkill_does_not(tmp_path: Path) -> None:
    server = start(tmp_path)
    producer = KafkaProducer(bootstrap_servers=server.bootstrap, enable_idempotence=False)
    producer.send("marker", value=b"x").get(10)
    producer.close()
    marker = server.data_dir / ".kafka_cleanshutdown"
    server.restart(hard=True)
    assert not marker.exists()  # the new process removed it at open; SIGKILL wrote none
    server.kill()
    assert not marker.exists()
    server.start()
    assert consume_values(server.bootstrap, "marker", 1) == [b"x"]
    assert server.terminate() == 0
    assert marker.exists()
    assert "stopping" in server.log_text()


def test_aiokafka_produces_and_consumes(tmp_path: Path) -> None:
    aiokafka = pytest.importorskip("aiokafka")

    async def run(bootstrap: str) -> list[tuple[bytes | None, bytes | None]]:
        producer = aiokafka.AIOKafkaProducer(bootstrap_servers=bootstrap,
                                             compression_type="gzip", acks="all")
        await producer.start()
        try:
            for i in range(50):
                await producer.send("aio", key=b"%d" % i, value=b"aio-%d" % i,
                                    headers=[("h", b"1")])
            await producer.flush()
        finally:
            await producer.stop()
        consumer = aiokafka.AIOKafkaConsumer(bootstrap_servers=bootstrap,
                                             enable_auto_commit=False, group_id=None,
                                             isolation_level="read_uncommitted")
        await consumer.start()
        try:
            tp = aiokafka.TopicPartition("aio", 0)
            consumer.assign([tp])
            await consumer.seek_to_beginning(tp)
            got = []
            while len(got) < 50:
                batch = await asyncio.wait_for(consumer.getmany(timeout_ms=1000), 20)
                got += [(m.key, m.value) for m in batch.get(tp, [])]
            return got
        finally:
            await consumer.stop()

    with start(tmp_path) as server:
        assert asyncio.run(run(server.bootstrap)) == [(b"%d" % i, b"aio-%d" % i)
                                                      for i in range(50)]
