"""A minimal asyncio Kafka client for broker-to-broker requests: one TCP connection, requests
built from kio's message types (generated from Kafka's schemas), answers matched by
correlation id. A follower fetches from its leader with it (Fetch v12, OffsetForLeaderEpoch v4:
both sides are tierlog, so no ApiVersions round trip).

One request at a time per connection (a lock): a follower's fetcher sends one Fetch and waits
for it, as Kafka's replica fetcher does. Every failure, a timeout included, closes the
connection and raises BrokerConnectionError naming the broker, so no later answer is ever
matched to the wrong request; the caller backs off and reconnects.

With a :class:`~tierlog.server.replication.sasl_client.BrokerSecurity` (the inter-broker
listener's), the connection speaks TLS and authenticates with SASL (SaslHandshake v1, then
SaslAuthenticate v2 per token) before its first request.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import itertools
import struct
from typing import Any, TypeVar, cast

from kio.schema.errors import ErrorCode
from kio.schema.sasl_authenticate.v2.request import SaslAuthenticateRequest
from kio.schema.sasl_authenticate.v2.response import SaslAuthenticateResponse
from kio.schema.sasl_handshake.v1.request import SaslHandshakeRequest
from kio.schema.sasl_handshake.v1.response import SaslHandshakeResponse
from kio.serial import entity_reader, entity_writer

from tierlog.errors import BrokerConnectionError, SaslAuthenticationError
from tierlog.server.replication.sasl_client import BrokerSecurity, SaslClient

__all__ = ["DEFAULT_MAX_RESPONSE_BYTES", "BrokerConnection"]

#: The largest answer frame accepted (a fetch answer is bounded by the request's max bytes;
#: this is a guard against a peer announcing a frame it will not send).
DEFAULT_MAX_RESPONSE_BYTES = 64 << 20
_SIZE = struct.Struct(">i")
_R = TypeVar("_R")
_Streams = tuple[asyncio.StreamReader, asyncio.StreamWriter]


def _api(kind: type[Any]) -> tuple[int, int]:
    """The API key and version of a kio message class."""
    return int(kind.__api_key__), int(kind.__version__)


class BrokerConnection:
    """A connection to the broker at ``host:port`` sending requests as ``client_id``; each
    answer awaited at most ``timeout_s`` (Kafka's ``replica.socket.timeout.ms``)."""

    def __init__(self, host: str, port: int, *, client_id: str, timeout_s: float = 30.0,
                 max_response_bytes: int = DEFAULT_MAX_RESPONSE_BYTES,
                 security: BrokerSecurity | None = None) -> None:
        self.host, self.port = host, port
        self.security = security
        self.client_id = client_id
        self.timeout_s = timeout_s
        self.max_response_bytes = max_response_bytes
        self._streams: _Streams | None = None
        self._lock = asyncio.Lock()
        self._correlation = itertools.count(1)

    def __repr__(self) -> str:
        return f"BrokerConnection({self.host}:{self.port})"

    @property
    def connected(self) -> bool:
        return self._streams is not None

    async def send(self, request: object, response_type: type[_R]) -> _R:
        """``request`` (a kio request entity) sent, and its answer, a ``response_type`` (the
        kio response of the same API and version). BrokerConnectionError naming the broker
        and the request on any failure."""
        api_key, version = _api(type(request))
        if _api(response_type) != (api_key, version):
            raise ValueError(f"{response_type.__name__} is not the answer to "
                             f"{type(request).__name__} v{version}")
        what = f"{type(request).__name__} v{version} to {self.host}:{self.port}"
        async with self._lock:
            try:
                return await asyncio.wait_for(self._exchange(request, response_type),
                                              self.timeout_s)
            except (OSError, asyncio.IncompleteReadError, ValueError, EOFError,
                    TimeoutError) as exc:
                await self.close()
                why = f"no answer within {self.timeout_s} s" if isinstance(exc, TimeoutError) \
                    else f"{type(exc).__name__}: {exc}"
                raise BrokerConnectionError(f"{what}: {why}") from exc

    async def _exchange(self, request: object, response_type: type[_R]) -> _R:
        return await self._round_trip(await self._connected(), request, response_type)

    async def _round_trip(self, streams: _Streams, request: object,
                          response_type: type[_R]) -> _R:
        kind: type[Any] = type(request)
        api_key, version = _api(kind)
        reader, writer = streams
        correlation = next(self._correlation)
        buffer = io.BytesIO()
        header_type = kind.__header_schema__
        entity_writer(header_type)(buffer, header_type(
            request_api_key=api_key, request_api_version=version,
            correlation_id=correlation, client_id=self.client_id))
        entity_writer(kind)(buffer, request)
        body = buffer.getvalue()
        writer.write(_SIZE.pack(len(body)) + body)
        await writer.drain()
        (size,) = _SIZE.unpack(await reader.readexactly(_SIZE.size))
        if not 0 < size <= self.max_response_bytes:
            raise ValueError(f"answer frame of {size} bytes (at most "
                             f"{self.max_response_bytes})")
        frame = await reader.readexactly(size)
        answer: type[Any] = response_type
        header, offset = entity_reader(answer.__header_schema__)(frame, 0)
        if header.correlation_id != correlation:
            raise ValueError(f"answer to request {header.correlation_id}, not {correlation}")
        response, _ = entity_reader(answer)(frame, offset)
        return cast(_R, response)

    async def _connected(self) -> _Streams:
        if self._streams is None:
            security = self.security
            context = security.ssl_context if security is not None else None
            self._streams = await asyncio.open_connection(
                self.host, self.port, ssl=context,
                server_hostname=self.host if context is not None else None)
            if security is not None and security.mechanism is not None:
                await self._authenticate(self._streams, security)
        return self._streams

    async def _authenticate(self, streams: _Streams, security: BrokerSecurity) -> None:
        """SaslHandshake, then SaslAuthenticate until the exchange completes;
        SaslAuthenticationError (an OSError: the caller's BrokerConnectionError) naming why."""
        assert security.mechanism is not None
        handshake = await self._round_trip(streams, SaslHandshakeRequest(
            mechanism=security.mechanism), SaslHandshakeResponse)
        if handshake.error_code != ErrorCode.none:
            raise SaslAuthenticationError(
                f"SaslHandshake for {security.mechanism}: {handshake.error_code.name} "
                f"(enabled: {', '.join(handshake.mechanisms)})")
        client = SaslClient(security.mechanism, security.username, security.password)
        challenge = b""
        while (token := client.evaluate(challenge)) is not None:
            answer = await self._round_trip(streams, SaslAuthenticateRequest(auth_bytes=token),
                                            SaslAuthenticateResponse)
            if answer.error_code != ErrorCode.none:
                raise SaslAuthenticationError(
                    f"SaslAuthenticate as {security.username!r} with {security.mechanism}: "
                    f"{answer.error_code.name}: {answer.error_message}")
            challenge = bytes(answer.auth_bytes)
            if client.complete:
                break

    async def close(self) -> None:
        """Close the connection (the next request opens a new one)."""
        streams, self._streams = self._streams, None
        if streams is not None:
            streams[1].close()
            with contextlib.suppress(OSError, asyncio.CancelledError):
                await streams[1].wait_closed()
