"""The contract between the server's network side and every request handler.

A handler is ``async def handler(ctx: RequestContext, request) -> response``: ``request`` is a
decoded kio request object of version ``ctx.api_version``; the handler returns a kio response
object of ``ctx.response_type`` (the same API and version), or None when Kafka sends no
response (Produce with acks=0); on a hot path it may instead return a
:class:`~tierlog.server.framing.SplicedResponse` (record data sent with sendfile) or an
:class:`~tierlog.server.framing.EncodedResponse` (a body it serialized itself). Handlers never
touch sockets. Engine work that may block (fsyncs, segment rolls, reads from the tier, a lock
another thread holds) runs through :meth:`BrokerServices.run_blocking`, never directly on the
event loop; an append that can only write to the page cache may run inline
(:mod:`tierlog.server.api.inline_appends`).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

if TYPE_CHECKING:
    from tierlog.manager.log_manager import LogManager

_T = TypeVar("_T")


@dataclass(frozen=True, slots=True)
class RequestContext:
    """Who sent a request and which version of which API it is."""

    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    #: The peer's address (host) and a per-connection id, e.g. for group member ids.
    client_host: str
    connection_id: int
    #: The kio response class for this API key and version.
    response_type: type[Any]


#: A request handler (see the module docstring).
Handler = Callable[[RequestContext, Any], Awaitable[Any]]


class HandlerRegistry(Protocol):
    """Where handlers are registered by API key with the versions they serve; ApiVersions
    advertises exactly what is registered."""

    def add(self, api_key: int, handler: Handler, *, min_version: int,
            max_version: int) -> None: ...


class BrokerServices(Protocol):
    """What the server offers the coordinators."""

    #: The engine: every topic, including ``__consumer_offsets`` and ``__transaction_state``.
    manager: LogManager
    node_id: int
    #: The advertised host and port of this (only) node.
    host: str
    port: int

    def time_ms(self) -> int: ...

    async def run_blocking(self, fn: Callable[[], _T]) -> _T:
        """Run ``fn`` on the server's worker threads (engine calls that may block)."""
        ...
