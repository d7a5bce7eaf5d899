"""The produce hot path: the fast ProduceResponse writer and response header equal kio's
serialization, and the rule for appending on the event loop (inline_appends) says no
whenever an append could block."""

from __future__ import annotations

import asyncio
import datetime
import io
import threading
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kio.index import load_response_schema
from kio.schema.errors import ErrorCode
from kio.serial import entity_writer

from tierlog.log.append_plan import LogAppendInfo
from tierlog.log.log import Log
from tierlog.manager.log_manager import LogManager
from tierlog.records import build_batch
from tierlog.records.record import Record
from tierlog.server.api.inline_appends import append_is_nonblocking
from tierlog.server.api.produce_wire import Outcome, encode_produce_response_body
from tierlog.server.config import ServerConfig
from tierlog.server.framing import (
    EncodedResponse,
    decode_request,
    encode_header,
    encode_response,
    make,
    nested,
)
from tierlog.server.server import Server


def _kio_bytes(entity: Any) -> bytes:
    buffer = io.BytesIO()
    entity_writer(type(entity))(buffer, entity)
    return buffer.getvalue()


def _kio_produce_response(version: int, outcomes: list[Outcome]) -> Any:
    """The response as kio objects (how the handler built it before the fast writer)."""
    cls = load_response_schema(0, version)
    topic_t, part_t = (nested(cls, "TopicProduceResponse"),
                       nested(cls, "PartitionProduceResponse"))
    by_topic: dict[str, list[Any]] = {}
    for name, index, result, message in outcomes:
        if isinstance(result, ErrorCode):
            part = make(part_t, index=index, error_code=result, base_offset=-1,
                        log_append_time=None, log_start_offset=-1, record_errors=(),
                        error_message=message)
        else:
            append_time = (None if result.log_append_time < 0 else
                           datetime.datetime.fromtimestamp(result.log_append_time / 1000,
                                                           datetime.UTC))
            part = make(part_t, index=index, error_code=ErrorCode.none,
                        base_offset=result.first_offset, log_append_time=append_time,
                        log_start_offset=result.log_start_offset, record_errors=(),
                        error_message=None)
        by_topic.setdefault(name, []).append(part)
    return make(cls, responses=tuple(make(topic_t, name=n, partition_responses=tuple(ps))
                                     for n, ps in by_topic.items()),
                throttle_time=datetime.timedelta(0))


def _info(first: int, append_time: int, log_start: int) -> LogAppendInfo:
    return LogAppendInfo(first, first, append_time, first, append_time, log_start, 1, 1, 100,
                         False)


_errors = st.sampled_from([ErrorCode.unknown_topic_or_partition, ErrorCode.corrupt_message,
                           ErrorCode.invalid_required_acks, ErrorCode.message_too_large])
_outcome = st.tuples(
    st.sampled_from(["t", "topic-é", "x" * 200]),
    st.integers(0, 2**31 - 1),
    st.one_of(st.builds(_info, st.integers(0, 2**62), st.one_of(st.just(-1),
                                                               st.integers(0, 2**42)),
                        st.integers(0, 2**62)), _errors),
    st.one_of(st.none(), st.text(max_size=300)),
).map(lambda o: (o[0], o[1], o[2], None if isinstance(o[2], LogAppendInfo) else o[3]))


@settings(max_examples=300, deadline=None)
@given(version=st.integers(3, 9), outcomes=st.lists(_outcome, max_size=20))
def test_fast_produce_response_equals_kio(version: int, outcomes: list[Outcome]) -> None:
    assert (encode_produce_response_body(version, outcomes)
            == _kio_bytes(_kio_produce_response(version, outcomes)))


def test_fast_writer_refuses_versions_it_does_not_know() -> None:
    with pytest.raises(ValueError, match="v10"):
        encode_produce_response_body(10, [])


@pytest.mark.parametrize(("api_key", "version"), [(0, 3), (0, 9), (1, 4), (1, 12), (3, 12),
                                                  (18, 0), (18, 3)])
@pytest.mark.parametrize("correlation_id", [0, 7, 2**31 - 1, -5])
def test_response_header_equals_kio(api_key: int, version: int, correlation_id: int) -> None:
    cls = load_response_schema(api_key, version)
    header_type = cls.__header_schema__
    assert encode_header(cls, correlation_id) == _kio_bytes(
        header_type(correlation_id=correlation_id))


def test_an_encoded_response_frames_like_the_kio_object() -> None:
    outcomes: list[Outcome] = [("t", 0, _info(5, -1, 0), None),
                               ("t", 1, ErrorCode.corrupt_message, "bad")]
    for version in (3, 9):
        cls = load_response_schema(0, version)
        fast = encode_response(42, EncodedResponse(
            cls, encode_produce_response_body(version, outcomes)))
        assert fast == encode_response(42, _kio_produce_response(version, outcomes))


def _batch() -> bytes:
    return build_batch([Record(value=b"v" * 100) for _ in range(10)])


def test_plain_appends_are_inline(tmp_path: Path, clock: Any) -> None:
    with Log.open(tmp_path / "t-0", {}, time_ms=clock) as log:
        assert append_is_nonblocking(log, len(_batch()), clock(), clock)


