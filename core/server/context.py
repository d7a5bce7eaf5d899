"""The contract between the server's network side and every request handler.

A handler is a module-level ``async def handler(owner, ctx: RequestContext, request) ->
response`` (see :mod:`tierlog.server.registry` for how one is registered): ``owner`` is what it
serves from (the :class:`~tierlog.server.services.Services`, a coordinator); ``request`` is a
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

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, TypeAlias, TypeVar

from kio.static.protocol import ResponsePayload

from tierlog.server.framing import EncodedResponse, SplicedResponse, response_class

if TYPE_CHECKING:
    from tierlog.manager.log_manager import LogManager
    from tierlog.server.replication.node import ClusterNode

_T = TypeVar("_T")

#: Kafka's principal of a connection that did not authenticate.
ANONYMOUS = "User:ANONYMOUS"
#: X.500 attribute names as Java's ``X500Principal.getName()`` (RFC 2253) writes them.
_DN_KEYWORDS = {"commonName": "CN", "countryName": "C", "localityName": "L",
                "stateOrProvinceName": "ST", "organizationName": "O",
                "organizationalUnitName": "OU", "streetAddress": "STREET",
                "domainComponent": "DC", "userId": "UID"}
_DN_SPECIAL = frozenset(',+"\\<>;=')


def _dn_value(value: str) -> str:
    escaped = "".join(f"\\{c}" if c in _DN_SPECIAL else c for c in value)
    if escaped[:1] in ("#", " "):
        escaped = "\\" + escaped
    if escaped.endswith(" ") and not escaped.endswith("\\ "):
        escaped = escaped[:-1] + "\\ "
    return escaped


def tls_principal(peercert: Mapping[str, Any] | None) -> str:
    """Kafka's default principal of a TLS connection: ``User:`` and the client certificate's
    subject as an RFC 2253 name (``User:CN=client,O=tierlog``: most specific first, as Java
    writes it), or ``User:ANONYMOUS`` when the client sent no certificate. ``peercert`` is
    what ``SSLObject.getpeercert()`` returns."""
    subject = (peercert or {}).get("subject")
    if not subject:
        return ANONYMOUS
    rdns = ["+".join(f"{_DN_KEYWORDS.get(key, key)}={_dn_value(str(value))}"
                     for key, value in rdn) for rdn in reversed(subject)]
    return "User:" + ",".join(rdns)


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
    #: Who the connection authenticated as, as Kafka names principals (``User:alice``; a
    #: connection without authentication is ``User:ANONYMOUS``, as Kafka's).
    principal: str = ANONYMOUS
    #: The listener the request came through (``PLAINTEXT``, ``SASL_SSL``, a named one).
    listener: str = "PLAINTEXT"


#: What a handler answers (see the module docstring).
HandlerResult: TypeAlias = ResponsePayload | SplicedResponse | EncodedResponse | None

#: A registered handler, bound to its owner. The request is Any here, honestly: the registry
#: dispatches by API key, and the decoded body's class is known only at run time (its
#: version); each handler function declares the union of kio classes it takes.
Handler: TypeAlias = Callable[[RequestContext, Any], Awaitable[HandlerResult]]


def request_context(api_key: int, api_version: int, *, correlation_id: int = 0,
                    client_id: str | None = None, client_host: str = "127.0.0.1",
                    connection_id: int = 0, principal: str = "User:ANONYMOUS",
                    listener: str = "PLAINTEXT") -> RequestContext:
    """The context of one request of ``api_key`` v``api_version`` (its response class
    looked up in kio): what the server builds per request, and what a test of one handler
    builds to call it directly."""
    return RequestContext(api_key, api_version, correlation_id, client_id, client_host,
                          connection_id, response_class(api_key, api_version), principal,
                          listener)


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

    #: This node's cluster duties on a replicating node (``cluster.metadata.url``), else None.
    cluster: ClusterNode | None

    def time_ms(self) -> int: ...

    def appended(self) -> None:
        """Wake the fetches waiting for data (an append, or a marker, may satisfy them)."""
        ...

    def advertised(self, listener: str) -> tuple[str, int]:
        """The (host, port) this node advertises on ``listener``."""
        ...

    async def run_blocking(self, fn: Callable[[], _T]) -> _T:
        """Run ``fn`` on the server's worker threads (engine calls that may block)."""
        ...
