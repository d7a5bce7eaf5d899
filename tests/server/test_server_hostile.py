"""Requests built to take the server down: a length its decoder would allocate (issue 21,
defect 10), a null where none is allowed and a connection left idle (defect 15), against a
real ``tierlog serve``; and the bounds check (tierlog.server.request_bounds) on its own, for
every kio request type."""

from __future__ import annotations

import asyncio
import random
import socket
import struct

import pytest
from kio.index import load_request_schema
from support.hostile_frames import decodes, frame, served_versions, throw
from support.server_process import ServerProcess

from tierlog.errors import MalformedRequestError
from tierlog.records.varint import unsigned_varint
from tierlog.server.request_bounds import check_request


def _kio_requests() -> list[tuple[int, int]]:
    """Every request type kio knows: (API key, version)."""
    found = []
    for key in range(100):
        for version in range(20):
            try:
                load_request_schema(key, version)
            except Exception:  # noqa: BLE001, S112 - kio's loader: no such type
                continue
            found.append((key, version))
    return found


#: connections.max.idle.ms of the server here (every other test keeps its connection busy).
IDLE_MS = 1500


SERVER_CONFIG = {"connections.max.idle.ms": IDLE_MS}


def _exchange(server: ServerProcess, payload: bytes) -> bytes:
    """Send ``payload``; the response (b'' when the server closed the connection)."""
    with socket.create_connection((server.host, server.port), timeout=10) as sock:
        sock.sendall(payload)
        size = sock.recv(4, socket.MSG_WAITALL)
        if len(size) < 4:
            return b""
        return sock.recv(struct.unpack(">i", size)[0], socket.MSG_WAITALL)


def _api_versions_ok(server: ServerProcess) -> bool:
    payload = struct.pack(">hhih", 18, 0, 9, 4) + b"test"
    reply = _exchange(server, struct.pack(">i", len(payload)) + payload)
    return len(reply) > 6 and struct.unpack_from(">ih", reply, 0) == (9, 0)


def _describe_groups_2_35() -> bytes:
    """The issue's frame: a DescribeGroups v5 whose groups array announces 2^35 - 2
    elements (the largest 5-byte varint), 47 bytes in all."""
    header = struct.pack(">hhih", 15, 5, 1, 12) + b"kafka-python" + b"\x00"
    body = unsigned_varint((1 << 35) - 1) + b"\x0bgroup-name" + b"\x00\x00\x00\x00"
    payload = header + body
    return struct.pack(">i", len(payload)) + payload


def test_a_describe_groups_announcing_2_35_groups_closes_only_its_connection(
        server: ServerProcess) -> None:
    data = _describe_groups_2_35()
    assert len(data) == 47
    assert _exchange(server, data) == b""
    assert server.alive() and _api_versions_ok(server)
    lines = [line for line in server.log_text().splitlines() if "DescribeGroupsRequest" in line]
    assert len(lines) == 1, lines
    assert "groups at byte 23: an array of 34359738366 elements" in lines[0]
    assert "Traceback" not in server.log_text()


@pytest.mark.parametrize("field", ["topics", "groups"])
def test_a_null_array_where_the_field_is_not_nullable_is_refused_in_one_line(
        server: ServerProcess, field: str) -> None:
    if field == "topics":  # CreateTopics v5: topics (non-nullable) null, flexible
        body = b"\x00" + struct.pack(">i", 1000) + b"\x00" + b"\x00"
        header = struct.pack(">hhih", 19, 5, 3, 4) + b"test" + b"\x00"
        name = "CreateTopicsRequest v5: topics"
    else:  # DescribeGroups v0: groups (non-nullable) null, legacy int32 -1
        body = struct.pack(">i", -1)
        header = struct.pack(">hhih", 15, 0, 3, 4) + b"test"
        name = "DescribeGroupsRequest v0: groups"
    payload = header + body
    assert _exchange(server, struct.pack(">i", len(payload)) + payload) == b""
    assert server.alive() and _api_versions_ok(server)
    lines = [line for line in server.log_text().splitlines() if name in line]
    assert len(lines) == 1 and "a null array where the field is not nullable" in lines[0]
    assert "Traceback" not in server.log_text()


def test_hostile_lengths_in_every_served_api_and_version_never_stop_the_server(
        server: ServerProcess) -> None:
    versions = served_versions(server.host, server.port)
    assert len(versions) > 100  # every registered API and version
    rng = random.Random(21)
    frames = [frame(key, version, rng, 0.1, correlation_id=i)
              for i, (key, version) in enumerate(versions * 12)]
    tally = asyncio.run(throw(server.host, server.port, frames, concurrency=32, timeout=0.5))
    assert tally.frames == len(frames)
    assert tally.closed > len(frames) // 10  # the malformed ones were refused ...
    assert tally.answered > len(frames) // 10  # ... and the others served
    assert server.alive() and _api_versions_ok(server)
    # No handler failed out of its request (an engine error answered with an error code,
    # UNKNOWN_SERVER_ERROR included, is the handler's answer, not a failure here).
    assert "after an unexpected error" not in server.log_text()


def test_an_idle_connection_is_closed_after_connections_max_idle_ms(
        server: ServerProcess) -> None:
    with socket.create_connection((server.host, server.port)) as idle:
        idle.settimeout(10 * IDLE_MS / 1000)  # bound: the reaper looks every IDLE_MS / 2
        assert idle.recv(1) == b""  # closed by the server, not timed out here
    assert "idle for more than connections.max.idle.ms (1500)" in server.log_text()


# -- the bounds check on its own -----------------------------------------------------------


def test_valid_requests_of_every_kio_type_pass_the_check_and_decode_in_full() -> None:
    rng = random.Random(7)
    kinds = _kio_requests()
    assert len(kinds) > 250
    for key, version in kinds:
        cls = load_request_schema(key, version)
        for _ in range(2):
            data = frame(key, version, rng, 0.0)
            check_request(cls, data[4:])
            assert decodes(key, version, data), (key, version)


@pytest.mark.parametrize(("length", "expected"), [
    ((1 << 35) - 1, "an array of 34359738366 elements needs at least 34359738366 bytes"),
    (1 << 63, "an array of 9223372036854775807 elements needs at least"),
    (1 << 77, "a varint runs past the end of the frame or is too long"),
    (0, "a null array where the field is not nullable"),
])
def test_the_check_names_the_request_field_and_byte(length: int, expected: str) -> None:
    cls = load_request_schema(15, 5)
    payload = struct.pack(">hhih", 15, 5, 1, 1) + b"c\x00" + unsigned_varint(length) + b"\x00" * 4
    with pytest.raises(MalformedRequestError) as caught:
        check_request(cls, payload)
    assert str(caught.value).startswith("malformed DescribeGroupsRequest v5: groups at byte 12")
    assert expected in str(caught.value)


def test_nested_fields_are_named_by_their_path() -> None:
    cls = load_request_schema(1, 4)  # Fetch v4: topics[].partitions[]
    payload = (struct.pack(">hhih", 1, 4, 1, 1) + b"c"
               + struct.pack(">iiiib", -1, 100, 1, 1 << 20, 0)
               + struct.pack(">i", 1) + struct.pack(">h", 1) + b"t"
               + struct.pack(">i", 0x7FFFFFFF))
    with pytest.raises(MalformedRequestError, match=r"topics\[0\]\.partitions at byte 35: "
                                                    r"an array of 2147483647 elements"):
        check_request(cls, payload)
