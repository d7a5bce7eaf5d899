"""Hostile request frames for every API and version, built from kio's schema metadata, and a
client that throws them at a server (tests/test_server_hostile.py, benchmarks/bench_fuzz.py).

:func:`frame` encodes a request of the given type field by field (its own encoder, an oracle
apart from the server's bounds check), with small random values; with probability
``hostile`` each length, count or size instead becomes a hostile one (up to 2^63, encoded as
the field's varint or clipped to its int16/int32), or a null where the field is not nullable,
and the frame ends a few random bytes later. With ``hostile=0`` the frame is a valid request,
which kio decodes in full.

:func:`throw` sends frames, one connection each (a malformed frame closes its connection),
``concurrency`` at a time, and counts what came back.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import random
import struct
import time
import uuid
from dataclasses import dataclass
from typing import Any

from kio.index import load_request_schema, load_response_schema
from kio.serial import entity_reader
from kio.serial._introspect import (
    EntityField,
    EntityTupleField,
    classify_field,
    get_field_tag,
    get_schema_field_type,
    is_optional,
)

from tierlog.records.varint import unsigned_varint
from tierlog.server.request_bounds import FIXED_SIZES

_STRINGS = ("", "a", "fuzz", "t", "__consumer_offsets", "g", "x" * 40)
_INTS = (0, 1, -1, 2, 3, 7, 100, 1000)


class _Stop(Exception):
    """A hostile length was written: the frame ends here."""


def _hostile_length(rng: random.Random) -> int:
    bits = rng.randint(7, 63)
    return (1 << bits) + rng.randint(-3, 3)


@dataclass
class _Encoder:
    rng: random.Random
    hostile: float
    out: bytearray = dataclasses.field(default_factory=bytearray)

    def _hit(self) -> bool:
        return self.hostile > 0 and self.rng.random() < self.hostile

    def length(self, flexible: bool, n: int | None, wide: bool, nullable: bool) -> None:
        """A length prefix for ``n`` items (None: null); maybe a hostile one instead."""
        if self._hit():
            if self.rng.random() < 0.15 and not nullable:
                n = None  # a null where none is allowed
            else:
                value = _hostile_length(self.rng)
                if flexible:
                    self.out += unsigned_varint(value + 1)
                elif wide:
                    self.out += struct.pack(">i", min(value, 0x7FFFFFFF)
                                            if self.rng.random() < 0.8
                                            else -self.rng.randint(2, 1 << 31))
                else:
                    self.out += struct.pack(">h", min(value, 0x7FFF))
                self.out += self.rng.randbytes(self.rng.randint(0, 12))
                raise _Stop
        if flexible:
            self.out += unsigned_varint(0 if n is None else n + 1)
        else:
            self.out += struct.pack(">i" if wide else ">h", -1 if n is None else n)
        if n is None:
            raise _Stop if not nullable else _Continue

    def fixed(self, kafka_type: str) -> None:
        size = FIXED_SIZES[kafka_type]
        if kafka_type == "uuid":
            self.out += uuid.UUID(int=self.rng.getrandbits(128)).bytes
        elif kafka_type == "bool":
            self.out.append(self.rng.randint(0, 1))
        elif kafka_type == "float64":
            self.out += struct.pack(">d", self.rng.random())
        elif kafka_type.startswith("uint"):
            self.out += self.rng.choice((0, 1, 7)).to_bytes(size, "big")
        elif kafka_type in ("datetime_i64",):
            self.out += struct.pack(">q", self.rng.randint(0, 1 << 40))
        else:
            value = self.rng.choice(_INTS)
            self.out += (value if size > 1 else value % 100).to_bytes(size, "big", signed=True)

    def sized(self, flexible: bool, wide: bool, nullable: bool, data: bytes | None) -> None:
        try:
            self.length(flexible, None if data is None else len(data), wide, nullable)
        except _Continue:
            return
        assert data is not None
        self.out += data

    def field(self, entity_type: type[Any], field: dataclasses.Field[Any],
              tagged: bool) -> None:
        flexible = bool(entity_type.__flexible__)
        nullable = False if tagged else is_optional(field)
        kind = classify_field(field)
        if entity_type.__name__ == "RequestHeader" and field.name == "client_id":
            self.sized(False, False, True, b"fuzz")
            return
        is_array = kind.is_array
        count = self.rng.choice((0, 1, 1, 2, 3)) if is_array else 1
        if is_array:
            try:
                self.length(flexible, None if nullable and self.rng.random() < 0.1 else count,
                            True, nullable)
            except _Continue:
                return
        for _ in range(count):
            if isinstance(kind, (EntityField, EntityTupleField)):
                if isinstance(kind, EntityField) and nullable:
                    self.out.append(1)  # KIP-893's not-null marker
                self.entity(kind.type_)
                continue
            kafka_type = get_schema_field_type(field)
            if kafka_type in FIXED_SIZES:
                self.fixed(kafka_type)
            elif kafka_type == "string":
                value = None if nullable and not is_array and self.rng.random() < 0.1 \
                    else self.rng.choice(_STRINGS).encode()
                self.sized(flexible, False, nullable and not is_array, value)
            else:  # bytes, records
                self.sized(flexible, True, nullable and not is_array,
                           self.rng.randbytes(self.rng.randint(0, 40)))

    def entity(self, entity_type: type[Any]) -> None:
        tagged = []
        for field in dataclasses.fields(entity_type):
            tag = get_field_tag(field)
            if tag is None:
                self.field(entity_type, field, False)
            else:
                tagged.append((int(tag), field))
        if not entity_type.__flexible__:
            return
        chosen = [t for t in sorted(tagged, key=lambda t: t[0]) if self.rng.random() < 0.3]
        self.out += unsigned_varint(len(chosen))
        for tag, field in chosen:
            inner = _Encoder(self.rng, self.hostile)
            try:
                inner.field(entity_type, field, True)
            finally:
                self.out += unsigned_varint(tag)
                if self._hit():
                    self.out += unsigned_varint(_hostile_length(self.rng)) + inner.out
                    raise _Stop
                self.out += unsigned_varint(len(inner.out)) + inner.out


class _Continue(Exception):
    """A null was written where it is allowed: nothing follows the length."""


def frame(api_key: int, version: int, rng: random.Random, hostile: float,
          correlation_id: int = 1) -> bytes:
    """A size-prefixed request frame of ``api_key`` ``version`` (see the module docstring)."""
    cls = load_request_schema(api_key, version)
    encoder = _Encoder(rng, hostile)
    encoder.out += struct.pack(">hhi", api_key, version, correlation_id)
    try:
        encoder.sized(False, False, True, b"fuzz")
        if cls.__header_schema__.__flexible__:
            encoder.out += b"\x00"
        encoder.entity(cls)
    except _Stop:
        pass
    return struct.pack(">i", len(encoder.out)) + bytes(encoder.out)


def decodes(api_key: int, version: int, data: bytes) -> bool:
    """Whether kio decodes the whole body of a frame :func:`frame` built (its header and body
    end exactly at the frame's end)."""
    cls = load_request_schema(api_key, version)
    payload = data[4:]
    _, offset = entity_reader(cls.__header_schema__)(payload, 0)
    _, size = entity_reader(cls)(payload, offset)
    return bool(offset + size == len(payload))


@dataclass
class Tally:
    """What :func:`throw` saw."""

    frames: int = 0
    answered: int = 0
    closed: int = 0
    timed_out: int = 0
    seconds: float = 0.0


async def _one(host: str, port: int, data: bytes, timeout: float, tally: Tally) -> None:
    reader, writer = await asyncio.open_connection(host, port)
    try:
        writer.write(data)
        await writer.drain()
        tally.frames += 1
        try:
            size = await asyncio.wait_for(reader.readexactly(4), timeout)
            await asyncio.wait_for(reader.readexactly(struct.unpack(">i", size)[0]), timeout)
            tally.answered += 1
        except (asyncio.IncompleteReadError, ConnectionError):
            tally.closed += 1
        except TimeoutError:
            tally.timed_out += 1  # a long poll (a fetch's max wait): fine, we hang up
    finally:
        writer.close()
        with contextlib.suppress(ConnectionError):
            await writer.wait_closed()


async def throw(host: str, port: int, frames: list[bytes], *, concurrency: int = 16,
                timeout: float = 2.0) -> Tally:
    """Send each frame on its own connection, ``concurrency`` connections at once."""
    tally = Tally()
    started = time.monotonic()
    queue = iter(frames)

    async def worker() -> None:
        for data in queue:
            await _one(host, port, data, timeout, tally)

    await asyncio.gather(*(worker() for _ in range(concurrency)))
    tally.seconds = time.monotonic() - started
    return tally


def served_versions(host: str, port: int) -> list[tuple[int, int]]:
    """(API key, version) of everything the server's ApiVersions (v0) advertises."""
    import socket
    payload = struct.pack(">hhih", 18, 0, 1, 4) + b"fuzz"
    with socket.create_connection((host, port), timeout=10) as sock:
        sock.sendall(struct.pack(">i", len(payload)) + payload)
        size = struct.unpack(">i", sock.recv(4, socket.MSG_WAITALL))[0]
        body = sock.recv(size, socket.MSG_WAITALL)
    response, _ = entity_reader(load_response_schema(18, 0))(body, 4)
    return [(int(k.api_key), v) for k in response.api_keys
            for v in range(int(k.min_version), int(k.max_version) + 1)]
