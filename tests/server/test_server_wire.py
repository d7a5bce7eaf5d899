"""The wire layer on its own: the spliced (sendfile) fetch response equals kio's inline
serialization, the error-code home, fetch sessions, and hostile bytes against a real server."""

from __future__ import annotations

import datetime
import socket
import struct
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kio.index import load_request_schema, load_response_schema
from kio.schema.errors import ErrorCode
from kio.serial import entity_writer
from kio.static.primitive import Records as KioRecords
from support.server_process import ServerProcess

from tierlog import errors
from tierlog.config import LogConfig
from tierlog.errors import FetchSessionError
from tierlog.log.log import Log
from tierlog.records.record import Record
from tierlog.server.api.fetch_sessions import FetchSessionCache
from tierlog.server.error_codes import ERROR_CODES, error_code_for
from tierlog.server.framing import (
    SplicedResponse,
    encode_response,
    encode_spliced,
    join_parts,
    make,
    nested,
    new_marker,
)


def _fetch_response(version: int, records: list[KioRecords]) -> object:
    cls = load_response_schema(1, version)
    part_t, topic_t = nested(cls, "PartitionData"), nested(cls, "FetchableTopicResponse")
    parts = tuple(make(part_t, partition_index=i, error_code=ErrorCode.none,
                       high_watermark=10, last_stable_offset=10, log_start_offset=0,
                       aborted_transactions=None, preferred_read_replica=-1, records=r)
                  for i, r in enumerate(records))
    return make(cls, throttle_time=datetime.timedelta(0), error_code=ErrorCode.none,
                session_id=7, responses=(make(topic_t, topic="t", partitions=parts),))


@pytest.mark.parametrize("version", [4, 10, 11, 12])
def test_spliced_fetch_response_equals_kios_inline_serialization(tmp_path: Path,
                                                                 version: int) -> None:
    with Log.open(tmp_path / "t-0", LogConfig({"segment.bytes": 1 << 20})) as log:
        for i in range(50):
            log.append_records([Record(key=b"k%d" % i, value=b"v" * (i * 40))])
        log.roll()
        for _ in range(300):  # a second segment, large enough for a multi-byte varint
            log.append_records([Record(value=b"w" * 100)])
        first = log.read(0, 1 << 20)
        second = log.read(50, 1 << 20)
        assert type(first.data).__name__ == "FileSlice"
        markers = [new_marker(), new_marker()]
        spliced = SplicedResponse(_fetch_response(version, [markers[0], KioRecords(b""),
                                                            markers[1]]),
                                  {bytes(markers[0]): first.data,
                                   bytes(markers[1]): second.data})
        parts = encode_spliced(42, spliced)
        inline = encode_response(42, _fetch_response(version, [
            KioRecords(first.data.to_bytes()), KioRecords(b""),
            KioRecords(second.data.to_bytes())]))
        assert join_parts(parts) == inline
        assert [type(p).__name__ for p in parts] == ["bytes", "FileSlice", "bytes",
                                                     "FileSlice", "bytes"]


@pytest.mark.parametrize("error_type", [
    getattr(errors, name) for name in dir(errors)
    if isinstance(getattr(errors, name), type)
    and issubclass(getattr(errors, name), errors.TierlogError)])
def test_every_tierlog_error_maps_to_a_kafka_code(error_type: type[Exception]) -> None:
    code = error_code_for(error_type.__new__(error_type))
    assert isinstance(code, ErrorCode) and code != ErrorCode.none
    mapped = [k for k in type.mro(error_type) if k in ERROR_CODES]
    assert code == (ERROR_CODES[mapped[0]] if mapped else ErrorCode.unknown_server_error)


@pytest.mark.parametrize("exc, code", [
    (errors.TruncatedBatchError("x"), ErrorCode.corrupt_message),
    (errors.OutOfOrderSequenceError("x"), ErrorCode.out_of_order_sequence_number),
    (errors.ProducerFencedError("x"), ErrorCode.invalid_producer_epoch),
    (errors.RecordBatchTooLargeError("x"), ErrorCode.message_too_large),
    (errors.RemoteStorageError("x"), ErrorCode.kafka_storage_error),
    (errors.TierNotFoundError("x"), ErrorCode.kafka_storage_error),
    (errors.LogClosedError("x"), ErrorCode.not_leader_or_follower),
    # Replication's retriable errors have Kafka's own codes, not KAFKA_STORAGE_ERROR.
    (errors.NotLeaderOrFollowerError("x"), ErrorCode.not_leader_or_follower),
    (errors.NotEnoughReplicasError("x"), ErrorCode.not_enough_replicas),
    (errors.NotEnoughReplicasAfterAppendError("x"), ErrorCode.not_enough_replicas_after_append),
    (errors.FencedPartitionEpochError("x", expected=2, found=1),
     ErrorCode.invalid_update_version),
    (RuntimeError("boom"), ErrorCode.unknown_server_error),
])
def test_error_codes_follow_the_mro(exc: Exception, code: ErrorCode) -> None:
    assert error_code_for(exc) == code