def test_an_fsync_forcing_flush_policy_is_not_inline(tmp_path: Path, clock: Any) -> None:
    with Log.open(tmp_path / "t-0", {"flush.messages": 1}, time_ms=clock) as log:
        assert not append_is_nonblocking(log, len(_batch()), clock(), clock)
    with Log.open(tmp_path / "u-0", {"flush.messages": 1000}, time_ms=clock) as log:
        batch = _batch()
        assert append_is_nonblocking(log, len(batch), clock(), clock)
        while log.log_end_offset < 900:
            log.append(batch)  # 10 records each, no flush below 1000
        # The next append may reach flush.messages: its fsync must not run on the loop.
        assert not append_is_nonblocking(log, len(batch), clock(), clock)


def test_a_roll_due_is_not_inline(tmp_path: Path, clock: Any) -> None:
    batch = _batch()
    with Log.open(tmp_path / "t-0", {"segment.bytes": 4 * len(batch)}, time_ms=clock) as log:
        log.append(batch)
        assert append_is_nonblocking(log, len(batch), clock(), clock)
        log.append(batch)
        log.append(batch)
        assert append_is_nonblocking(log, len(batch), clock(), clock)  # fills it exactly
        log.append(batch)
        assert not append_is_nonblocking(log, len(batch), clock(), clock)  # by size
    with Log.open(tmp_path / "u-0", {"segment.ms": 60_000}, time_ms=clock) as log:
        log.append(build_batch([Record(value=b"v")], now_ms=clock()))
        assert append_is_nonblocking(log, len(batch), clock(), clock)
        clock.advance(61_000)
        assert not append_is_nonblocking(log, len(batch), clock(), clock)  # by age


def test_a_log_locked_by_another_thread_or_closed_is_not_inline(tmp_path: Path,
                                                                clock: Any) -> None:
    log = Log.open(tmp_path / "t-0", {}, time_ms=clock)
    taken, release = threading.Event(), threading.Event()

    def hold() -> None:
        with log.lock:
            taken.set()
            release.wait(30)

    holder = threading.Thread(target=hold)
    holder.start()
    try:
        assert taken.wait(30)
        assert not append_is_nonblocking(log, 100, clock(), clock)
    finally:
        release.set()
        holder.join(30)
    assert append_is_nonblocking(log, 100, clock(), clock)
    log.close()
    assert not append_is_nonblocking(log, 100, clock(), clock)


def _produce_frame(version: int, partitions: int, batch: bytes) -> bytes:
    import sys

    from kio.index import load_request_schema
    from kio.static.primitive import Records as KioRecords
    from kio.static.primitive import i16, i32
    cls = load_request_schema(0, version)
    module = sys.modules[cls.__module__]
    request = cls(transactional_id=None, acks=i16(1), timeout=datetime.timedelta(seconds=5),
                  topic_data=(module.TopicProduceData(name="t", partition_data=tuple(
                      module.PartitionProduceData(index=i32(p), records=KioRecords(batch))
                      for p in range(partitions))),))
    header_type = cls.__header_schema__
    buffer = io.BytesIO()
    entity_writer(header_type)(buffer, header_type(
        request_api_key=i16(0), request_api_version=i16(version), correlation_id=i32(3),
        client_id="test"))
    entity_writer(cls)(buffer, request)
    return buffer.getvalue()


@pytest.mark.parametrize("flush_messages", [None, 1])
def test_produce_answers_the_same_inline_and_on_workers(tmp_path: Path,
                                                        flush_messages: int | None) -> None:
    """Both paths append every partition and answer kio-decodable offsets (flush.messages=1
    takes the worker path, the default the inline one)."""
    overrides = {} if flush_messages is None else {"flush.messages": flush_messages}
    batch = _batch()
    with LogManager.open(tmp_path / "data", {}, start_scheduler=False) as manager:
        manager.create_topic("t", 3, overrides)
        server = Server(ServerConfig.from_properties(
            {"log.dirs": str(tmp_path / "data"), "listeners": "PLAINTEXT://127.0.0.1:0"}),
            manager)

        async def run() -> list[bytes]:
            await server.start()
            try:
                frame = _produce_frame(9, 4, batch)  # partition 3 does not exist
                outs = [await server._handle(frame, 1, "test", "PLAINTEXT", "User:ANONYMOUS")
                        for _ in range(2)]
            finally:
                await server.stop()
            return [o for o in outs if isinstance(o, bytes)]

        outs = asyncio.run(run())
        assert len(outs) == 2
        cls = load_response_schema(0, 9)
        from kio.serial import entity_reader
        _, offset = entity_reader(cls.__header_schema__)(outs[1][4:], 0)
        response, _ = entity_reader(cls)(outs[1][4:], offset)
        parts = {p.index: p for p in response.responses[0].partition_responses}
        for p in range(3):
            assert parts[p].error_code == ErrorCode.none
            assert parts[p].base_offset == 10
            assert manager.log("t", p).log_end_offset == 20
        assert parts[3].error_code == ErrorCode.unknown_topic_or_partition
        assert decode_request(_produce_frame(9, 1, batch)).api_key == 0
