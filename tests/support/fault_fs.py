"""The one fault-injecting fsspec filesystem of the tests, and the remote storage plugin that
serves it, so a test can make the tier fail, hang, be slow or lose bytes, and see what tierlog
does about it.

Two modes, one class (:class:`FaultFS`, local storage underneath):

- **object store**: ``faultfs://<absolute path>`` is a registered fsspec protocol that is not
  "file", so the tier publishes objects as on S3 (one write, no rename). Served by the remote
  storage "fsspec", which builds its tier from any fsspec URL exactly as the real plugins do.
- **local directory**: ``FaultFS(inner)`` wraps a filesystem and mirrors its protocol, so over
  ``LocalFileSystem`` the tier publishes by rename as on a local disk. Served by the remote
  storage "faulty" for ``faulty://<absolute path>`` URLs.

Faults are armed on a :class:`Faults` (the served filesystems share :data:`FAULTS`): without
``nth`` a fault hits every call of the method until ``heal``; with ``nth`` only that call
(counted from now). A hang blocks the call on an Event until ``release()``, bounded by a
timeout that raises, so a broken test fails instead of hanging; nothing here polls or sleeps
to wait for a test.
"""

from __future__ import annotations

import contextlib
import threading
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import fsspec
from fsspec.implementations.local import LocalFileSystem
from fsspec.spec import AbstractFileSystem

from tierlog.hookspecs import hookimpl
from tierlog.plugin_manager import get_plugins
from tierlog.remote import FsspecRemoteStorageManager

PROTOCOL = "faultfs"
#: How long a hang nobody releases waits before its call raises TimeoutError.
HANG_LIMIT_S = 60.0


class InjectedFault(ConnectionError):
    """What an injected failure raises unless the test chose another exception."""


@dataclass
class Hang:
    """Hung calls wait for ``release()`` (at most ``timeout``, then they raise TimeoutError).
    ``entered`` is set once a call waits; ``wait_entered()`` waits for one more call each time.
    With ``where``, only the calls whose path contains it hang."""

    where: str | None = None
    timeout: float = HANG_LIMIT_S
    released: threading.Event = field(default_factory=threading.Event)
    entered: threading.Event = field(default_factory=threading.Event)
    _waiting: threading.Semaphore = field(default_factory=lambda: threading.Semaphore(0),
                                          repr=False)

    def release(self) -> None:
        self.released.set()

    def wait_entered(self, timeout: float = 10.0) -> bool:
        """True once one more call has started waiting on this hang."""
        return self._waiting.acquire(timeout=timeout)

    def hold(self, method: str, path: Any) -> None:
        """Called by the filesystem: wait here if this hang applies to ``path``."""
        if self.where is not None and self.where not in str(path):
            return
        if self.released.is_set():
            return
        self.entered.set()
        self._waiting.release()
        if not self.released.wait(self.timeout):
            raise TimeoutError(f"{PROTOCOL}: injected hang of {method} on {path} was not "
                               f"released within {self.timeout}s")


@dataclass
class _Fault:
    """One armed fault: on call ``nth`` of its method only, or on every call when None."""

    nth: int | None = None
    error: BaseException | None = None
    hang: Hang | None = None
    delay: float = 0.0
    keep_bytes: int | None = None
    silent: bool = False


