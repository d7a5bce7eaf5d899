"""Server: Kafka's wire protocol on one asyncio event loop over a LogManager.

Each connection is served as Kafka's muted channel serves it: one request decoded, handled
and answered before the next is taken (so responses go out in request order), at most
``socket.request.max.bytes`` buffered per request (see
:class:`~tierlog.server.connection.FramedConnection`: requests that arrived together are
served without a trip through the event loop and answered in one write). A request that cannot be
served (too large, an unknown API key or version, an undecodable body) is logged and its connection
closed; nothing a client sends can stop the server. Blocking engine calls run on the worker
pool of :class:`~tierlog.server.services.Services`.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging

from kio.schema.errors import ErrorCode

from tierlog.cluster.open_store import open_metadata_store
from tierlog.cluster.store import MetadataStore
from tierlog.common.stats import perf_ns
from tierlog.errors import BadRequestError
from tierlog.manager.log_manager import LogManager
from tierlog.records.file_records import FileSlice, Records
from tierlog.security.acl_store import AclStore
from tierlog.security.authorizer import Authorizer
from tierlog.server.api import (
    admin_configs,
    admin_topics,
    api_versions,
    fetch,
    list_offsets,
    metadata,
    produce,
)
from tierlog.server.config import ServerConfig
from tierlog.server.connection import FramedConnection
from tierlog.server.context import request_context
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
from tierlog.server.services import Services

log = logging.getLogger(__name__)

API_VERSIONS_KEY = 18
#: The directory, in a node's first log dir, of its ACLs and SCRAM credentials when it shares
#: no cluster store.
SECURITY_STORE_DIR = "__security"
PRODUCE_KEY = 0


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
SERVICE_APIS = (metadata, produce, fetch, list_offsets, admin_topics, admin_configs)


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

    @property
    def coordinators(self) -> Coordinators | None:
        """The group and transaction coordinators once started (None before)."""
        return self._coordinators

    async def start(self) -> None:
        """Bind the listener (port 0: an ephemeral port, then advertised) and register the
        handlers."""
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(
            self._new_connection, self.config.listener.host, self.config.listener.port)
        sockname = self._server.sockets[0].getsockname()
        self.port = int(sockname[1])
        if self.config.advertised is None or self.config.advertised.port == 0:
            self.services.port = self.port
        if self.config.cluster is not None:
            cluster = ClusterNode(self.services, self.config.cluster)
            self.services.cluster = cluster
            await cluster.start()
        if self.config.authorizer:
            self.services.authorizer = Authorizer.from_config(
                AclStore(self.security_store()), self.config.properties)
        self._coordinators = install_handlers(self.registry, self.services)
        await self._coordinators.start()
        if self.config.connections_max_idle_ms > 0:
            self._reaper = loop.create_task(self._reap_idle_connections())
        log.info("serving Kafka's protocol on %s:%d (advertised %s:%d, node %d)",
                 self.host, self.port, self.services.host, self.services.port,
                 self.config.node_id)

    def security_store(self) -> MetadataStore:
        """Where ACLs and SCRAM credentials are kept: the cluster store when nodes share one,
        else a store in this node's first log dir."""
        if self.services.cluster is not None:
            return self.services.cluster.store
        return open_metadata_store(str(self.manager.dirs[0] / SECURITY_STORE_DIR))

    async def stop(self) -> None:
        """Stop accepting, close every connection and wait for their tasks."""
        if self._server is not None:
            self._server.close()
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
        if self._server is not None:
            with contextlib.suppress(Exception):
                await self._server.wait_closed()
        self.services.close()

    def _new_connection(self) -> FramedConnection:
        """A protocol for an accepted socket, and the task that serves it."""
        connection = FramedConnection(self.config.max_request_bytes, self.request_memory)
        task = asyncio.get_running_loop().create_task(self._serve_connection(connection))
        self._connections.add(task)
        task.add_done_callback(self._connections.discard)
        self.services.request_stats.track_connection(task)
        return connection

    async def _serve_connection(self, connection: FramedConnection) -> None:
        connection_id = next(self._ids)
        try:
            await connection.made
        except ConnectionError:
            return
        transport = connection.transport
        assert transport is not None
        peer = transport.get_extra_info("peername")
        host = str(peer[0]) if isinstance(peer, tuple) else "unknown"
        self._open[connection] = f"connection {connection_id} from {host}"
        try:
            while True:
                if not connection.has_frame():
                    await connection.flush()  # answer everything before waiting
                frame = await connection.next_frame()
                started = perf_ns()
                if connection.has_pending() and peek_key_version(frame)[0] != PRODUCE_KEY:
                    # Only produce responses wait for the next request's: other handlers
                    # may long-poll (Fetch) or wait for a group, and must not hold them.
                    await connection.flush()
                out = await self._handle(frame, connection_id, host)
                if out is not None:
                    await self._write(connection, out)
                connection.done_with_frame()
                self.services.request_stats.request_done(frame, started)
        except asyncio.IncompleteReadError:
            pass
        except ConnectionError as exc:  # the client left, mid-response perhaps: its business
            log.debug("connection %d from %s closed: %r", connection_id, host, exc)
        except BadRequestError as exc:  # FrameTooLargeError too
            log.warning("closing connection %d from %s: %s", connection_id, host, exc)
        except asyncio.CancelledError:
            pass
        except Exception:
            log.exception("closing connection %d from %s after an unexpected error",
                          connection_id, host)
        finally:
            self._open.pop(connection, None)
            with contextlib.suppress(Exception):
                await connection.flush()
            transport.close()

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

    async def _handle(self, frame: bytes, connection_id: int,
                      host: str) -> bytes | list[bytes | Records] | None:
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
                              connection_id=connection_id)
        response = await entry.handler(ctx, request.body)
        if response is None:
            return None
        if isinstance(response, SplicedResponse):
            return encode_spliced(request.correlation_id, response)
        return encode_response(request.correlation_id, response)

    async def _write(self, connection: FramedConnection,
                     out: bytes | list[bytes | Records]) -> None:
        if isinstance(out, bytes):
            connection.write(out)  # sent with the next flush: before waiting or sendfile
            return
        loop = asyncio.get_running_loop()
        for part in out:
            if isinstance(part, bytes):
                connection.write(part)
            elif isinstance(part, FileSlice) and part.size > 0:
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