def test_fetch_sessions_follow_kip_227() -> None:
    cache = FetchSessionCache(max_sessions=2)
    full = cache.context(0, 0, [(("t", 0), 5, 100), (("t", 1), 0, 100)], [])
    assert full.session_id > 0 and not full.incremental and len(full.partitions) == 2
    inc = cache.context(full.session_id, 1, [(("t", 1), 9, 100)], [("t", 0)])
    assert inc.incremental and [(tp, s.fetch_offset) for tp, s in inc.partitions] == [
        (("t", 1), 9)]
    with pytest.raises(FetchSessionError) as stale:
        cache.context(full.session_id, 1, [], [])
    assert stale.value.code == ErrorCode.invalid_fetch_session_epoch
    with pytest.raises(FetchSessionError) as unknown:
        cache.context(12345, 1, [], [])
    assert unknown.value.code == ErrorCode.fetch_session_id_not_found
    closed = cache.context(full.session_id, -1, [(("t", 0), 1, 10)], [])
    assert closed.session_id == 0 and len(cache) == 0
    sessionless = cache.context(0, -1, [(("t", 0), 1, 10)], [])
    assert sessionless.session_id == 0 and len(cache) == 0
    for _ in range(3):
        cache.context(0, 0, [], [])
    assert len(cache) == 2  # bounded: the least recently used went first


# -- against a real server -------------------------------------------------------------------


SERVER_CONFIG = {"socket.request.max.bytes": 65536}


def _request(api_key: int, version: int, body: object, correlation_id: int = 1) -> bytes:
    import io
    cls = load_request_schema(api_key, version)
    header_t = cls.__header_schema__
    buf = io.BytesIO()
    entity_writer(header_t)(buf, header_t(request_api_key=api_key, request_api_version=version,
                                          correlation_id=correlation_id, client_id="test"))
    entity_writer(cls)(buf, body)
    return struct.pack(">i", len(buf.getvalue())) + buf.getvalue()


def _exchange(server: ServerProcess, payload: bytes) -> bytes:
    """Send ``payload``; the response bytes (b'' when the server closed the connection)."""
    with socket.create_connection((server.host, server.port), timeout=10) as sock:
        sock.sendall(payload)
        size_bytes = sock.recv(4, socket.MSG_WAITALL)
        if len(size_bytes) < 4:
            return b""
        size = struct.unpack(">i", size_bytes)[0]
        return sock.recv(size, socket.MSG_WAITALL)


def _api_versions_ok(server: ServerProcess) -> bool:
    cls = load_request_schema(18, 3)
    reply = _exchange(server, _request(18, 3, cls(client_software_name="t",
                                                   client_software_version="1")))
    return len(reply) > 6 and struct.unpack_from(">h", reply, 4)[0] == 0


def test_unsupported_api_versions_version_answers_v0_unsupported_version(
        server: ServerProcess) -> None:
    header = struct.pack(">hhih", 18, 99, 7, 4) + b"test" + b"\x00"
    reply = _exchange(server, struct.pack(">i", len(header)) + header)
    correlation_id, error = struct.unpack_from(">ih", reply, 0)
    assert (correlation_id, error) == (7, ErrorCode.unsupported_version.value)
    assert _api_versions_ok(server)


def test_a_request_over_the_limit_closes_only_its_connection(server: ServerProcess) -> None:
    assert _exchange(server, struct.pack(">i", 65537) + b"\x00" * 100) == b""
    assert "over socket.request.max.bytes" in server.log_text()
    assert _api_versions_ok(server)


def test_pipelined_requests_are_answered_in_order(server: ServerProcess) -> None:
    cls = load_request_schema(18, 3)
    body = cls(client_software_name="t", client_software_version="1")
    payload = b"".join(_request(18, 3, body, correlation_id=i) for i in range(20))
    with socket.create_connection((server.host, server.port), timeout=10) as sock:
        sock.sendall(payload)
        seen = []
        for _ in range(20):
            size = struct.unpack(">i", sock.recv(4, socket.MSG_WAITALL))[0]
            seen.append(struct.unpack_from(">i", sock.recv(size, socket.MSG_WAITALL))[0])
    assert seen == list(range(20))


@settings(max_examples=150, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(api_key=st.sampled_from([0, 1, 2, 3, 18, 19, 20, 21, 23, 32, 37, 44, 999]),
       version=st.integers(-2, 20), tail=st.binary(max_size=300))
def test_hostile_bytes_never_crash_the_server(server: ServerProcess, api_key: int, version: int,
                                              tail: bytes) -> None:
    header = struct.pack(">hhi", api_key, version, 1) + tail
    with socket.create_connection((server.host, server.port), timeout=10) as sock:
        sock.sendall(struct.pack(">i", len(header)) + header)
        sock.shutdown(socket.SHUT_WR)
        sock.settimeout(10)
        while sock.recv(65536):
            pass
    assert server.alive()


def test_the_server_still_serves_after_the_fuzzing(server: ServerProcess) -> None:
    assert server.alive() and _api_versions_ok(server)


def test_by_topic_nests_partitions_under_their_topic_in_first_seen_order() -> None:
    from kio.schema.list_offsets.v7.response import (
        ListOffsetsPartitionResponse,
        ListOffsetsTopicResponse,
    )

    from tierlog.server.framing import by_topic, make

    def part(index: int) -> object:
        return make(ListOffsetsPartitionResponse, partition_index=index, error_code=0,
                    timestamp=-1, offset=index, leader_epoch=-1)

    topics = by_topic(ListOffsetsTopicResponse, "name",
                      [("b", part(0)), ("a", part(1)), ("b", part(2))])
    assert [(t.name, [p.partition_index for p in t.partitions]) for t in topics] == [
        ("b", [0, 2]), ("a", [1])]
    assert by_topic(ListOffsetsTopicResponse, "name", []) == ()
