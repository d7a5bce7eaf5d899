"""A loopback TCP proxy in front of one address, whose link the tests cut and heal: the network
between cluster nodes that the Jepsen-style harness partitions (issue 24).

``LinkProxy(host, port)`` listens on 127.0.0.1 (an OS-chosen port) and forwards bytes both ways
between each accepted connection and a new connection to the target. ``cut("reset")`` resets
every open connection and resets new ones as they arrive (a refused link); ``cut("blackhole")``
keeps every connection open but forwards nothing, in either direction, old or new, until
``heal()`` (a partition that drops packets: TCP's retransmissions deliver them once it heals).
One selector thread per proxy does all the socket work; ``cut``, ``heal`` and ``close`` hand it
a command and return once it is applied, so they are safe from any thread.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import selectors
import socket
import struct
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from types import TracebackType
from typing import Literal, Self

log = logging.getLogger(__name__)

CutMode = Literal["reset", "blackhole"]
#: Bytes read per recv call.
_CHUNK = 64 * 1024
#: A direction stops reading its source while this many bytes wait for its destination
#: (back-pressure, as a real link's window).
_BUFFER_LIMIT = 256 * 1024
#: How long a caller waits for the proxy thread to apply a command or to stop.
_COMMAND_TIMEOUT_S = 10.0
_LINGER_RESET = struct.pack("ii", 1, 0)


def _reset(sock: socket.socket) -> None:
    """Close ``sock`` with a TCP RST (SO_LINGER 0), as a reset link does."""
    with contextlib.suppress(OSError):
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, _LINGER_RESET)
    sock.close()


@dataclass(eq=False)
class _Link:
    """One proxied connection: the accepted client socket, the proxy's socket to the target,
    and the bytes waiting in each direction. Owned by the proxy thread."""

    client: socket.socket
    upstream: socket.socket
    connecting: bool = True
    to_upstream: bytearray = field(default_factory=bytearray)
    to_client: bytearray = field(default_factory=bytearray)
    client_eof: bool = False
    upstream_eof: bool = False
    upstream_shut: bool = False
    client_shut: bool = False

    @property
    def finished(self) -> bool:
        """Both sides sent EOF and every byte was delivered."""
        return (self.client_eof and self.upstream_eof and not self.to_client
                and not self.to_upstream)


@dataclass(frozen=True, slots=True)
class ProxyStats:
    """What went through a proxy so far."""

    accepted: int
    """Connections accepted (including those reset at once because the link was cut)."""
    refused: int
    """Connections reset on arrival because the link was cut with ``reset``."""
    reset: int
    """Open connections reset by ``cut("reset")`` or by an error on either side."""
    open: int
    """Connections open now."""
    bytes_to_target: int
    """Bytes delivered from clients to the target."""
    bytes_from_target: int
    """Bytes read from the target (for clients)."""


class LinkProxy:
    """A TCP proxy on 127.0.0.1 in front of ``(target_host, target_port)``; a context manager.

    Thread-safe: ``cut``, ``heal``, ``close`` and ``stats`` may be called from any thread.
    """

    def __init__(self, target_host: str, target_port: int, *, name: str | None = None) -> None:
        self.target = (target_host, target_port)
        self._listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._listener.bind(("127.0.0.1", 0))
        self._listener.listen(128)
        self._listener.setblocking(False)
        self.host, self.port = self._listener.getsockname()[:2]
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._selector = selectors.DefaultSelector()
        self._selector.register(self._listener, selectors.EVENT_READ, None)
        self._selector.register(self._wake_r, selectors.EVENT_READ, None)
        self._registered: dict[socket.socket, int] = {}
        self._links: set[_Link] = set()
        self._mode: CutMode | None = None
        self._lock = threading.Lock()
        self._commands: list[tuple[Callable[[], None], threading.Event]] = []
        self._closed = False
        self._accepted = self._refused = self._resets = 0
        self._to_target = self._from_target = 0
        self._thread = threading.Thread(
            target=self._run, name=name or f"link-proxy-{self.port}->{target_port}", daemon=True)
        self._thread.start()

    # -- the public controls -------------------------------------------------------------

    @property
    def address(self) -> tuple[str, int]:
        """Where clients connect: ``(host, port)``."""
        return self.host, self.port

    @property
    def mode(self) -> CutMode | None:
        """How the link is cut now, or None when it forwards."""
        return self._mode

    def cut(self, mode: CutMode = "reset") -> None:
        """Cut the link. ``reset``: every open connection is reset now and new ones are reset
        on arrival. ``blackhole``: connections stay open (new ones are accepted) but no byte
        moves in either direction until :meth:`heal`."""
        if mode not in ("reset", "blackhole"):
            raise ValueError(f"cut mode {mode!r}: expected 'reset' or 'blackhole'")
        self._call(lambda: self._apply_cut(mode))

    def heal(self) -> None:
        """Forward again: new connections go through, blackholed ones resume where they
        stalled."""
        self._call(self._apply_heal)

    def stats(self) -> ProxyStats:
        """Counters of connections and bytes (a consistent snapshot)."""
        with self._lock:
            return ProxyStats(self._accepted, self._refused, self._resets, len(self._links),
                              self._to_target, self._from_target)

    def close(self) -> None:
        """Stop listening, close every connection (a FIN, bytes in flight are dropped) and stop
        the thread. Idempotent."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        self._wake()
        self._thread.join(_COMMAND_TIMEOUT_S)
        if self._thread.is_alive():
            raise RuntimeError(f"{self._thread.name} did not stop in {_COMMAND_TIMEOUT_S} s")
        self._wake_w.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"LinkProxy({self.host}:{self.port} -> {self.target[0]}:{self.target[1]})"

    # -- commands, applied on the proxy thread -------------------------------------------

    def _call(self, command: Callable[[], None]) -> None:
        done = threading.Event()
        with self._lock:
            if self._closed:
                raise RuntimeError(f"{self!r} is closed")
            self._commands.append((command, done))
        self._wake()
        if not done.wait(_COMMAND_TIMEOUT_S):
            raise RuntimeError(f"{self._thread.name} did not apply a command in "
                               f"{_COMMAND_TIMEOUT_S} s")

    def _wake(self) -> None:
        with contextlib.suppress(OSError):
            self._wake_w.send(b"\0")

    def _apply_cut(self, mode: CutMode) -> None:
        self._mode = mode
        if mode == "reset":
            for link in list(self._links):
                self._drop(link, reset=True)
        log.info("%r cut (%s)", self, mode)

    def _apply_heal(self) -> None:
        self._mode = None
        log.info("%r healed", self)

    # -- the loop ------------------------------------------------------------------------

    def _run(self) -> None:
        try:
            while True:
                with self._lock:
                    commands, self._commands = self._commands, []
                    closing = self._closed
                for command, done in commands:
                    command()
                    done.set()
                if closing:
                    break
                for link in list(self._links):
                    self._register(link)
                for key, mask in self._selector.select():
                    self._dispatch(key, mask)
        except Exception:
            log.exception("%r failed", self)
            raise
        finally:
            for link in list(self._links):
                self._drop(link, reset=False)
            self._selector.close()
            self._listener.close()
            self._wake_r.close()

    def _dispatch(self, key: selectors.SelectorKey, mask: int) -> None:
        if key.fileobj is self._wake_r:
            with contextlib.suppress(BlockingIOError):
                self._wake_r.recv(4096)
        elif key.fileobj is self._listener:
            self._accept()
        else:
            link, side = key.data
            if link not in self._links:
                return  # dropped by an earlier event of this round
            try:
                self._service(link, side, mask)
            except BlockingIOError:
                pass  # a spurious readiness: the next round asks again
            except OSError as exc:
                log.debug("%r: connection failed on the %s side: %s", self, side, exc)
                self._drop(link, reset=True)

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except BlockingIOError:
                return
            with self._lock:
                self._accepted += 1
            if self._mode == "reset":
                with self._lock:
                    self._refused += 1
                _reset(client)
                continue
            client.setblocking(False)
            upstream = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            upstream.setblocking(False)
            code = upstream.connect_ex(self.target)
            if code not in (0, errno.EINPROGRESS):
                with self._lock:
                    self._refused += 1
                upstream.close()
                _reset(client)
                continue
            with self._lock:
                self._links.add(_Link(client, upstream))

    def _register(self, link: _Link) -> None:
        """Ask the selector for exactly what each side of ``link`` can do now."""
        stalled = self._mode is not None
        client_events = upstream_events = 0
        if not stalled:
            if not link.client_eof and len(link.to_upstream) < _BUFFER_LIMIT:
                client_events |= selectors.EVENT_READ
            if link.to_client:
                client_events |= selectors.EVENT_WRITE
            if link.connecting:
                upstream_events = selectors.EVENT_WRITE
            else:
                if not link.upstream_eof and len(link.to_client) < _BUFFER_LIMIT:
                    upstream_events |= selectors.EVENT_READ
                if link.to_upstream:
                    upstream_events |= selectors.EVENT_WRITE
        self._set_events(link.client, client_events, (link, "client"))
        self._set_events(link.upstream, upstream_events, (link, "upstream"))

    def _set_events(self, sock: socket.socket, events: int, data: tuple[_Link, str]) -> None:
        current = self._registered.get(sock, 0)
        if events == current:
            return
        if not events:
            self._selector.unregister(sock)
            del self._registered[sock]
        elif not current:
            self._selector.register(sock, events, data)
            self._registered[sock] = events
        else:
            self._selector.modify(sock, events, data)
            self._registered[sock] = events

    def _service(self, link: _Link, side: str, mask: int) -> None:
        if side == "upstream" and link.connecting:
            code = link.upstream.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
            if code:
                raise OSError(code, f"connecting to {self.target}: {errno.errorcode.get(code)}")
            link.connecting = False
            return
        sock = link.client if side == "client" else link.upstream
        if mask & selectors.EVENT_READ:
            data = sock.recv(_CHUNK)
            if side == "client":
                link.to_upstream += data
                link.client_eof = not data
            else:
                link.to_client += data
                link.upstream_eof = not data
                with self._lock:  # counted as read: a client may see them before a send returns
                    self._from_target += len(data)
        if mask & selectors.EVENT_WRITE:
            pending = link.to_client if side == "client" else link.to_upstream
            sent = sock.send(pending)
            del pending[:sent]
            if side == "upstream":
                with self._lock:
                    self._to_target += sent
        self._pass_eof(link)

    def _pass_eof(self, link: _Link) -> None:
        """Pass a side's EOF on once its bytes are delivered; drop the link when both ended."""
        if link.client_eof and not link.to_upstream and not link.upstream_shut:
            link.upstream.shutdown(socket.SHUT_WR)
            link.upstream_shut = True
        if link.upstream_eof and not link.to_client and not link.client_shut:
            link.client.shutdown(socket.SHUT_WR)
            link.client_shut = True
        if link.finished:
            self._drop(link, reset=False)

    def _drop(self, link: _Link, *, reset: bool) -> None:
        with self._lock:  # counted before the peers can see the link end
            self._links.discard(link)
            if reset:
                self._resets += 1
        for sock in (link.client, link.upstream):
            if self._registered.pop(sock, 0):
                self._selector.unregister(sock)
            if reset:
                _reset(sock)
            else:
                sock.close()
