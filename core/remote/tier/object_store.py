"""The remote tier as tierlog uses it: an fsspec filesystem under a root path, with object
reads and writes, one table translating vendor errors, request counters and atomic publication.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import logging
import os
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from typing import Any, NamedTuple

import fsspec

from tierlog.common.atomic import fsync_dir
from tierlog.errors import (
    CorruptRecordError,
    MetadataConflictError,
    RemoteResourceNotFoundError,
    RemoteStorageError,
)
from tierlog.remote.tier.layout import PARTIAL_SUFFIX

log = logging.getLogger(__name__)

#: Vendor errors -> tierlog errors, first match wins. s3fs has already turned S3 error codes
#: into builtins ("NoSuchKey" -> FileNotFoundError, "AccessDenied" -> PermissionError, ...);
#: anything else a filesystem raises (botocore connection errors, aiohttp errors) is a
#: storage failure too.
_ERROR_TABLE: tuple[tuple[type[BaseException], type[RemoteStorageError], str], ...] = (
    (FileNotFoundError, RemoteResourceNotFoundError, "not found"),
    (PermissionError, RemoteStorageError, "permission denied"),
    (TimeoutError, RemoteStorageError, "timed out"),
    (Exception, RemoteStorageError, "failed"),
)

REQUEST_KINDS = ("puts", "gets", "heads", "deletes", "lists")
#: The lock file of a local object's compare-and-swap, next to it: ``.partial`` hides it from
#: every listing (no scrub or sweep sees it) and no publication uses this name.
LOCK_SUFFIX = ".lock" + PARTIAL_SUFFIX
#: How often a conditional PUT answered 409 (another conditional write of the key in flight)
#: is sent again, and the pause before the n-th resend (n x it).
CONFLICT_RETRIES = 3
CONFLICT_BACKOFF_S = 0.05


@contextlib.contextmanager
def exclusive_lock(lock_path: str) -> Iterator[None]:
    """Hold the exclusive ``flock`` of ``lock_path`` (created if absent): it excludes threads
    of one process and other processes of one machine alike, and the kernel drops it when a
    holder dies. The one lock of a local compare-and-swap (the tier's and the cluster
    store's)."""
    with translate_errors("lock", lock_path):
        fd = os.open(lock_path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        with translate_errors("lock", lock_path):
            fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing the last descriptor of the open file drops the flock


def content_version(data: bytes) -> str:
    """A local object's version: the MD5 of its bytes (what S3 answers as the ETag of a
    single PUT)."""
    return hashlib.md5(data, usedforsecurity=False).hexdigest()


@contextlib.contextmanager
def translate_errors(operation: str, path: str) -> Iterator[None]:
    """Re-raise what a filesystem call raises as RemoteStorageError (or its subclass
    RemoteResourceNotFoundError), naming the operation and the object."""
    try:
        yield
    except RemoteStorageError:
        raise
    except Exception as e:
        for source, target, what in _ERROR_TABLE:
            if isinstance(e, source):
                raise target(f"{operation} {path}: {what}: {type(e).__name__}: {e}") from e
        raise  # unreachable: the last row matches every Exception


def _protocols(fs: fsspec.AbstractFileSystem) -> tuple[str, ...]:
    return (fs.protocol,) if isinstance(fs.protocol, str) else tuple(fs.protocol)


def _is_local(fs: fsspec.AbstractFileSystem) -> bool:
    protocols = _protocols(fs)
    return "file" in protocols or "local" in protocols


class RequestStats:
    """How many object requests a tier issued, by kind, and the bytes its GETs returned: the
    one request counter of the writer (``rsm.stats``) and the tier reader (``reader.stats``,
    also named ``tierlog.reader.ReadStats``). One filesystem call counts as one request,
    although a multipart upload is several HTTP requests. Thread-safe.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts = dict.fromkeys(REQUEST_KINDS, 0)
        self._bytes = 0

    def record(self, kind: str, count: int = 1) -> None:
        """Count ``count`` requests of ``kind`` (one of REQUEST_KINDS)."""
        with self._lock:
            self._counts[kind] += count

    def record_bytes(self, size: int) -> None:
        """Count ``size`` bytes returned by a GET."""
        with self._lock:
            self._bytes += size

    @property
    def gets(self) -> int:
        return self._counts["gets"]

    @property
    def lists(self) -> int:
        return self._counts["lists"]

    @property
    def bytes(self) -> int:
        """Bytes every GET returned (metadata, indexes, snapshots and ``.log`` ranges)."""
        return self._bytes

    def snapshot(self) -> dict[str, int]:
        """A copy of the counters, e.g. ``{"puts": 7, "gets": 1, "heads": 7, "deletes": 0,
        "lists": 0, "bytes": 512}``."""
        with self._lock:
            return {**self._counts, "bytes": self._bytes}

    @property
    def total(self) -> int:
        """Requests of every kind."""
        with self._lock:
            return sum(self._counts.values())

    def reset(self) -> None:
        with self._lock:
            self._counts = dict.fromkeys(REQUEST_KINDS, 0)
            self._bytes = 0

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.snapshot()})"


class RemoteTier:
    """Objects under ``root`` on an fsspec filesystem.

    Publication is atomic: on an object store one PUT (or a completed multipart upload) is; on
    a local or NFS directory (protocol "file", or ``rename_on_publish=True``) each object is
    written to ``<name>.partial`` and renamed, so a crash never leaves a complete-looking short
    object. Every write is verified: the stored size must be the size written (one ``info``,
    counted as a head), else RemoteStorageError names the object, before it is renamed into
    place and before the caller commits any metadata for it. Durability (fsync) is the filesystem's
    job: the local plugin's filesystem does it. ``put_options``/``get_options`` are passed to
    ``fs.put_file``/``fs.pipe_file`` and ``fs.cat_file`` (e.g. s3fs ``chunksize``,
    ``max_concurrency``). Requests are counted in ``stats`` (a RequestStats of its own unless one is
    shared, as a reader's splits share theirs). With ``ranged_reads`` a whole-object read is sent as
    the range ``bytes=0-``, so that object stores answer it with one GET and no HEAD (the reader's
    choice). Thread-safe when the filesystem is (local and s3fs are).
    """

    def __init__(
        self,
        fs: fsspec.AbstractFileSystem,
        root: str,
        *,
        put_options: Mapping[str, Any] | None = None,
        get_options: Mapping[str, Any] | None = None,
        rename_on_publish: bool | None = None,
        stats: RequestStats | None = None,
        ranged_reads: bool = False,
    ) -> None:
        self.fs = fs
        self.root = str(fs._strip_protocol(root)).rstrip("/")
        if not self.root:
            raise ValueError(f"remote tier root {root!r} is empty")
        self.put_options = dict(put_options or {})
        self.get_options = dict(get_options or {})
        self.rename_on_publish = _is_local(fs) if rename_on_publish is None else rename_on_publish
        self.stats = stats if stats is not None else RequestStats()
        self.ranged_reads = ranged_reads

    def __repr__(self) -> str:
        return f"RemoteTier({type(self.fs).__name__}, root={self.root!r})"

    def path(self, *parts: str) -> str:
        """The full path of ``root/part/...`` (a part may be a ``tierlog.remote.tier.layout`` key)."""
        return "/".join((self.root, *parts))

    # -- writes ---------------------------------------------------------------------------

    def put_file(self, local_path: str | os.PathLike[str], path: str) -> None:
        """Upload a local file (streamed by the filesystem, not read into memory here)."""
        size = os.path.getsize(local_path)
        with translate_errors("upload to", path):
            self.stats.record("puts")
            self._publish(path, size, lambda target: self.fs.put_file(
                os.fspath(local_path), target, **self.put_options))

    def put_bytes(self, data: bytes, path: str) -> None:
        with translate_errors("write", path):
            self.stats.record("puts")
            self._publish(path, len(data), lambda target: self.fs.pipe_file(
                target, bytes(data), **self.put_options))

    def _publish(self, path: str, size: int, write: Callable[[str], object]) -> None:
        """``write(target)``, check the stored size, and (renaming) move it to ``path``: the one
        place objects are published."""
        if not self.rename_on_publish:
            write(path)
            self._verify_size(path, path, size)
            return
        partial = path + PARTIAL_SUFFIX
        self.fs.makedirs(self.fs._parent(path), exist_ok=True)
        try:
            write(partial)
            self._verify_size(partial, path, size)
            self.fs.mv(partial, path)
        except BaseException:
            with contextlib.suppress(Exception):
                self.fs.rm_file(partial)
            raise

    def _verify_size(self, target: str, path: str, size: int) -> None:
        """RemoteStorageError (naming ``path``) unless ``target`` holds exactly ``size`` bytes: a
        filesystem that silently wrote part of an object must not get it committed."""
        stored = self._stored_size(target)
        if stored != size:
            raise RemoteStorageError(
                f"upload to {path}: the tier holds {stored} of its {size} bytes (a short write);"
                f" not published"
            )

    @property
    def is_local(self) -> bool:
        """Whether the tier is a local (or NFS) directory: published by rename, created
        exclusively by a hard link, read by ``pread``."""
        return _is_local(self.fs)

    @property
    def supports_exclusive_create(self) -> bool:
        """Whether :meth:`put_if_absent` works on this tier's filesystem (an S3-compatible store,
        a local or NFS directory)."""
        return _is_local(self.fs) or "s3" in _protocols(self.fs)

    def put_if_absent(self, data: bytes, path: str) -> bool:
        """Create the small object ``path`` holding ``data`` unless it exists: the tier's
        compare-and-swap (a table commit creates its ``v<N>.metadata.json`` through it).

        True when this call created it, or when it already holds exactly ``data`` (a retried
        PUT whose first attempt landed: identical bytes are ours); False when it holds other
        bytes (another writer won). On S3 and MinIO one PUT with ``If-None-Match: *`` (s3fs
        raises FileExistsError on its 412); on a local or NFS directory a fsynced temporary
        file is hard-linked to ``path`` (``os.link`` never replaces) and the directory fsynced.
        Other filesystems offer no exclusive create: NotImplementedError. A failure whose
        outcome is unknown (a timeout, a 5xx) raises RemoteStorageError: the object may exist.
        """
        local = _is_local(self.fs)
        if not self.supports_exclusive_create:
            raise NotImplementedError(
                f"create {path}: {type(self.fs).__name__} offers no exclusive create (only "
                f"S3-compatible stores and local or NFS directories do)")
        with translate_errors("create", path):
            self.stats.record("puts")
            try:
                if local:
                    self._link_if_absent(bytes(data), self.fs._strip_protocol(path))
                else:
                    self.fs.pipe_file(path, bytes(data), mode="create", **self.put_options)
                return True
            except FileExistsError:
                pass
        return self.get_bytes(path) == data

    def _link_if_absent(self, data: bytes, path: str) -> None:
        """Write ``data`` to a fsynced ``<path>.<uuid>.partial`` and hard-link it to ``path``
        (FileExistsError when ``path`` exists), then fsync the directory."""
        directory = os.path.dirname(path)
        self.fs.makedirs(directory, exist_ok=True)
        partial = f"{path}.{uuid.uuid4().hex}{PARTIAL_SUFFIX}"
        try:
            with open(partial, "xb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            os.link(partial, path)
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(partial)
            fsync_dir(directory)

    # -- compare-and-swap -------------------------------------------------------------

    def read_versioned(self, path: str) -> tuple[bytes, str] | None:
        """A small object's bytes and version (None when it does not exist), in one GET: the
        version :meth:`replace_if` compares (the ETag on S3, the MD5 of the bytes on a local
        or NFS directory)."""
        if not self.is_local and "s3" in _protocols(self.fs):
            from botocore.exceptions import ClientError

            with translate_errors("read", path):
                self.stats.record("gets")
                try:
                    response = self.s3_call(path, "get_object")
                except ClientError as e:
                    if s3_status(e) == 404:
                        return None
                    raise s3_translated(e) from e
            data = bytes(response["Body"])
            self.stats.record_bytes(len(data))
            return data, str(response["ETag"])
        try:
            data = self.get_bytes(path)
        except RemoteResourceNotFoundError:
            return None
        return data, content_version(data)

    def replace_if(self, data: bytes, path: str, expected: str | None) -> str:
        """Write the small object ``path`` if its version is still ``expected`` (None: only
        if it does not exist), and return the new version; MetadataConflictError naming the
        object and both versions when another write came first (nothing stored). On S3 one PUT
        with ``If-Match`` (``If-None-Match: *`` for None); on a local or NFS directory a
        compare and an atomic rename under the ``flock`` of ``<path>.lock.partial``. A failure
        whose outcome is unknown raises RemoteStorageError (re-read to learn it)."""
        if not self.supports_exclusive_create:
            raise NotImplementedError(
                f"replace {path}: {type(self.fs).__name__} offers no compare-and-swap (only "
                f"S3-compatible stores and local or NFS directories do)")
        if expected is None:
            self.put_if_absent(data, path)
            found = self.read_versioned(path)
            if found is None or found[0] != data:
                raise _conflict(path, None, found)
            return found[1]
        if self.is_local:
            local = self.fs._strip_protocol(path)
            with exclusive_lock(local + LOCK_SUFFIX):
                found = self.read_versioned(path)
                if found is None or found[1] != expected:
                    raise _conflict(path, expected, found)
                self.put_bytes(data, path)
            return content_version(data)
        return self._s3_replace(data, path, expected)

    def _s3_replace(self, data: bytes, path: str, expected: str) -> str:
        from botocore.exceptions import ClientError

        for attempt in range(CONFLICT_RETRIES + 1):
            if attempt:
                time.sleep(CONFLICT_BACKOFF_S * attempt)
            with translate_errors("replace (outcome unknown) of", path):
                self.stats.record("puts")
                try:
                    response = self.s3_call(path, "put_object", Body=bytes(data),
                                            IfMatch=expected)
                    return str(response["ETag"])
                except ClientError as e:
                    status, resent = s3_status(e), s3_resent(e)
                    if status not in (404, 409, 412):
                        raise s3_translated(e) from e
            if status == 409 and not resent:
                continue
            found = self.read_versioned(path)
            if resent and found is not None and found[0] == data:
                return found[1]  # an earlier attempt of this PUT landed
            raise _conflict(path, expected, found)
        raise MetadataConflictError(
            f"replace of {path}: the store answered 409 (a concurrent conditional write) "
            f"{CONFLICT_RETRIES + 1} times; nothing stored", key=path, expected=expected,
            found=None)

    def s3_call(self, path: str, method: str, **kwargs: object) -> dict[str, Any]:
        """One call of the S3 client (``get_object``, ``put_object``, ...) on ``path``'s
        bucket and key, on s3fs's event loop, with the filesystem's own request arguments
        (``s3_additional_kwargs``, requester pays) and without s3fs's retries (a caller of a
        conditional write must know whether an attempt was repeated: ``s3_resent``)."""
        from fsspec.asyn import sync

        fs = self.fs
        bucket, key, _ = fs.split_path(path)

        async def call() -> dict[str, Any]:
            await fs.set_session()
            client = await fs.get_s3(bucket)
            call_method = getattr(client, method)
            arguments = fs._get_s3_method_kwargs(call_method, Bucket=bucket, Key=key, **kwargs)
            response: dict[str, Any] = await call_method(**arguments)
            if "Body" in response:
                async with response["Body"] as body:
                    response["Body"] = await body.read()
            return response

        return sync(fs.loop, call)  # type: ignore[no-any-return]

    def delete(self, path: str) -> None:
        """Remove an object; one that does not exist is not an error."""
        with translate_errors("delete", path):
            self.stats.record("deletes")
            with contextlib.suppress(FileNotFoundError):
                self.fs.rm_file(path)
            if self.rename_on_publish:
                with contextlib.suppress(FileNotFoundError):
                    self.fs.rm_file(path + PARTIAL_SUFFIX)

    # -- reads ----------------------------------------------------------------------------

    def get_bytes(self, path: str, start: int | None = None, end: int | None = None) -> bytes:
        """The object's bytes ``[start, end)`` (Python slice bounds; None = its edge), in one
        request. RemoteResourceNotFoundError when the object does not exist."""
        if start is None and self.ranged_reads:
            start = 0
        with translate_errors("read", path):
            self.stats.record("gets")
            if start is None and end is None:
                data = self.fs.cat_file(path, **self.get_options)
            else:
                data = self.fs.cat_file(path, start=start, end=end, **self.get_options)
        self.stats.record_bytes(len(data))
        return bytes(data)

    def get_range(self, path: str, start: int, end: int | None, expected_size: int, *,
                  pooled: bool = False) -> bytes | memoryview:
        """The bytes ``[start, end)`` (``end`` None or past ``expected_size``: to it) of an
        object whose metadata says it holds ``expected_size`` bytes, in one request. Fewer
        bytes than that range (a cut object, a range starting at or past its real end included,
        which object stores refuse as not satisfiable) raise :func:`cut_short_error` with the size
        the object really has (one HEAD); the caller names the object (``BatchOrigin.locate``).
        ``pooled``: on a local tier, a read-only memoryview of a buffer from Arrow's memory pool
        (``pread`` into memory the pool reuses: a 64 MiB segment in ~10 ms, not the ~55 ms of
        page faults a fresh ``bytes`` costs); bytes elsewhere."""
        stop = expected_size if end is None else min(end, expected_size)
        wanted = stop - start
        if wanted <= 0:
            return b""
        try:
            if pooled and _is_local(self.fs):
                data: bytes | memoryview = self._pread_pooled(path, start, stop)
            else:
                data = self.get_bytes(path, start, stop)
        except RemoteStorageError as e:
            if not _range_not_satisfiable(e.__cause__):
                raise
            found = self.size(path)
            if found > start:  # the object reaches the range: not the cut it looked like
                raise
            raise cut_short_error(start, start + wanted, 0, expected_size, found) from e
        if len(data) < wanted:
            raise cut_short_error(start, start + wanted, len(data), expected_size,
                                  self.size(path))
        return data

    def _pread_pooled(self, path: str, start: int, stop: int) -> memoryview:
        """A local object's bytes ``[start, stop)`` (fewer at its end) in an Arrow pool buffer."""
        import pyarrow as pa  # only readers ask for pooled reads, and they have it loaded

        with translate_errors("read", path):
            self.stats.record("gets")
            buffer = pa.allocate_buffer(stop - start)
            got = 0
            with memoryview(buffer) as raw, raw.cast("B") as view, \
                    open(self.fs._strip_protocol(path), "rb", buffering=0) as f:
                while got < len(view) and (n := os.preadv(f.fileno(), [view[got:]],
                                                          start + got)) > 0:
                    got += n
        self.stats.record_bytes(got)
        return memoryview(buffer).cast("B")[:got].toreadonly()

    def size(self, path: str) -> int:
        """The object's size in bytes, by one HEAD; RemoteResourceNotFoundError when it does
        not exist."""
        with translate_errors("stat", path):
            return self._stored_size(path)

    def _stored_size(self, path: str) -> int:
        self.stats.record("heads")
        self.fs.invalidate_cache(path)
        return int(self.fs.info(path).get("size") or 0)

    def list_names(self, directory: str, *, dirs: bool = False) -> list[str]:
        """Sorted base names of the files (or, with ``dirs``, subdirectories) in ``directory``;
        empty when it does not exist. Bypasses the filesystem's listing cache."""
        return [entry.name for entry in self.list_entries(directory, dirs=dirs)]

    def list_entries(self, directory: str, *, dirs: bool = False) -> list[ObjectEntry]:
        """:meth:`list_names` with each object's size and modification time, from the same
        one LIST (sorted by name; ``.partial`` objects left out)."""
        with translate_errors("list", directory):
            self.stats.record("lists")
            self.fs.invalidate_cache(directory)
            try:
                entries = self.fs.ls(directory, detail=True)
            except FileNotFoundError:
                return []
        wanted = "directory" if dirs else "file"
        found = (ObjectEntry(str(e["name"]).rstrip("/").rsplit("/", 1)[-1],
                             int(e.get("size") or 0), modified_ms(e))
                 for e in entries if e.get("type") == wanted)
        return sorted((f for f in found if f.name and not f.name.endswith(PARTIAL_SUFFIX)),
                      key=lambda f: f.name)


def _conflict(path: str, expected: str | None, found: tuple[bytes, str] | None
              ) -> MetadataConflictError:
    version = None if found is None else found[1]
    return MetadataConflictError(
        f"replace of {path} lost: expected {'no object' if expected is None else expected}, "
        f"found {'no object' if found is None else f'version {version}'}", key=path,
        expected=expected, found=version)


def s3_status(error: Any) -> int:  # noqa: ANN401 - a botocore ClientError (optional extra)
    """The HTTP status of a botocore ClientError."""
    return int(error.response.get("ResponseMetadata", {}).get("HTTPStatusCode") or 0)


def s3_resent(error: Any) -> bool:  # noqa: ANN401 - a botocore ClientError (optional extra)
    """Whether botocore sent the request more than once (its retries of a 5xx or timeout)."""
    return int(error.response.get("ResponseMetadata", {}).get("RetryAttempts") or 0) > 0


def s3_translated(error: Any) -> BaseException:  # noqa: ANN401 - a botocore ClientError
    """s3fs's translation of a botocore ClientError into a builtin (NoSuchBucket ->
    FileNotFoundError, AccessDenied -> PermissionError, ...), for translate_errors."""
    from s3fs.errors import translate_boto_error

    return translate_boto_error(error)  # type: ignore[no-any-return]


def cut_short_error(start: int, end: int, got: int, expected: int, found: int
                    ) -> CorruptRecordError:
    """The one error of a ranged read of a ``.log`` object that came back short: the range,
    what it returned, the size the metadata records and the size found (check "size")."""
    return CorruptRecordError(
        f"a read of bytes [{start}, {end}) returned {got}: the object is cut short; expected "
        f"{expected} bytes (its metadata), found {found}", check="size")


def _range_not_satisfiable(error: BaseException | None) -> bool:
    """Whether a read failed because its range starts at or past the object's end (HTTP 416,
    which s3fs raises as ``OSError(EINVAL, "The requested range is not satisfiable")``)."""
    return isinstance(error, OSError) and (error.errno == errno.EINVAL
                                           or "not satisfiable" in str(error))


class ObjectEntry(NamedTuple):
    """One object of a listing: base name, size in bytes, modification time (epoch ms, None
    when the filesystem gives none)."""

    name: str
    size: int
    modified_ms: int | None


def modified_ms(info: Mapping[str, Any]) -> int | None:
    """An fsspec info/listing entry's modification time in epoch ms (local ``mtime``
    seconds, S3 ``LastModified`` datetimes), None when it has none: the one reading of it."""
    value = info.get("mtime", info.get("LastModified", info.get("last_modified")))
    if value is None:
        return None
    if hasattr(value, "timestamp"):
        return int(value.timestamp() * 1000)
    return int(float(value) * 1000)
