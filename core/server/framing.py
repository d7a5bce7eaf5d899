"""Kafka's request and response framing: a 4-byte size, a header, a body.

Decoding picks the request class by API key and version (kio's message types, generated from
Kafka's schemas) and the header version the class names; encoding writes the response's
header version and its body. A fetch response whose record data are file slices is encoded
around them (:func:`encode_spliced`): the bytes on the wire equal kio's serialization of the
same response with the records inline, and the slices go to the socket with sendfile.
"""

from __future__ import annotations

import dataclasses
import datetime
import io
import os
import struct
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from typing import Any, TypeVar

from kio.index import load_request_schema, load_response_schema
from kio.schema.request_header.v1.header import RequestHeader as RequestHeaderV1
from kio.serial import entity_reader, entity_writer
from kio.static.primitive import Records as KioRecords
from kio.static.protocol import Entity, ResponsePayload

from tierlog.errors import BadRequestError
from tierlog.records.file_records import Records
from tierlog.records.varint import unsigned_varint
from tierlog.server.request_bounds import check_header, check_request

_T = TypeVar("_T")
_E = TypeVar("_E", bound=Entity)
_SIZE = struct.Struct(">i")
_KEY_VERSION = struct.Struct(">hh")
#: Length of the placeholder a spliced response carries in place of each file slice.
MARKER_SIZE = 16


@dataclass(frozen=True, slots=True)
class DecodedRequest:
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    body: Any


def peek_key_version(frame: bytes | memoryview) -> tuple[int, int]:
    """The API key and version at the start of a request frame (BadRequestError if short)."""
    if len(frame) < _KEY_VERSION.size:
        raise BadRequestError(f"a request of {len(frame)} bytes has no header")
    key, version = _KEY_VERSION.unpack_from(frame, 0)
    return int(key), int(version)


def decode_header_v1(frame: bytes | memoryview) -> tuple[int, str | None, int]:
    """Correlation id, client id and the header's length read as header v1 (the part every
    header version shares): enough to answer a request whose version is unsupported."""
    check_header(RequestHeaderV1, frame)
    try:
        header, size = entity_reader(RequestHeaderV1)(frame, 0)
    except Exception as exc:  # noqa: BLE001 - kio, on hostile bytes
        raise BadRequestError(f"undecodable request header: {exc}") from None
    return int(header.correlation_id), header.client_id, size


@cache
def request_class(api_key: int, api_version: int) -> type[Any]:
    return load_request_schema(api_key, api_version)


@cache
def response_class(api_key: int, api_version: int) -> type[Any]:
    return load_response_schema(api_key, api_version)


def decode_request(frame: bytes | memoryview) -> DecodedRequest:
    """Parse header and body of one request frame (without its size prefix).

    BadRequestError for anything kio cannot decode (an unknown key or version, a truncated
    or garbled body); MalformedRequestError, before kio sees the frame, for a length that
    does not fit in it or a null where none is allowed (request_bounds)."""
    api_key, api_version = peek_key_version(frame)
    try:
        cls = request_class(api_key, api_version)
    except Exception:  # noqa: BLE001 - kio, on hostile bytes
        raise BadRequestError(f"unknown API key {api_key} version {api_version}") from None
    check_request(cls, frame)
    try:
        header, offset = entity_reader(cls.__header_schema__)(frame, 0)
        body, _ = entity_reader(cls)(frame, offset)
    except Exception as exc:  # noqa: BLE001 - kio, on hostile bytes
        raise BadRequestError(
            f"undecodable {cls.__name__} v{api_version}: {type(exc).__name__}: {exc}") from None
    # Trailing bytes are ignored, as Kafka's parser ignores them (librdkafka's admin client
    # sends some after a MetadataRequest v12).
    return DecodedRequest(api_key, api_version, int(header.correlation_id), header.client_id,
                          body)


def _serialize(entity_type: type[_E], entity: _E) -> bytes:
    buffer = io.BytesIO()
    entity_writer(entity_type)(buffer, entity)
    return buffer.getvalue()


def encode_header(response_type: type[Any], correlation_id: int) -> bytes:
    """The response header ``response_type`` names: the correlation id, plus an empty
    tagged-field section in the flexible header (v1), as kio writes them."""
    if response_type.__header_schema__.__flexible__:
        return _SIZE.pack(correlation_id) + b"\x00"
    return _SIZE.pack(correlation_id)


def encode_response(correlation_id: int, response: ResponsePayload | EncodedResponse) -> bytes:
    """Size prefix + the response's header (its class names the version) + body."""
    if isinstance(response, EncodedResponse):
        payload = encode_header(response.response_type, correlation_id) + response.body
    else:
        payload = (encode_header(type(response), correlation_id)
                   + _serialize(type(response), response))
    return _SIZE.pack(len(payload)) + payload