class Faults:
    """What the filesystems reading it do wrong now, per method, and how often each method
    was called (``calls``). Thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.calls: Counter[str] = Counter()
        self._faults: dict[str, list[_Fault]] = {}

    # -- arming ---------------------------------------------------------------------------

    def fail(self, method: str, *, nth: int | None = None,
             error: BaseException | None = None) -> None:
        """Calls of ``method`` raise ``error`` (an :class:`InjectedFault`)."""
        self._arm(method, _Fault(nth, error=error or InjectedFault(f"injected {method} failure")))

    def hang(self, method: str, *, nth: int | None = None, where: str | None = None,
             timeout: float = HANG_LIMIT_S) -> Hang:
        """Calls of ``method`` (on a path containing ``where``, when given) wait until the
        Hang is released, then run."""
        hang = Hang(where, timeout)
        self._arm(method, _Fault(nth, hang=hang))
        return hang

    def slow(self, method: str, seconds: float, *, nth: int | None = None) -> None:
        """Calls of ``method`` take ``seconds`` longer (the filesystem is slow)."""
        self._arm(method, _Fault(nth, delay=seconds))

    def truncate_upload(self, *, nth: int = 1, keep_bytes: int = 100) -> None:
        """The ``nth`` ``put_file`` writes only its first ``keep_bytes`` bytes and then fails,
        like a connection cut mid-upload."""
        self._arm("put_file", _Fault(nth, keep_bytes=keep_bytes))

    def short_write(self, method: str = "put_file", *, nth: int = 1,
                    keep_bytes: int = 100) -> None:
        """The ``nth`` ``put_file`` or ``pipe_file`` writes only its first ``keep_bytes`` bytes
        and reports success: a filesystem that loses the rest without saying so."""
        self._arm(method, _Fault(nth, keep_bytes=keep_bytes, silent=True))

    def heal(self, method: str | None = None) -> None:
        """Disarm the faults of ``method`` (every method when None), releasing its hangs."""
        with self._lock:
            names = [m for m in self._faults if method in (None, m)]
            healed = [fault for name in names for fault in self._faults.pop(name)]
        for fault in healed:
            if fault.hang is not None:
                fault.hang.release()

    def reset(self) -> None:
        """Heal everything and forget the call counts."""
        self.heal()
        with self._lock:
            self.calls.clear()

    def _arm(self, method: str, fault: _Fault) -> None:
        with self._lock:
            if fault.nth is not None:
                fault.nth += self.calls[method]
            self._faults.setdefault(method, []).append(fault)

    # -- firing ---------------------------------------------------------------------------

    def before(self, method: str, path: Any = "") -> _Fault | None:
        """Count one call of ``method`` on ``path`` and run the faults it hits (a one-call
        fault is spent by it): wait on hangs and delays, raise an error. Returns the
        partial write the filesystem must do instead of the call, if one is armed."""
        with self._lock:
            self.calls[method] += 1
            count = self.calls[method]
            armed = self._faults.get(method, [])
            hits = [f for f in armed if f.nth is None or f.nth == count]
            left = [f for f in armed if f.nth is None or f.nth > count]
            if left:
                self._faults[method] = left
            else:
                self._faults.pop(method, None)
        for fault in hits:
            if fault.hang is not None:
                fault.hang.hold(method, path)
            if fault.delay:
                threading.Event().wait(fault.delay)  # the filesystem is slow, no test waits
            if fault.error is not None:
                raise fault.error
        return next((f for f in hits if f.keep_bytes is not None), None)


#: The faults every served filesystem (``faultfs://``, ``faulty://``) obeys.
FAULTS = Faults()


class FaultFS(AbstractFileSystem):
    """``inner`` (the local filesystem by default) with ``faults`` (:data:`FAULTS` by default)
    injected into the calls tierlog's remote tier makes. Without ``inner`` it is the
    ``faultfs://`` object store; with one it mirrors ``inner``'s protocol."""

    protocol = (PROTOCOL,)
    root_marker = "/"
    cachable = False

    def __init__(self, inner: AbstractFileSystem | None = None, faults: Faults | None = None,
                 **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.inner = inner if inner is not None else LocalFileSystem()
        if inner is not None:
            self.protocol = inner.protocol
        self.faults = faults if faults is not None else FAULTS

    @classmethod
    def _strip_protocol(cls, path: Any) -> str:
        text = str(path)
        for prefix in (PROTOCOL + "://", "file://"):
            text = text.removeprefix(prefix)
        return "/" + text.lstrip("/") if text else ""

    def _call(self, method: str, *args: Any, **kwargs: Any) -> Any:
        partial = self.faults.before(method, args[0] if args else "")
        if partial is not None:
            return self._write_part(method, partial, *args)
        return getattr(self.inner, method)(*args, **kwargs)

    def _write_part(self, method: str, fault: _Fault, *args: Any) -> None:
        """Write the first ``keep_bytes`` of a ``put_file``/``pipe_file``; raise unless the
        fault is silent."""
        assert fault.keep_bytes is not None
        if method == "pipe_file":
            target, data = args[0], bytes(args[1][:fault.keep_bytes])
        else:
            with open(args[0], "rb") as f:
                target, data = args[1], f.read(fault.keep_bytes)
        self.inner.pipe_file(target, data)
        if not fault.silent:
            raise InjectedFault(f"upload to {target} cut after {fault.keep_bytes} bytes")

    def put_file(self, lpath: str, rpath: str, callback: Any = None, **kwargs: Any) -> Any:
        self.inner.makedirs(self.inner._parent(rpath), exist_ok=True)
        return self._call("put_file", lpath, rpath, **kwargs)

    def pipe_file(self, path: str, value: bytes, mode: str = "overwrite", **kwargs: Any) -> Any:
        self.inner.makedirs(self.inner._parent(path), exist_ok=True)
        return self._call("pipe_file", path, value, **kwargs)

    def cat_file(self, path: str, start: int | None = None, end: int | None = None,
                 **kwargs: Any) -> Any:
        return self._call("cat_file", path, start=start, end=end, **kwargs)

    def rm_file(self, path: str) -> Any:
        return self._call("rm_file", path)

    def _rm(self, path: str) -> Any:
        return self.rm_file(path)

    def ls(self, path: str, detail: bool = True, **kwargs: Any) -> Any:
        return self._call("ls", path, detail=detail, **kwargs)

    def info(self, path: str, **kwargs: Any) -> Any:
        return self._call("info", path, **kwargs)

    def makedirs(self, path: str, exist_ok: bool = False) -> Any:
        return self._call("makedirs", path, exist_ok=exist_ok)

    def mv(self, path1: str, path2: str, recursive: bool = False, maxdepth: int | None = None,
           **kwargs: Any) -> Any:
        return self._call("mv", path1, path2, **kwargs)

    def _open(self, path: str, mode: str = "rb", **kwargs: Any) -> Any:
        self.faults.before("open", path)
        if "w" in mode:
            self.inner.makedirs(self.inner._parent(path), exist_ok=True)
        return self.inner._open(path, mode, **kwargs)

    def invalidate_cache(self, path: str | None = None) -> None:
        self.inner.invalidate_cache(path)


fsspec.register_implementation(PROTOCOL, FaultFS, clobber=True)


class FaultStoragePlugin:
    """The remote storages "fsspec" (the tier named by any fsspec URL, so ``faultfs://`` is
    an object store) and "faulty" (``faulty://<path>``: a local directory under FaultFS)."""

    @hookimpl
    def tierlog_register_remote_storage(self, register: Any) -> None:
        def from_fsspec_url(url: str, options: Any) -> FsspecRemoteStorageManager:
            fs, root = fsspec.core.url_to_fs(url, **dict(options))
            fs.makedirs(root, exist_ok=True)
            return FsspecRemoteStorageManager(fs, root)

        def faulty_directory(url: str, options: Any) -> FsspecRemoteStorageManager:
            return FsspecRemoteStorageManager(FaultFS(LocalFileSystem()),
                                              url.removeprefix("faulty://"))

        register("fsspec", from_fsspec_url)
        register("faulty", faulty_directory)


@contextlib.contextmanager
def fault_storage() -> Iterator[Faults]:
    """The remote storages "fsspec" and "faulty" registered for the block; yields
    :data:`FAULTS`, reset before and after."""
    FAULTS.reset()
    host = get_plugins()
    host.register(FaultStoragePlugin(), name="fault-storage-helper")
    try:
        yield FAULTS
    finally:
        host.unregister(name="fault-storage-helper")
        FAULTS.reset()
