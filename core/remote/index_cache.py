"""RemoteIndexCache: remote segments' offset, time and transaction indexes, cached on local disk.

Files live in ``<log dir>/remote-log-index-cache/`` as ``<startOffset>_<uuid>.index|.timeindex|
.txnindex`` (Kafka's names), are fetched one index type at a time on first use, and are evicted
least-recently-used beyond ``remote.log.index.file.cache.total.size.bytes``. A restart reloads them.
"""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tierlog.atomic import atomic_write_bytes
from tierlog.errors import CorruptIndexError, RemoteResourceNotFoundError
from tierlog.index import OffsetIndex, TimeIndex, TransactionIndex
from tierlog.remote.storage import IndexType, RemoteLogSegmentMetadata, RemoteStorageManager

log = logging.getLogger(__name__)

CACHE_DIR_NAME = "remote-log-index-cache"
#: The index types kept here; a file's suffix is its type's object suffix (``.index``, ...).
_KINDS = (IndexType.OFFSET, IndexType.TIMESTAMP, IndexType.TRANSACTION)
_KIND_OF_SUFFIX = {kind.suffix: kind for kind in _KINDS}


def cache_file_name(start_offset: int, segment_id: str, kind: IndexType) -> str:
    """``<startOffset>_<uuid><suffix>``, Kafka's name of a cached remote index."""
    return f"{start_offset}_{segment_id}{kind.suffix}"


def parse_cache_file_name(name: str) -> tuple[int, str, IndexType] | None:
    """``(start offset, segment uuid, index type)`` of a cache file name; None for any
    other name."""
    stem, dot, suffix = name.partition(".")
    start, sep, uuid = stem.partition("_")
    kind = _KIND_OF_SUFFIX.get(dot + suffix)
    if not sep or not start.isdigit() or kind is None:
        return None
    return int(start), uuid, kind


@dataclass(slots=True)
class _Entry:
    """The cached indexes of one remote segment (each opened on first use)."""

    start_offset: int
    indexes: dict[IndexType, Any] = field(default_factory=dict)
    size: int = 0

    def close(self) -> None:
        for index in self.indexes.values():
            index.close()
        self.indexes.clear()


class RemoteIndexCache:
    """A byte-bounded LRU of remote indexes on disk. Thread-safe."""

    def __init__(self, directory: Path, max_bytes: int, rsm: RemoteStorageManager) -> None:
        self.directory = Path(directory)
        self.max_bytes = max_bytes
        self._rsm = rsm
        self._lock = threading.RLock()
        self._entries: OrderedDict[str, _Entry] = OrderedDict()
        self.directory.mkdir(parents=True, exist_ok=True)
        self._reload()

    def _reload(self) -> None:
        """Adopt index files a previous run left (oldest first, so LRU order survives)."""
        files = sorted((p for p in self.directory.iterdir() if p.is_file()),
                       key=lambda p: p.stat().st_mtime)
        for path in files:
            if path.name.endswith(".tmp"):
                path.unlink(missing_ok=True)
                continue
            parsed = parse_cache_file_name(path.name)
            if parsed is None:
                continue
            start, uuid, _ = parsed
            entry = self._entries.setdefault(uuid, _Entry(start))
            entry.size += path.stat().st_size
        log.debug("remote index cache %s: %d segments on disk", self.directory, len(self._entries))

    # -- lookups -------------------------------------------------------------------------

    def offset_index(self, metadata: RemoteLogSegmentMetadata) -> OffsetIndex:
        return self._get(metadata, IndexType.OFFSET)

    def time_index(self, metadata: RemoteLogSegmentMetadata) -> TimeIndex:
        return self._get(metadata, IndexType.TIMESTAMP)

    def transaction_index(self, metadata: RemoteLogSegmentMetadata) -> TransactionIndex | None:
        """The segment's aborted transactions; None when it has none (no request is made for a
        segment whose metadata says its transaction index is empty)."""
        if metadata.txn_idx_empty:
            return None
        return self._get(metadata, IndexType.TRANSACTION)

    def _path(self, metadata: RemoteLogSegmentMetadata, kind: IndexType) -> Path:
        return self.directory / cache_file_name(metadata.start_offset, metadata.segment_id, kind)

    def _get(self, metadata: RemoteLogSegmentMetadata, kind: IndexType) -> Any:
        uuid = metadata.segment_id
        with self._lock:
            entry = self._entries.get(uuid)
            if entry is None:
                entry = self._entries[uuid] = _Entry(metadata.start_offset)
            self._entries.move_to_end(uuid)
            index = entry.indexes.get(kind)
            if index is not None:
                return index
            path = self._path(metadata, kind)
            if not path.exists():
                data = self._fetch(metadata, kind)
                atomic_write_bytes(path, data)
                entry.size += len(data)
            index = self._open(path, metadata, kind)
            entry.indexes[kind] = index
            self._evict()
            return index

    def _fetch(self, metadata: RemoteLogSegmentMetadata, kind: IndexType) -> bytes:
        try:
            with self._rsm.fetch_index(metadata, kind) as stream:
                return stream.read()
        except RemoteResourceNotFoundError:
            if kind is IndexType.TRANSACTION:
                return b""  # a segment copied without a transaction index has no aborts
            raise

    @staticmethod
    def _open(path: Path, metadata: RemoteLogSegmentMetadata, kind: IndexType) -> Any:
        start = metadata.start_offset
        if kind is IndexType.TRANSACTION:
            index: Any = TransactionIndex(path, start)
        elif kind is IndexType.OFFSET:
            index = OffsetIndex(path, start, writable=False)
        else:
            index = TimeIndex(path, start, writable=False)
        try:
            index.sanity_check()
        except CorruptIndexError:
            index.close()
            path.unlink(missing_ok=True)
            raise
        return index

    def _evict(self) -> None:
        total = sum(e.size for e in self._entries.values())
        while total > self.max_bytes and len(self._entries) > 1:
            uuid, entry = self._entries.popitem(last=False)
            entry.close()
            for kind in _KINDS:
                (self.directory / cache_file_name(entry.start_offset, uuid, kind)).unlink(
                    missing_ok=True)
            total -= entry.size
            log.debug("evicted the remote indexes of segment %s from the cache", uuid)

    def remove(self, metadata: RemoteLogSegmentMetadata) -> None:
        """Drop a deleted segment's indexes."""
        with self._lock:
            entry = self._entries.pop(metadata.segment_id, None)
            if entry is not None:
                entry.close()
            for kind in _KINDS:
                self._path(metadata, kind).unlink(missing_ok=True)

    @property
    def size_in_bytes(self) -> int:
        with self._lock:
            return sum(e.size for e in self._entries.values())

    def close(self) -> None:
        with self._lock:
            for entry in self._entries.values():
                entry.close()
