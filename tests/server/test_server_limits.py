"""Requests that would fill the broker's disk or memory (issue 21, defects 11 and 15) and
its other limits (defects 9 and 8), against a real ``tierlog serve``: max.broker.partitions,
the free-space check before a create, a start-up that takes little disk, no data dir path in
a client's error, queued.max.request.bytes and a client leaving mid-fetch."""

from __future__ import annotations

import datetime
import io
import os
import socket
import struct
from pathlib import Path
from typing import Any

import pytest
from kio.index import load_request_schema, load_response_schema
from kio.schema.errors import ErrorCode
from kio.serial import entity_reader, entity_writer
from support.server_process import ServerProcess

from tierlog.errors import PartitionLimitError
from tierlog.manager.log_manager import LogManager
from tierlog.server.error_codes import error_message
from tierlog.server.partition_limits import BYTES_PER_NEW_PARTITION, check_new_partitions

#: __consumer_offsets and __transaction_state: 50 partitions each, made at start-up.
INTERNAL_PARTITIONS = 100
CAP = INTERNAL_PARTITIONS + 7
QUEUED_MAX = 16 << 20


SERVER_CONFIG = {"max.broker.partitions": CAP, "queued.max.request.bytes": QUEUED_MAX}


def _call(server: ServerProcess, api_key: int, version: int, body: Any) -> Any:
    cls = load_request_schema(api_key, version)
    header_t = cls.__header_schema__
    buf = io.BytesIO()
    entity_writer(header_t)(buf, header_t(request_api_key=api_key, request_api_version=version,
                                          correlation_id=1, client_id="test"))
    entity_writer(cls)(buf, body)
    payload = buf.getvalue()
    with socket.create_connection((server.host, server.port), timeout=30) as sock:
        sock.sendall(struct.pack(">i", len(payload)) + payload)
        size = struct.unpack(">i", sock.recv(4, socket.MSG_WAITALL))[0]
        reply = sock.recv(size, socket.MSG_WAITALL)
    response_t = load_response_schema(api_key, version)
    offset = 5 if response_t.__header_schema__.__flexible__ else 4
    return entity_reader(response_t)(reply, offset)[0]


def _create_topic(server: ServerProcess, name: str, partitions: int,
                  **configs: str) -> Any:
    from kio.schema.create_topics.v5.request import (
        CreatableTopic,
        CreatableTopicConfig,
        CreateTopicsRequest,
    )
    request = CreateTopicsRequest(topics=(CreatableTopic(
        name=name, num_partitions=partitions, replication_factor=1, assignments=(),
        configs=tuple(CreatableTopicConfig(name=k, value=v) for k, v in configs.items())),))
    return _call(server, 19, 5, request).topics[0]


def _partition_dirs(server: ServerProcess) -> set[str]:
    return {p.name for p in server.data_dir.iterdir() if p.is_dir()}


def test_a_create_topics_for_2_31_partitions_is_refused_before_any_is_made(
        server: ServerProcess) -> None:
    before = _partition_dirs(server)
    result = _create_topic(server, "huge", (1 << 31) - 1)
    assert result.error_code == ErrorCode.policy_violation
    assert "max.broker.partitions" in result.error_message
    assert _partition_dirs(server) == before


def test_partitions_up_to_the_cap_are_made_and_one_more_is_refused(
        server: ServerProcess) -> None:
    from kio.schema.create_partitions.v1.request import (
        CreatePartitionsRequest,
        CreatePartitionsTopic,
    )
    assert _create_topic(server, "capped", 4).error_code == ErrorCode.none
    refused = _create_topic(server, "one-too-many", 4)  # 3 are left
    assert refused.error_code == ErrorCode.policy_violation
    assert f"max.broker.partitions ({CAP})" in refused.error_message
    grow = CreatePartitionsRequest(topics=(CreatePartitionsTopic(
        name="capped", count=8, assignments=None),), timeout=datetime.timedelta(seconds=30),
        validate_only=False)
    result = _call(server, 37, 1, grow).results[0]
    assert result.error_code == ErrorCode.policy_violation
    assert not any(d.startswith("one-too-many") or d == "capped-4"
                   for d in _partition_dirs(server))


def test_a_new_broker_takes_little_disk_before_any_record(server: ServerProcess) -> None:
    """The 100 internal partitions' indexes reserve a step each, not segment.index.bytes:
    2 GiB of disk before (20 MiB a partition), now about 100 x 128 KiB."""
    allocated = sum(os.stat(Path(root) / name).st_blocks * 512
                    for root, _, names in os.walk(server.data_dir) for name in names)
    assert allocated < 64 << 20, allocated


def test_a_create_the_disk_cannot_hold_is_refused_without_the_path(tmp_path: Path) -> None:
    data = tmp_path / "data-dir-name"
    with LogManager.open([data]) as manager:
        free = os.statvfs(data).f_bavail * os.statvfs(data).f_frsize
        too_many = free // BYTES_PER_NEW_PARTITION + 1
        with pytest.raises(PartitionLimitError, match=f"{too_many} new partitions need") as e:
            check_new_partitions(manager, [data], 1 << 62, too_many)
        assert "data-dir-name" not in str(e.value)
        check_new_partitions(manager, [data], 1 << 62, 1)  # one fits


