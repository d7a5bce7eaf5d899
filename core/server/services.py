"""The server's BrokerServices: the engine, this node's identity, the worker pool and the
wake-up of long-polling fetches by appends."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, TypeVar

from tierlog.common.clock import system_time_ms
from tierlog.manager.log_manager import LogManager
from tierlog.server.api.fetch_sessions import FetchSessionCache
from tierlog.server.config import ServerConfig
from tierlog.server.request_stats import RequestStats

if TYPE_CHECKING:
    from tierlog.security.authorizer import Authorizer
    from tierlog.server.replication.node import ClusterNode

_T = TypeVar("_T")


class Services:
    """What the handlers share (a BrokerServices). Lives on the server's event loop."""

    def __init__(self, config: ServerConfig, manager: LogManager, *, workers: int = 8,
                 time_ms: Callable[[], int] = system_time_ms) -> None:
        self.config = config
        self.manager = manager
        self.node_id = config.node_id
        advertised = config.advertised or config.listener
        self.host = advertised.host
        self.port = advertised.port
        self._time_ms = time_ms
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="tierlog-io")
        self._waiters: set[asyncio.Future[None]] = set()
        self._appends = 0
        #: Request times, connections and per-topic produce/fetch counts, for metrics.
        self.request_stats = RequestStats()
        #: The incremental fetch sessions (KIP-227) of every connection, as Kafka's
        #: FetchManager keeps them for the whole broker.
        self.fetch_sessions = FetchSessionCache()
        #: This node's cluster duties when it replicates (``cluster.metadata.url``); None on a
        #: node that is a cluster of one (it leads every partition, as before).
        self.cluster: ClusterNode | None = None
        #: The ACL authorizer (``authorizer.class.name``); None: every request is allowed, as
        #: on a Kafka broker without one.
        self.authorizer: Authorizer | None = None
        #: Each listener's advertised (host, port) by listener name, set once the server
        #: bound them (what Metadata answers a request that came through that listener).
        self.endpoints: dict[str, tuple[str, int]] = {}

    def time_ms(self) -> int:
        return self._time_ms()

    def advertised(self, listener: str) -> tuple[str, int]:
        """The (host, port) this node advertises on ``listener`` (Kafka answers Metadata with
        the endpoints of the listener the request came through); ``host``/``port`` (the first
        listener's) for a listener that advertises nothing."""
        return self.endpoints.get(listener, (self.host, self.port))

    async def run_blocking(self, fn: Callable[[], _T]) -> _T:
        """Run ``fn`` on the worker threads (engine calls that may block on disk or tier)."""
        return await asyncio.get_running_loop().run_in_executor(self._pool, fn)

    @property
    def appends(self) -> int:
        """How many times :meth:`appended` was called: a fetch notes it before it reads, and
        waits only if no append came meanwhile (an append during the read is not missed)."""
        return self._appends

    def appended(self) -> None:
        """Wake every fetch waiting for data (call on the event loop after an append)."""
        self._appends += 1
        waiters, self._waiters = self._waiters, set()
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(None)

    async def wait_appended(self, timeout_s: float, since: int | None = None) -> None:
        """Return at the next append, or after ``timeout_s``; at once when an append came
        after ``since`` (a count of :attr:`appends` read before the caller looked)."""
        if since is not None and since != self._appends:
            return
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.add(waiter)
        try:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(waiter, timeout_s)
        finally:
            self._waiters.discard(waiter)

    def close(self) -> None:
        """Wake waiting fetches and wait for the engine calls running now; queued ones, whose
        requests will never be answered, are dropped (a stop does not wait for them)."""
        self.appended()
        self._pool.shutdown(wait=True, cancel_futures=True)
