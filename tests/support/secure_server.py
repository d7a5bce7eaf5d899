"""A real ``tierlog serve`` with TLS and SASL listeners, for the security tests: certificates
made with :func:`support.certs.make_pki`, every listener's bound port read from the
``--listeners-file`` the server writes, and the clients' settings for each listener."""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition
from kafka import KafkaConsumer, KafkaProducer
from kafka import TopicPartition as KpTopicPartition

from support.certs import Pki
from support.server_process import ServerProcess

#: The PLAIN users of the tests' SASL listeners (admin is the super user where one is set).
USERS = {"admin": "admin-secret", "alice": "alice-secret"}
PLAIN_JAAS = ("org.apache.kafka.common.security.plain.PlainLoginModule required "
              'username="admin" password="admin-secret" '
              + " ".join(f'user_{name}="{password}"' for name, password in USERS.items()) + ";")


class SecureServer:
    """A started server and the address of each of its listeners."""

    def __init__(self, tmp_path: Path, config: Mapping[str, Any]) -> None:
        self.listeners_file = tmp_path / "listeners.json"
        self.process = ServerProcess(tmp_path, config,
                                     args=["--listeners-file", str(self.listeners_file)])

    def start(self) -> SecureServer:
        self.process.start()
        self.bound: dict[str, dict[str, Any]] = json.loads(self.listeners_file.read_text())
        return self

    def bootstrap(self, listener: str) -> str:
        """``host:port`` of ``listener``."""
        return f"127.0.0.1:{self.bound[listener]['port']}"

    def stop(self) -> None:
        if self.process.alive():
            self.process.terminate()


def tls_server_config(pki: Pki, **more: str) -> dict[str, str]:
    """The server's key store and trust store (Kafka's ssl.* names)."""
    return {"ssl.keystore.location": str(pki.server.keystore),
            "ssl.truststore.location": str(pki.ca), **more}


def kafka_python_ssl(pki: Pki, *, cert: bool = False) -> dict[str, Any]:
    """kafka-python's TLS settings trusting the test CA (with the client certificate)."""
    settings: dict[str, Any] = {"ssl_cafile": str(pki.ca), "ssl_check_hostname": True}
    if cert:
        settings.update(ssl_certfile=str(pki.client.cert), ssl_keyfile=str(pki.client.key))
    return settings


def librdkafka_ssl(pki: Pki, *, cert: bool = False) -> dict[str, Any]:
    """librdkafka's TLS settings trusting the test CA (with the client certificate)."""
    settings: dict[str, Any] = {"ssl.ca.location": str(pki.ca)}
    if cert:
        settings.update({"ssl.certificate.location": str(pki.client.cert),
                         "ssl.key.location": str(pki.client.key)})
    return settings


def kafka_python_refusal(caplog: Any, **settings: Any) -> list[BaseException]:
    """What kafka-python's bootstrap connections failed with, after an admin client with
    ``settings`` gave up bootstrapping: the exceptions its network layer logged as arguments
    (``Connection failed: <exception>``, ``Connection lost: <exception>``), in order."""
    import logging

    from kafka import KafkaAdminClient
    from kafka.errors import KafkaTimeoutError

    with caplog.at_level(logging.ERROR, logger="kafka"):
        try:
            KafkaAdminClient(bootstrap_timeout_ms=1500, **settings).close()
        except KafkaTimeoutError:
            pass
        else:
            raise AssertionError("kafka-python bootstrapped")
    failures = [arg for record in caplog.records if record.name.startswith("kafka.net")
                for arg in (record.args if isinstance(record.args, tuple) else ())
                if isinstance(arg, BaseException) and not isinstance(arg, KafkaTimeoutError)]
    assert failures, "kafka-python logged no connection failure"
    return failures


def librdkafka_refusal(settings: Mapping[str, Any], timeout_s: float = 10.0) -> Any:
    """The first error librdkafka reports (its error callback) for a producer with
    ``settings`` that cannot connect."""
    import time

    from confluent_kafka import Producer

    errors: list[Any] = []
    producer = Producer({**settings, "error_cb": errors.append})
    deadline = time.monotonic() + timeout_s
    while not errors and time.monotonic() < deadline:
        producer.poll(0.05)
    assert errors, "librdkafka reported no error"
    return errors[0]


def send_request(sock: Any, request: Any, response_type: type[Any], correlation: int = 1) -> Any:
    """Send one kio ``request`` on a blocking socket and read its ``response_type`` answer;
    ConnectionError when the server closed the connection instead."""
    import io
    import struct

    from kio.serial import entity_reader, entity_writer

    kind = type(request)
    buffer = io.BytesIO()
    header_type = kind.__header_schema__
    entity_writer(header_type)(buffer, header_type(
        request_api_key=kind.__api_key__, request_api_version=kind.__version__,
        correlation_id=correlation, client_id="secure-test"))
    entity_writer(kind)(buffer, request)
    body = buffer.getvalue()
    sock.sendall(struct.pack(">i", len(body)) + body)
    frame = read_frame(sock)
    header, offset = entity_reader(response_type.__header_schema__)(frame, 0)
    assert header.correlation_id == correlation
    return entity_reader(response_type)(frame, offset)[0]


def read_frame(sock: Any) -> bytes:
    """One size-prefixed frame; ConnectionError at the end of the stream."""
    import struct

    def exactly(n: int) -> bytes:
        data = b""
        while len(data) < n:
            chunk = sock.recv(n - len(data))
            if not chunk:
                raise ConnectionError("the server closed the connection")
            data += chunk
        return data

    (size,) = struct.unpack(">i", exactly(4))
    return exactly(size)


def kafka_python_round_trip(bootstrap: str, topic: str,
                            settings: Mapping[str, Any]) -> list[bytes]:
    """Three records produced to partition 0 of ``topic`` by kafka-python with ``settings``,
    then consumed back from the beginning."""
    producer = KafkaProducer(bootstrap_servers=bootstrap, **settings)
    try:
        for i in range(3):
            producer.send(topic, f"record-{i}".encode()).get(timeout=15)
    finally:
        producer.close()
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, consumer_timeout_ms=5000,
                             enable_auto_commit=False, **settings)
    try:
        consumer.assign([KpTopicPartition(topic, 0)])
        consumer.seek_to_beginning()
        return [message.value for _, message in zip(range(3), consumer, strict=False)]
    finally:
        consumer.close()


def librdkafka_round_trip(bootstrap: str, topic: str,
                          settings: Mapping[str, Any]) -> list[bytes]:
    """The same through librdkafka (confluent-kafka)."""
    producer = Producer({"bootstrap.servers": bootstrap, **settings})
    for i in range(3):
        producer.produce(topic, f"record-{i}".encode())
    assert producer.flush(15) == 0
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"{topic}-group",
                         "enable.auto.commit": False, **settings})
    consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
    values: list[bytes] = []
    try:
        deadline = time.monotonic() + 15
        while len(values) < 3 and time.monotonic() < deadline:
            message = consumer.poll(0.2)
            if message is not None:
                assert message.error() is None, message.error()
                values.append(message.value())
    finally:
        consumer.close()
    return values
