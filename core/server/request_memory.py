"""RequestMemory: the bytes of requests every connection together may hold, Kafka's
``queued.max.request.bytes`` memory pool.

``socket.request.max.bytes`` bounds one request; without a total, eight clients each
half-sending a 60 MiB request held 480 MiB. A connection reserves a request's whole size
when its size prefix arrives, before buffering its body, and gives it back once the request
is served (or the connection closes). While the pool is used up, a connection that wants to
start a new request stops reading from its socket (the client waits in its own send buffer)
and is woken, oldest first, as memory comes back. As Kafka's non-strict pool, a reservation
is granted while anything is left, so one request larger than the pool is served alone and
memory stays under the limit plus one request. Runs on the event loop (not thread-safe).
"""

from __future__ import annotations

import collections
import logging
from collections.abc import Callable

log = logging.getLogger(__name__)

#: The server's default ``queued.max.request.bytes``: Kafka's is -1 (unbounded); 256 MiB
#: is two and a half of the largest requests (``socket.request.max.bytes``, 100 MiB).
DEFAULT_QUEUED_MAX_REQUEST_BYTES = 256 * 1024 * 1024


class RequestMemory:
    """A pool of ``limit`` bytes (-1: unbounded) of request buffers."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.used = 0
        self._waiters: collections.OrderedDict[int, Callable[[], None]] = \
            collections.OrderedDict()

    def try_reserve(self, size: int) -> bool:
        """Take ``size`` bytes if anything is left (or the pool is unbounded)."""
        if self.limit >= 0 and self.used >= self.limit:
            return False
        self.used += size
        return True

    def release(self, size: int) -> None:
        """Give back ``size`` bytes and wake waiting connections while memory is left."""
        self.used -= size
        while self._waiters and (self.limit < 0 or self.used < self.limit):
            _, wake = self._waiters.popitem(last=False)
            wake()

    def wait(self, key: int, wake: Callable[[], None]) -> None:
        """Call ``wake`` (once) when memory comes back; ``key`` names the waiter."""
        if key not in self._waiters:
            log.debug("request memory used up (%d of %d bytes): a connection waits",
                      self.used, self.limit)
        self._waiters[key] = wake

    def forget(self, key: int) -> None:
        """Stop waiting (the connection closed)."""
        self._waiters.pop(key, None)
