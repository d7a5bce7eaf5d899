"""A server on its own event-loop thread, for Python programs, notebooks and tests that want
Kafka clients to reach their data without running ``tierlog serve`` beside them.

``with BackgroundServer({"log.dirs": "./data", "listeners": "PLAINTEXT://127.0.0.1:0"}) as s``
opens the LogManager over the data dirs (or serves one the caller opened), binds the listener
and returns once it accepts connections (``s.bootstrap`` is ``host:port``); leaving the block
stops the server and closes what it opened (the clean-shutdown marker is written).
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Mapping
from types import TracebackType
from typing import Any, Self

from tierlog.manager.log_manager import LogManager
from tierlog.server.config import ServerConfig
from tierlog.server.server import Server

#: How long start and stop may take before the caller gets a TimeoutError.
STEP_TIMEOUT_S = 60.0


class BackgroundServer:
    """A single-node broker serving ``config`` (Kafka's names, as ``tierlog serve`` takes them)
    on a daemon thread. ``manager``: serve an open LogManager (left open on exit) instead of
    opening ``log.dirs``."""

    def __init__(self, config: Mapping[str, Any], manager: LogManager | None = None) -> None:
        self.config = ServerConfig.from_properties(config)
        self._own_manager = manager is None
        self._manager = manager
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._server: Server | None = None

    @property
    def bootstrap(self) -> str:
        """``host:port`` of the bound listener (the port is the real one when 0 was asked)."""
        if self._server is None:
            raise RuntimeError("the server is not running")
        return f"{self._server.host}:{self._server.port}"

    @property
    def manager(self) -> LogManager:
        if self._manager is None:
            raise RuntimeError("the server is not running")
        return self._manager

    def start(self) -> Self:
        if self._manager is None:
            for directory in self.config.log_dirs:
                directory.mkdir(parents=True, exist_ok=True)
            self._manager = LogManager.open(list(self.config.log_dirs), self.config.manager)
        loop = self._loop = asyncio.new_event_loop()
        self._server = Server(self.config, self._manager)
        self._thread = threading.Thread(target=loop.run_forever, name="tierlog-server",
                                        daemon=True)
        self._thread.start()
        try:
            asyncio.run_coroutine_threadsafe(self._server.start(), loop).result(STEP_TIMEOUT_S)
        except BaseException:
            self.close()
            raise
        return self

    def close(self) -> None:
        """Stop serving, end the loop thread, close the LogManager if this opened it."""
        loop, thread, server = self._loop, self._thread, self._server
        self._loop = self._thread = None
        try:
            if loop is not None and server is not None:
                asyncio.run_coroutine_threadsafe(server.stop(), loop).result(STEP_TIMEOUT_S)
        finally:
            if loop is not None:
                loop.call_soon_threadsafe(loop.stop)
            if thread is not None:
                thread.join(STEP_TIMEOUT_S)
            if loop is not None and not loop.is_running():
                loop.close()
            if self._own_manager and self._manager is not None:
                self._manager.close()
                self._manager = None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()
