"""``faultfs://``: a real fsspec filesystem (registered with fsspec under its protocol) that
stores objects in the local filesystem and can be told to hang, fail or be slow, for the quota
and timeout tests; and the "fsspec" remote storage plugin, which builds its tier from any
fsspec URL exactly as the real plugins do (``fsspec.core.url_to_fs``).

Its protocol is not "file", so the tier publishes objects as on an object store (one write,
no rename). Faults are armed on the shared :data:`FAULTS` (every FaultFS instance reads it):
a hang blocks the calls of a method on an Event until ``release()`` (bounded by a generous
timeout that raises, so a broken test fails instead of hanging); nothing here polls or sleeps
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
HANG_LIMIT_S = 60.0


@dataclass
class Hang:
    """Calls of a method wait for ``release()``; ``entered`` counts the calls now waiting.
    With ``where``, only the calls whose path contains it."""

    where: str | None = None
    released: threading.Event = field(default_factory=threading.Event)
    entered: threading.Semaphore = field(default_factory=lambda: threading.Semaphore(0))

    def release(self) -> None:
        self.released.set()

    def wait_entered(self, timeout: float = 10.0) -> bool:
        """True once one more call has started waiting on this hang."""
        return self.entered.acquire(timeout=timeout)


class Faults:
    """What the FaultFS instances do wrong now, per method. Thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.calls: Counter[str] = Counter()
        self._hangs: dict[str, Hang] = {}
        self._errors: dict[str, BaseException] = {}
        self._delays: dict[str, float] = {}

    def reset(self) -> None:
        with self._lock:
            for hang in self._hangs.values():
                hang.release()
            self._hangs.clear()
            self._errors.clear()
            self._delays.clear()
            self.calls.clear()

    def hang(self, method: str, where: str | None = None) -> Hang:
        """Every call of ``method`` from now on (on a path containing ``where``, when given)
        waits until the Hang is released."""
        hang = Hang(where)
        with self._lock:
            self._hangs[method] = hang
        return hang

    def fail(self, method: str, error: BaseException | None = None) -> None:
        """Every call of ``method`` raises ``error`` (a ConnectionError) until ``heal``."""
        with self._lock:
            self._errors[method] = error or ConnectionError(f"injected {method} failure")

    def slow(self, method: str, seconds: float) -> None:
        """Every call of ``method`` takes ``seconds`` longer (the filesystem is slow)."""
        with self._lock:
            self._delays[method] = seconds

    def heal(self, method: str | None = None) -> None:
        """Stop failing/hanging/slowing ``method`` (every method when None)."""
        with self._lock:
            for table in (self._errors, self._delays):
                for name in [m for m in table if method in (None, m)]:
                    del table[name]
            for name in [m for m in self._hangs if method in (None, m)]:
                self._hangs.pop(name).release()

    def before(self, method: str, path: Any = "") -> None:
        with self._lock:
            self.calls[method] += 1
            hang = self._hangs.get(method)
            error = self._errors.get(method)
            delay = self._delays.get(method)
        if hang is not None and hang.where is not None and hang.where not in str(path):
            hang = None
        if hang is not None and not hang.released.is_set():
            hang.entered.release()
            if not hang.released.wait(HANG_LIMIT_S):
                raise TimeoutError(f"{PROTOCOL}: hang of {method} never released")
        if delay:
            threading.Event().wait(delay)  # the filesystem is slow, the test does not wait
        if error is not None:
            raise error


#: The faults every FaultFS obeys.
FAULTS = Faults()


class FaultFS(AbstractFileSystem):
    """Local storage behind ``faultfs://<absolute path>``, with :data:`FAULTS` injected into
    the calls the remote tier makes."""

    protocol = (PROTOCOL,)
    root_marker = "/"
    cachable = False

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.inner = LocalFileSystem()

    @classmethod
    def _strip_protocol(cls, path: Any) -> str:
        text = str(path)
        if text.startswith(PROTOCOL + "://"):
            text = text[len(PROTOCOL) + 3:]
        return "/" + text.lstrip("/") if text else ""

    def _call(self, method: str, *args: Any, **kwargs: Any) -> Any:
        FAULTS.before(method, args[0] if args else "")
        return getattr(self.inner, method)(*args, **kwargs)

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
        return self.inner.makedirs(path, exist_ok=exist_ok)

    def mv(self, path1: str, path2: str, recursive: bool = False, maxdepth: int | None = None,
           **kwargs: Any) -> Any:
        return self._call("mv", path1, path2, **kwargs)

    def _open(self, path: str, mode: str = "rb", **kwargs: Any) -> Any:
        FAULTS.before("open", path)
        if "w" in mode:
            self.inner.makedirs(self.inner._parent(path), exist_ok=True)
        return self.inner._open(path, mode, **kwargs)

    def invalidate_cache(self, path: str | None = None) -> None:
        self.inner.invalidate_cache(path)


fsspec.register_implementation(PROTOCOL, FaultFS, clobber=True)


class FsspecUrlPlugin:
    """The remote storage "fsspec": the tier named by any fsspec URL."""

    @hookimpl
    def tierlog_register_remote_storage(self, register: Any) -> None:
        def create(url: str, options: Any) -> FsspecRemoteStorageManager:
            fs, root = fsspec.core.url_to_fs(url, **dict(options))
            fs.makedirs(root, exist_ok=True)
            return FsspecRemoteStorageManager(fs, root)
        register("fsspec", create)


@contextlib.contextmanager
def fault_storage() -> Iterator[Faults]:
    """The "fsspec" remote storage registered for the block, FAULTS reset before and after."""
    FAULTS.reset()
    host = get_plugins()
    host.register(FsspecUrlPlugin(), name="fsspec-url-helper")
    try:
        yield FAULTS
    finally:
        host.unregister(name="fsspec-url-helper")
        FAULTS.reset()
