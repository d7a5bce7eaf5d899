"""Server: Kafka's wire protocol on one asyncio event loop over a LogManager.

Each connection is served as Kafka's muted channel serves it: one request decoded, handled
and answered before the next is taken (so responses go out in request order), at most
``socket.request.max.bytes`` buffered per request (see
:class:`~tierlog.server.connection.FramedConnection`: requests that arrived together are
served without a trip through the event loop and answered in one write). A request that cannot be
served (too large, an unknown API key or version, an undecodable body) is logged and its connection
closed; nothing a client sends can stop the server. Blocking engine calls run on the worker
pool of :class:`~tierlog.server.services.Services`.

Every listener of ``listeners`` is bound: SSL and SASL_SSL ones speak TLS (their
``server_context``), SASL ones authenticate each connection first
(:mod:`tierlog.server.sasl_session`). Each request carries its connection's listener and
principal: ``User:<name>`` after SASL, ``User:<certificate DN>`` for a client certificate on
an SSL listener, ``User:ANONYMOUS`` otherwise. Record data goes out with sendfile on a
plain socket and through the TLS transport (read, then written) on a TLS one.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import itertools
import logging
import ssl
import struct

from kio.schema.errors import ErrorCode

from tierlog.cluster.open_store import open_metadata_store
from tierlog.cluster.store import MetadataStore
from tierlog.common.stats import perf_ns
from tierlog.errors import BadRequestError, SaslAuthenticationError
from tierlog.manager.log_manager import LogManager
from tierlog.records.file_records import FileSlice, Records
from tierlog.security.acl_store import AclStore
from tierlog.security.authorizer import Authorizer
from tierlog.security.credentials import ScramCredentialStore
from tierlog.security.listeners import Listener, listener_config
from tierlog.security.tls import server_context
from tierlog.server.api import (
    acls_api,
    admin_configs,
    admin_topics,
    api_versions,
    fetch,
    list_offsets,
    metadata,
    produce,
    sasl_api,
    scram_api,
)
from tierlog.server.config import ServerConfig
from tierlog.server.connection import FramedConnection
from tierlog.server.context import ANONYMOUS, request_context, tls_principal
from tierlog.server.coordinator import coordinators
from tierlog.server.coordinator.coordinators import Coordinators
from tierlog.server.framing import (
    SplicedResponse,
    decode_header_v1,
    decode_request,
    encode_response,
    encode_spliced,
    peek_key_version,
)
from tierlog.server.registry import Registry, register
from tierlog.server.replication.node import ClusterNode
from tierlog.server.request_memory import RequestMemory
from tierlog.server.sasl_session import SaslSession, SaslSessions
from tierlog.server.services import Services

log = logging.getLogger(__name__)

API_VERSIONS_KEY = 18
#: The directory, in a node's first log dir, of its ACLs and SCRAM credentials when it shares
#: no cluster store.
SECURITY_STORE_DIR = "__security"
PRODUCE_KEY = 0
_SIZE = struct.Struct(">i")


class _FileView:
    """What loop.sendfile needs of a file: its descriptor (and a seek it may call)."""

    mode = "rb"

    def __init__(self, fd: int) -> None:
        self._fd = fd

    def fileno(self) -> int:
        return self._fd

    def seek(self, offset: int, whence: int = 0) -> int:
        return offset


#: The API modules whose handlers serve from the Services (ApiVersions serves from the
#: registry, the group and transaction APIs from their coordinators).
SERVICE_APIS = (metadata, produce, fetch, list_offsets, admin_topics, admin_configs,
                acls_api)


def install_handlers(registry: Registry, services: Services) -> Coordinators:
    """Register every API this server answers: its own and the coordinators' (returned, to
    be started and closed by the server)."""
    for api in SERVICE_APIS:
        register(registry, services, api.ENDPOINTS)
    return coordinators.install(registry, services)


class Server:
    """A single-node broker over ``manager``: ``await start()``, then ``await stop()``."""

    def __init__(self, config: ServerConfig, manager: LogManager) -> None:
        self.config = config
        self.manager = manager
        self.services = Services(config, manager)
        self.registry = Registry()
        api_versions.bind(self.registry)
        self._server: asyncio.base_events.Server | None = None
        self._connections: set[asyncio.Task[None]] = set()
        #: queued.max.request.bytes: the request bytes all connections together hold.
        self.request_memory = RequestMemory(config.queued_max_request_bytes)
        #: Each open connection, for the idle reaper (connections.max.idle.ms).
        self._open: dict[FramedConnection, str] = {}
        self._reaper: asyncio.Task[None] | None = None
        self._coordinators: Coordinators | None = None
        self._ids = itertools.count(1)
        self.host = config.listener.host
        self.port = config.listener.port
        #: Each listener's bound (host, port), by listener name, once started.
        self.bound: dict[str, tuple[str, int]] = {}
        self._servers: list[asyncio.base_events.Server] = []
        self._security_store: MetadataStore | None = None
        self._credentials: ScramCredentialStore | None = None
        #: The SASL state of each connection on a SASL listener.
        self.sasl_sessions = SaslSessions(self.services.run_blocking)

    @property
    def coordinators(self) -> Coordinators | None:
        """The group and transaction coordinators once started (None before)."""
        return self._coordinators

    async def start(self) -> None:
        """Bind every listener (port 0: an ephemeral port, then advertised), register the
        handlers, join the cluster and load the coordinators, then accept connections."""
        loop = asyncio.get_running_loop()
        contexts = {listener.name: self._tls_context(listener)
                    for listener in self.config.listeners}
        for listener in self.config.listeners:
            server = await loop.create_server(
                functools.partial(self._new_connection, listener), listener.host or None,
                listener.port, ssl=contexts[listener.name], start_serving=False)
            self._servers.append(server)
            sockname = server.sockets[0].getsockname()
            self.bound[listener.name] = (listener.host, int(sockname[1]))
        self._server = self._servers[0]
        self.host, self.port = self.bound[self.config.listener.name]
        self._advertise()
        if self.config.cluster is not None:
            cluster = ClusterNode(self.services, self.config.cluster)
            self.services.cluster = cluster
            await cluster.start()
        if self.config.authorizer:
            self.services.authorizer = Authorizer.from_config(
                AclStore(self.security_store()), self.config.properties)
        self._coordinators = install_handlers(self.registry, self.services)
        register(self.registry, self.sasl_sessions, sasl_api.ENDPOINTS)
        register(self.registry, scram_api.ScramAdmin(self.services, self.credentials()),
                 scram_api.ENDPOINTS)
        await self._coordinators.start()
        # Accept only now: a client (or another node) that connected earlier would have been
        # answered with a half-registered API table (ApiVersions without Fetch, say).
        for server in self._servers:
            await server.start_serving()
        if self.config.connections_max_idle_ms > 0:
            self._reaper = loop.create_task(self._reap_idle_connections())
        for listener in self.config.listeners:
            host, port = self.bound[listener.name]
            log.info("serving Kafka's protocol on %s %s:%d (advertised %s:%d, node %d)",
                     listener.security_protocol, host, port,
                     *self.services.advertised(listener.name), self.config.node_id)

    def _tls_context(self, listener: Listener) -> ssl.SSLContext | None:
        """The TLS context of an SSL or SASL_SSL listener (ConfigError naming a bad key)."""
        if not listener.security_protocol.endswith("SSL"):
            return None
        return server_context(listener_config(self.config.properties, listener))

    def _advertise(self) -> None:
        """Tell the services what each listener advertises, with a bound port for port 0."""
        bound_names = {listener.name for listener in self.config.listeners}
        for listener in self.config.advertised_listeners:
            if listener.name not in bound_names:
                continue
            port = listener.port or self.bound[listener.name][1]
            self.services.endpoints[listener.name] = (listener.host, port)
        self.services.host, self.services.port = self.services.advertised(
            self.config.listener.name)

    def security_store(self) -> MetadataStore:
        """Where ACLs and SCRAM credentials are kept: the cluster store when nodes share one,
        else a store in this node's first log dir."""
        if self.services.cluster is not None:
            return self.services.cluster.store
        if self._security_store is None:
            self._security_store = open_metadata_store(
                str(self.manager.dirs[0] / SECURITY_STORE_DIR))
        return self._security_store

    def credentials(self) -> ScramCredentialStore:
        """The SCRAM credentials (in :meth:`security_store`)."""
        if self._credentials is None:
            self._credentials = ScramCredentialStore(self.security_store())
        return self._credentials

    async def stop(self) -> None:
        """Stop accepting, close every connection and wait for their tasks."""
        for server in self._servers:
            server.close()
        if self._reaper is not None:
            self._reaper.cancel()
        for task in list(self._connections):
            task.cancel()
        if self._connections:
            await asyncio.gather(*self._connections, return_exceptions=True)
        if self._coordinators is not None:
            await self._coordinators.close()
        if self.services.cluster is not None:
            await self.services.cluster.stop()
        for server in self._servers:
            with contextlib.suppress(Exception):
                await server.wait_closed()
        self.services.close()

    def _new_connection(self, listener: Listener) -> FramedConnection:
        """A protocol for a socket accepted on ``listener``, and the task that serves it."""
        connection = FramedConnection(self.config.max_request_bytes, self.request_memory)
        task = asyncio.get_running_loop().create_task(
            self._serve_connection(connection, listener))
        self._connections.add(task)
        task.add_done_callback(self._connections.discard)
        self.services.request_stats.track_connection(task)
        return connection

    async def _serve_connection(self, connection: FramedConnection,
                                listener: Listener) -> None:
        connection_id = next(self._ids)
        try:
            await connection.made
        except ConnectionError:
            return
        transport = connection.transport
        assert transport is not None
        peer = transport.get_extra_info("peername")
        host = str(peer[0]) if isinstance(peer, tuple) else "unknown"
        name = f"connection {connection_id} from {host} on {listener.name}"
        self._open[connection] = name
        tls = transport.get_extra_info("ssl_object") is not None
        principal = tls_principal(transport.get_extra_info("peercert")) if tls else ANONYMOUS
        session = self._sasl_session(listener, connection_id)
        try:
            while True:
                if not connection.has_frame():
                    await connection.flush()  # answer everything before waiting
                frame = await connection.next_frame()
                started = perf_ns()
                if session is not None:
                    admitted = await self._sasl_admits(connection, session, frame, name)
                    if admitted is None:  # a bare SASL token, answered
                        connection.done_with_frame()
                        continue
                    if not admitted:
                        break
                    principal = session.principal
                if connection.has_pending() and peek_key_version(frame)[0] != PRODUCE_KEY:
                    # Only produce responses wait for the next request's: other handlers
                    # may long-poll (Fetch) or wait for a group, and must not hold them.
                    await connection.flush()
                out = await self._handle(frame, connection_id, host, listener.name, principal)
                if out is not None:
                    await self._write(connection, out, tls=tls)
                connection.done_with_frame()
                self.services.request_stats.request_done(frame, started)
                if session is not None and session.state == "failed":
                    log.info("closing %s: failed authentication (%s)", name, session.failure)
                    await connection.flush()
                    await asyncio.sleep(self.config.failed_authentication_delay_ms / 1000)
                    break
        except (asyncio.IncompleteReadError, asyncio.CancelledError):  # the client left; a stop
            pass
        except ConnectionError as exc:  # the client left, mid-response perhaps: its business
            log.debug("connection %d from %s closed: %r", connection_id, host, exc)
        except BadRequestError as exc:  # FrameTooLargeError too
            log.warning("closing connection %d from %s: %s", connection_id, host, exc)
        except SaslAuthenticationError as exc:  # a bare token after SaslHandshake v0
            log.info("closing %s: failed authentication: %s", name, exc)
        except Exception:
            log.exception("closing connection %d from %s after an unexpected error",
                          connection_id, host)
        finally:
            self._open.pop(connection, None)
            self.sasl_sessions.close(connection_id)
            with contextlib.suppress(Exception):
                await connection.flush()
            transport.close()

    def _sasl_session(self, listener: Listener, connection_id: int) -> SaslSession | None:
        """A new SASL session for a connection on a SASL listener (None on others)."""
        settings = self.config.sasl.get(listener.name)
        if settings is None:
            return None
        session = SaslSession(settings, self.credentials().lookup,
                              reauth_ms=self.config.connections_max_reauth_ms,
                              time_ms=self.services.time_ms)
        self.sasl_sessions.open(connection_id, session)
        return session

    async def _sasl_admits(self, connection: FramedConnection, session: SaslSession,
                           frame: bytes, name: str) -> bool | None:
        """Whether a SASL connection's request may be served (False: close the connection,
        as Kafka does for a request before authentication or after the session expired).
        None: the frame was a bare SASL token (after a SaslHandshake v0: no request header,
        answered bare too; a failure raises SaslAuthenticationError), answered here."""
        if session.raw_tokens and session.expects_token:
            answer = await self.services.run_blocking(lambda: session.evaluate(frame))
            connection.write(_SIZE.pack(len(answer)) + answer)
            return None
        api_key = peek_key_version(frame)[0]
        if session.allows(api_key):
            return True
        why = ("its SASL session expired (connections.max.reauth.ms)" if session.authenticated
               else "it has not authenticated")
        log.info("closing %s: API key %d sent but %s", name, api_key, why)
        return False

    async def _reap_idle_connections(self) -> None:
        """Close connections with no bytes in or out for connections.max.idle.ms, as Kafka's
        selector does (one waiting on the server, a long poll or for request memory, is not
        idle)."""
        idle_s = self.config.connections_max_idle_ms / 1000
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(min(idle_s / 2, 30.0))
            now = loop.time()
            for connection, name in list(self._open.items()):
                if not connection.busy and now - connection.last_active > idle_s:
                    log.info("closing %s: idle for more than connections.max.idle.ms (%d)",
                             name, self.config.connections_max_idle_ms)
                    self._open.pop(connection, None)
                    if connection.transport is not None:
                        connection.transport.close()

    async def _handle(self, frame: bytes, connection_id: int, host: str, listener: str,
                      principal: str) -> bytes | list[bytes | Records] | None:
        api_key, api_version = peek_key_version(frame)
        entry = self.registry.get(api_key)
        if entry is None:
            raise BadRequestError(f"unsupported API key {api_key}")
        if not entry.serves(api_version):
            if api_key == API_VERSIONS_KEY:
                correlation_id, _, _ = decode_header_v1(frame)
                return encode_response(correlation_id, api_versions.response(
                    self.registry, 0, ErrorCode.unsupported_version))
            raise BadRequestError(f"API key {api_key} version {api_version} is not supported "
                                  f"(versions {entry.min_version}-{entry.max_version})")
        request = decode_request(frame)
        ctx = request_context(api_key, api_version, correlation_id=request.correlation_id,
                              client_id=request.client_id, client_host=host,
                              connection_id=connection_id, principal=principal,
                              listener=listener)
        response = await entry.handler(ctx, request.body)
        if response is None:
            return None
        if isinstance(response, SplicedResponse):
            return encode_spliced(request.correlation_id, response)
        return encode_response(request.correlation_id, response)

    async def _write(self, connection: FramedConnection,
                     out: bytes | list[bytes | Records], *, tls: bool = False) -> None:
        if isinstance(out, bytes):
            connection.write(out)  # sent with the next flush: before waiting or sendfile
            return
        loop = asyncio.get_running_loop()
        for part in out:
            if isinstance(part, bytes):
                connection.write(part)
            elif isinstance(part, FileSlice) and part.size > 0 and not tls:
                await connection.flush()
                transport = connection.transport
                assert transport is not None
                if transport.is_closing():  # the client left mid-fetch
                    raise ConnectionResetError("connection closed during a fetch")
                try:
                    sent = await loop.sendfile(transport, _FileView(part.fileno()),  # type: ignore[arg-type]
                                               part.position, part.size, fallback=False)
                except asyncio.SendfileNotAvailableError:
                    # What asyncio raises when the very first os.sendfile fails, a reset by
                    # a client that left included: the transport's own write says which.
                    connection.write(part.to_bytes())
                    continue
                except RuntimeError as exc:  # asyncio's "Transport is closing"
                    if not transport.is_closing():
                        raise
                    raise ConnectionResetError(f"connection closed during a fetch: {exc}") \
                        from None
                if sent != part.size:
                    raise ConnectionError(f"{part} shrank while it was sent")
            else:
                connection.write(part.to_bytes())
        await connection.flush()
