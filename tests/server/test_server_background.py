"""BackgroundServer: the protocol server inside a Python program, on its own loop thread."""

from __future__ import annotations

import socket
import threading
from pathlib import Path

import pytest
from kafka import KafkaConsumer, KafkaProducer, TopicPartition

from tierlog import Log
from tierlog.common import filenames
from tierlog.config import LogConfig
from tierlog.errors import ConfigError
from tierlog.server import BackgroundServer


def _threads() -> set[str]:
    return {t.name for t in threading.enumerate()}


def test_serves_on_an_ephemeral_port_and_stops_cleanly(tmp_path: Path) -> None:
    data = tmp_path / "data"
    with BackgroundServer({"log.dirs": str(data),
                           "listeners": "PLAINTEXT://127.0.0.1:0"}) as server:
        host, port = server.bootstrap.split(":")
        assert host == "127.0.0.1" and int(port) > 0
        producer = KafkaProducer(bootstrap_servers=server.bootstrap)
        producer.send("events", value=b"one").get(timeout=30)
        producer.close()
        consumer = KafkaConsumer(bootstrap_servers=server.bootstrap, group_id=None,
                                 consumer_timeout_ms=5000)
        consumer.assign([TopicPartition("events", 0)])
        consumer.seek_to_beginning()
        assert [m.value for m in consumer] == [b"one"]
        consumer.close()
    assert "tierlog-server" not in _threads()
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", int(port)), timeout=5).close()
    assert (data / filenames.CLEAN_SHUTDOWN_FILE).exists()
    with Log.open(data / "events-0", LogConfig({})) as log:
        assert log.log_end_offset == 1


def test_a_bad_setting_is_a_config_error_naming_it_before_anything_starts(
        tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"socket\.request\.max\.bytes"):
        BackgroundServer({"log.dirs": str(tmp_path), "socket.request.max.bytes": "lots"})
    assert "tierlog-server" not in _threads()