def test_an_error_sent_to_a_client_names_the_file_not_the_data_dir() -> None:
    exc = OSError(28, "cannot reserve 65536 bytes for index "
                      "/srv/kafka-data/orders-0/00000000000000000000.index: No space left",
                  "/srv/kafka-data/orders-0/00000000000000000000.index")
    message = error_message(exc)
    assert "/srv" not in message and "kafka-data" not in message
    assert ".../00000000000000000000.index" in message
    assert error_message(ValueError("log dir /data is offline")) == "log dir ... is offline"


def test_a_batch_larger_than_segment_bytes_answers_record_list_too_large(
        server: ServerProcess) -> None:
    """Kafka answers RECORD_LIST_TOO_LARGE (its RecordBatchTooLargeException) for a batch no
    segment could hold, MESSAGE_TOO_LARGE only above max.message.bytes."""
    kafka = pytest.importorskip("kafka")
    assert _create_topic(server, "small-segments", 1,
                         **{"segment.bytes": "1024"}).error_code == ErrorCode.none
    producer = kafka.KafkaProducer(bootstrap_servers=server.bootstrap, retries=0)
    try:
        with pytest.raises(kafka.errors.RecordListTooLargeError):
            producer.send("small-segments", b"v" * 4000).get(timeout=30)
        producer.send("small-segments", b"v" * 100).get(timeout=30)  # one that fits
    finally:
        producer.close()


def _rss_bytes(server: ServerProcess) -> int:
    assert server.proc is not None
    for line in Path(f"/proc/{server.proc.pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


def _send_some(sock: socket.socket, data: bytes, timeout_s: float) -> int:
    """Send what the peer takes within ``timeout_s``; the bytes sent."""
    sock.settimeout(timeout_s)
    sent = 0
    try:
        while sent < len(data):
            sent += sock.send(data[sent:sent + (1 << 20)])
    except TimeoutError:
        pass
    return sent


def test_half_sent_requests_are_bounded_by_queued_max_request_bytes(
        server: ServerProcess) -> None:
    """Eight clients each half-send a 48 MiB request: without a total bound the server held
    all eight halves (192 MiB); with queued.max.request.bytes = 16 MiB one request's
    reservation is granted (the pool had room) and the others wait in their own sockets."""
    size = 48 << 20
    half = b"\x00" * (size // 2)
    before = _rss_bytes(server)
    socks = [socket.create_connection((server.host, server.port)) for _ in range(8)]
    try:
        sent = []
        for sock in socks:
            sock.sendall(struct.pack(">i", size))
            sent.append(_send_some(sock, half, 1.0))
        grown = _rss_bytes(server) - before
        assert sent[0] == len(half)  # the first one's reservation fits: it is read
        assert sum(sent) < 4 * len(half), sent  # the rest wait in their socket buffers
        assert grown < 3 * len(half), (grown, sent)
        assert server.alive()
    finally:
        for sock in socks:
            sock.close()
    assert _api_versions_answered(server)  # memory came back when they left


def _api_versions_answered(server: ServerProcess) -> bool:
    payload = struct.pack(">hhih", 18, 0, 9, 4) + b"test"
    with socket.create_connection((server.host, server.port), timeout=10) as sock:
        sock.sendall(struct.pack(">i", len(payload)) + payload)
        return len(sock.recv(4, socket.MSG_WAITALL)) == 4


def test_a_client_leaving_mid_fetch_is_one_debug_line_not_an_error(
        server: ServerProcess) -> None:
    from kio.schema.fetch.v4.request import FetchPartition, FetchRequest, FetchTopic
    kafka = pytest.importorskip("kafka")
    assert _create_topic(server, "big", 1, **{"segment.bytes": str(1 << 20)}
                         ).error_code == ErrorCode.none
    producer = kafka.KafkaProducer(bootstrap_servers=server.bootstrap, linger_ms=20)
    for _ in range(3000):
        producer.send("big", b"x" * 2000)
    producer.flush()
    producer.close()
    request = FetchRequest(replica_id=-1, max_wait=datetime.timedelta(0), min_bytes=1,
                           max_bytes=64 << 20, isolation_level=0, topics=(FetchTopic(
                               topic="big", partitions=(FetchPartition(
                                   partition=0, fetch_offset=0,
                                   partition_max_bytes=64 << 20),)),))
    cls = load_request_schema(1, 4)
    buf = io.BytesIO()
    entity_writer(cls.__header_schema__)(buf, cls.__header_schema__(
        request_api_key=1, request_api_version=4, correlation_id=1, client_id="test"))
    entity_writer(cls)(buf, request)
    payload = buf.getvalue()
    for _ in range(5):
        sock = socket.create_connection((server.host, server.port))
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        sock.sendall(struct.pack(">i", len(payload)) + payload)
        sock.recv(64)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        sock.close()  # a reset, mid-response
    assert _api_versions_answered(server)
    text = server.log_text()
    assert "Traceback" not in text and "ERROR" not in text, text[-3000:]


def test_start_up_is_information_not_a_warning(server: ServerProcess) -> None:
    text = server.log_text()
    assert "INFO tierlog.cli.serve: tierlog serving Kafka clients on" in text
    assert "WARNING" not in text, text
