"""A fault-injecting fsspec filesystem for tests: wraps another filesystem and makes the Nth
call of a chosen method fail, hang (until released, bounded), cut an upload short or (silently)
write only part of it; and a plugin that serves it as the "faulty" remote storage.
"""

from __future__ import annotations

import contextlib
import threading
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from fsspec.spec import AbstractFileSystem

from tierlog.hookspecs import hookimpl
from tierlog.plugin_manager import get_plugins
from tierlog.remote import FsspecRemoteStorageManager

DEFAULT_HANG_TIMEOUT_S = 10.0


class InjectedFault(ConnectionError):
    """What an injected failure raises unless the test chose another exception."""


@dataclass
class Hang:
    """A hung call: ``entered`` is set when the call starts waiting, ``release()`` lets it run
    (the real call then happens); if nobody releases it within ``timeout`` it raises
    TimeoutError."""

    timeout: float
    entered: threading.Event = field(default_factory=threading.Event)
    released: threading.Event = field(default_factory=threading.Event)

    def release(self) -> None:
        self.released.set()


@dataclass
class _Fault:
    nth: int
    error: BaseException | None = None
    hang: Hang | None = None
    keep_bytes: int | None = None
    silent: bool = False


class FaultyFileSystem(AbstractFileSystem):
    """Delegates the calls tierlog's remote tier makes to ``inner``, counting them per method
    (``calls``), and injects at most one fault per method. Mirrors ``inner.protocol`` so the
    tier publishes objects the same way it would on ``inner``. Thread-safe."""

    cachable = False

    def __init__(self, inner: AbstractFileSystem, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.inner = inner
        self.protocol = inner.protocol
        self.calls: Counter[str] = Counter()
        self._faults: dict[str, _Fault] = {}
        self._lock = threading.Lock()

    # -- arming ---------------------------------------------------------------------------

    def fail(self, method: str, *, nth: int = 1, error: BaseException | None = None) -> None:
        """Make the ``nth`` call (counted from now) of ``method`` raise ``error``."""
        self._arm(method, _Fault(nth, error=error or InjectedFault(f"injected {method} failure")))

    def hang(self, method: str, *, nth: int = 1,
             timeout: float = DEFAULT_HANG_TIMEOUT_S) -> Hang:
        """Make the ``nth`` call of ``method`` wait for ``Hang.release()`` (at most ``timeout``)."""
        hang = Hang(timeout)
        self._arm(method, _Fault(nth, hang=hang))
        return hang

    def truncate_upload(self, *, nth: int = 1, keep_bytes: int = 100) -> None:
        """Make the ``nth`` ``put_file`` write only the first ``keep_bytes`` bytes to its
        destination and then fail, like a connection cut mid-upload."""
        self._arm("put_file", _Fault(nth, keep_bytes=keep_bytes))

    def short_write(self, method: str = "put_file", *, nth: int = 1, keep_bytes: int = 100) -> None:
        """Make the ``nth`` ``put_file`` or ``pipe_file`` write only the first ``keep_bytes``
        bytes and report success: a filesystem that loses the rest without saying so."""
        self._arm(method, _Fault(nth, keep_bytes=keep_bytes, silent=True))

    def _arm(self, method: str, fault: _Fault) -> None:
        with self._lock:
            fault.nth += self.calls[method]
            self._faults[method] = fault

    def _call(self, method: str, *args: Any, **kwargs: Any) -> Any:
        with self._lock:
            self.calls[method] += 1
            fault = self._faults.get(method)
            fire = fault is not None and fault.nth == self.calls[method]
        if fire:
            assert fault is not None
            if fault.error is not None:
                raise fault.error
            if fault.hang is not None:
                fault.hang.entered.set()
                if not fault.hang.released.wait(fault.hang.timeout):
                    raise TimeoutError(f"injected hang of {method} was not released")
            if fault.keep_bytes is not None and fault.silent:
                if method == "pipe_file":
                    self.inner.pipe_file(args[0], bytes(args[1][:fault.keep_bytes]))
                else:
                    with open(args[0], "rb") as f:
                        self.inner.pipe_file(args[1], f.read(fault.keep_bytes))
                return None
            if fault.keep_bytes is not None:
                local_path, remote_path = args[0], args[1]
                with open(local_path, "rb") as f:
                    self.inner.pipe_file(remote_path, f.read(fault.keep_bytes))
                raise InjectedFault(f"upload to {remote_path} cut after {fault.keep_bytes} bytes")
        return getattr(self.inner, method)(*args, **kwargs)

    # -- delegated methods ----------------------------------------------------------------

    def put_file(self, lpath: str, rpath: str, callback: Any = None, **kwargs: Any) -> Any:
        return self._call("put_file", lpath, rpath, **kwargs)

    def pipe_file(self, path: str, value: bytes, mode: str = "overwrite", **kwargs: Any) -> Any:
        return self._call("pipe_file", path, value, **kwargs)

    def cat_file(self, path: str, start: int | None = None, end: int | None = None,
                 **kwargs: Any) -> Any:
        return self._call("cat_file", path, start=start, end=end, **kwargs)

    def rm_file(self, path: str) -> Any:
        return self._call("rm_file", path)

    def ls(self, path: str, detail: bool = True, **kwargs: Any) -> Any:
        return self._call("ls", path, detail=detail, **kwargs)

    def mv(self, path1: str, path2: str, recursive: bool = False, maxdepth: int | None = None,
           **kwargs: Any) -> Any:
        return self._call("mv", path1, path2, **kwargs)

    def makedirs(self, path: str, exist_ok: bool = False) -> Any:
        return self._call("makedirs", path, exist_ok=exist_ok)

    def info(self, path: str, **kwargs: Any) -> Any:
        return self._call("info", path, **kwargs)

    def invalidate_cache(self, path: str | None = None) -> None:
        self.inner.invalidate_cache(path)


class FaultyStoragePlugin:
    """Registers the remote storage "faulty": an FsspecRemoteStorageManager over ``fs``
    (a FaultyFileSystem over the local filesystem), rooted at the path of a ``faulty://`` URL."""

    def __init__(self) -> None:
        import fsspec

        self.fs = FaultyFileSystem(fsspec.filesystem("file"))

    @hookimpl
    def tierlog_register_remote_storage(self, register: Any) -> None:
        register("faulty", lambda url, options: FsspecRemoteStorageManager(
            self.fs, url.removeprefix("faulty://")))


@contextlib.contextmanager
def faulty_storage() -> Iterator[FaultyFileSystem]:
    """The "faulty" remote storage registered for the duration of the block; yields its fs."""
    plugin = FaultyStoragePlugin()
    host = get_plugins()
    host.register(plugin, name="faulty-storage-helper")
    try:
        yield plugin.fs
    finally:
        host.unregister(name="faulty-storage-helper")