@dataclass(frozen=True, slots=True)
class EncodedResponse:
    """A response body a handler serialized itself (the bytes of ``response_type``'s
    schema, no header): a handler may return one instead of a kio response, on a hot path
    where kio's generic writer costs more than the work (Produce)."""

    response_type: type[Any]
    body: bytes


@dataclass(frozen=True, slots=True)
class SplicedResponse:
    """A response whose ``records`` fields hold placeholders (see :func:`new_marker`) to be
    replaced by ``slices[marker]`` on the wire. A handler may return one instead of a kio
    response; the connection writes it with :func:`encode_spliced`."""

    response: ResponsePayload
    slices: Mapping[bytes, Records]


def new_marker() -> KioRecords:
    """A unique placeholder for one partition's records in a spliced response."""
    return KioRecords(os.urandom(MARKER_SIZE))


def _length_prefix(flexible: bool, length: int) -> bytes:
    if not flexible:
        return _SIZE.pack(length)
    return unsigned_varint(length + 1)  # compact bytes: length + 1


def encode_spliced(correlation_id: int, spliced: SplicedResponse) -> list[bytes | Records]:
    """The wire form of a spliced response: a list of byte strings and the Records to send
    between them, whose total equals ``encode_response`` of the response with each
    placeholder replaced by its records' bytes."""
    response = spliced.response
    flexible = bool(type(response).__flexible__)
    raw = encode_response(correlation_id, response)[_SIZE.size:]
    placeholder_prefix = _length_prefix(flexible, MARKER_SIZE)
    found: list[tuple[int, bytes]] = []
    for marker in spliced.slices:
        at = raw.find(marker)
        if at < 0 or raw[at - len(placeholder_prefix):at] != placeholder_prefix:
            raise ValueError("a spliced response lost a placeholder")
        found.append((at, marker))
    found.sort()
    parts: list[bytes | Records] = []
    cursor, total = 0, 0
    for at, marker in found:
        records = spliced.slices[marker]
        head = (raw[cursor:at - len(placeholder_prefix)]
                + _length_prefix(flexible, records.size_in_bytes()))
        parts.append(head)
        parts.append(records)
        total += len(head) + records.size_in_bytes()
        cursor = at + MARKER_SIZE
    tail = raw[cursor:]
    parts.append(tail)
    total += len(tail)
    first = parts[0]
    assert isinstance(first, bytes)
    parts[0] = _SIZE.pack(total) + first
    return parts


_FIELD_NAMES: dict[type[Any], frozenset[str]] = {}


def _field_names(cls: type[Any]) -> frozenset[str]:
    names = _FIELD_NAMES.get(cls)
    if names is None:
        names = _FIELD_NAMES[cls] = frozenset(f.name for f in dataclasses.fields(cls))
    return names


def make(cls: type[_T], **values: object) -> _T:
    """An instance of a kio class of some version from the fields that version has: the
    handlers build one response for every version they serve (``cls`` typed as the union of
    an API's response classes makes the result that union)."""
    names = _field_names(cls)
    return cls(**{k: v for k, v in values.items() if k in names})


_ONE_MS = datetime.timedelta(milliseconds=1)


def duration_ms(value: datetime.timedelta | int) -> int:
    """A kio duration field (a timedelta of whole milliseconds, or an int) as milliseconds,
    exactly: ``total_seconds() * 1000`` lost one for 1001 ms and thousands of other values."""
    if isinstance(value, datetime.timedelta):
        return value // _ONE_MS
    return int(value)


def nested(response_type: type[Any], name: str) -> type[Any]:
    """A nested class (``PartitionData``) of the module that defines ``response_type``."""
    import sys
    cls = getattr(sys.modules[response_type.__module__], name)
    assert isinstance(cls, type)
    return cls


def by_topic(topic_type: type[Any], name_field: str, partitions: Iterable[tuple[str, Any]],
             partitions_field: str = "partitions") -> tuple[Any, ...]:
    """Kafka's topic -> partitions nesting of a response: one ``topic_type`` per topic, in the
    order the topics first appear, holding its partition objects (``partitions`` yields
    ``(topic name, partition object)``); ``name_field`` and ``partitions_field`` are the
    message's field names (``name`` or ``topic``; ``partitions``, ``results_by_partition``)."""
    grouped: dict[str, list[Any]] = {}
    for topic, partition in partitions:
        grouped.setdefault(topic, []).append(partition)
    return tuple(make(topic_type, **{name_field: topic, partitions_field: tuple(parts)})
                 for topic, parts in grouped.items())


def join_parts(parts: Sequence[bytes | Records]) -> bytes:
    """The bytes of :func:`encode_spliced`'s parts (for tests and small responses)."""
    return b"".join(p if isinstance(p, bytes) else p.to_bytes() for p in parts)
