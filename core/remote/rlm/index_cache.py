"""RemoteIndexCache: remote segments' offset, time and transaction indexes, and the plugin
indexes that travel to the tier, cached on local disk.

Files live in ``<log dir>/remote-log-index-cache/`` as ``<startOffset>_<uuid>.index|.timeindex|
.txnindex`` (Kafka's names; a plugin index by its own suffix), are fetched one index type at a
time on first use, and are evicted least-recently-used beyond
``remote.log.index.file.cache.total.size.bytes``. A restart reloads them.
"""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, cast

from tierlog.common.atomic import atomic_write_bytes
from tierlog.common.stats import CacheStats
from tierlog.errors import CorruptIndexError, RemoteResourceNotFoundError
from tierlog.index import OffsetIndex, TimeIndex, TransactionIndex
from tierlog.index.offset_index import OffsetPosition
from tierlog.index.time_index import TimestampOffset
from tierlog.remote.api import (
    IndexObject,
    IndexType,
    RemoteLogSegmentMetadata,
    RemoteStorageManager,
)
from tierlog.remote.tier.layout import segment_object_key

if TYPE_CHECKING:
    from tierlog.config import LogConfig
    from tierlog.index.index_types import SegmentIndex, SegmentIndexType

log = logging.getLogger(__name__)

CACHE_DIR_NAME = "remote-log-index-cache"
#: The index types kept here; a file's suffix is its type's object suffix (``.index``, ...).
_KINDS = (IndexType.OFFSET, IndexType.TIMESTAMP, IndexType.TRANSACTION)
_KIND_OF_SUFFIX = {kind.suffix: kind for kind in _KINDS}


#: Stands in the opened indexes for a plugin index the tier does not hold (the segment was
#: copied before the index type was installed): asked again, it is not fetched again.
_ABSENT = object()


class OffsetLookup(Protocol):
    """What a read asks of a remote segment's offset index."""

    def lookup(self, target_offset: int) -> OffsetPosition: ...


class TimeLookup(Protocol):
    """What a timestamp search asks of a remote segment's time index."""

    def lookup(self, target_timestamp: int) -> TimestampOffset: ...


class _FromTheStart:
    """Stands in, in memory only, for a segment's offset or time index missing from the tier:
    every lookup answers the segment's start, so a read scans its ``.log`` from there (as the
    tier reader does without an index). Never written to the cache directory, so the object
    is fetched again once it is repaired (``tierlog scrub --repair``) and this is evicted."""

    __slots__ = ("_start",)

    def __init__(self, start_offset: int) -> None:
        self._start = start_offset

    def close(self) -> None:
        pass


class _MissingOffsetIndex(_FromTheStart):
    def lookup(self, target_offset: int) -> OffsetPosition:
        return OffsetPosition(self._start, 0)


class _MissingTimeIndex(_FromTheStart):
    def lookup(self, target_timestamp: int) -> TimestampOffset:
        return TimestampOffset(-1, self._start)


_STAND_INS: dict[IndexType | IndexObject, type[_FromTheStart]] = {
    IndexType.OFFSET: _MissingOffsetIndex, IndexType.TIMESTAMP: _MissingTimeIndex}


def cache_file_name(start_offset: int, segment_id: str, kind: IndexType | IndexObject) -> str:
    """``<startOffset>_<uuid><suffix>``, Kafka's name of a cached remote index (a plugin index
    type's by its suffix)."""
    return _name(start_offset, segment_id, kind.suffix)


def _name(start_offset: int, segment_id: str, suffix: str) -> str:
    return f"{start_offset}_{segment_id}{suffix}"


def _parse(name: str) -> tuple[int, str, str] | None:
    """``(start offset, segment uuid, suffix)`` of a cache file name, any suffix; or None."""
    stem, dot, suffix = name.partition(".")
    start, sep, uuid = stem.partition("_")
    if not sep or not start.isdigit() or not dot or not uuid:
        return None
    return int(start), uuid, dot + suffix


def parse_cache_file_name(name: str) -> tuple[int, str, IndexType] | None:
    """``(start offset, segment uuid, index type)`` of a built-in index's cache file name;
    None for any other name."""
    parsed = _parse(name)
    kind = None if parsed is None else _KIND_OF_SUFFIX.get(parsed[2])
    if parsed is None or kind is None:
        return None
    return parsed[0], parsed[1], kind


class _Opened(Protocol):
    """What the cache does with an index it opened: check it, and close it when evicted."""

    def sanity_check(self) -> None: ...

    def close(self) -> None: ...


@dataclass(slots=True)
class _Entry:
    """The cached indexes of one remote segment by suffix (each opened on first use), and
    the suffixes of its files on disk."""

    start_offset: int
    indexes: dict[str, Any] = field(default_factory=dict)
    size: int = 0
    suffixes: set[str] = field(default_factory=set)

    def close(self) -> None:
        for index in self.indexes.values():
            if index is not _ABSENT:
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
        #: Hits (no remote request), misses (fetched from the tier), evictions; under _lock.
        self.stats = CacheStats()
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
            parsed = _parse(path.name)
            if parsed is None:
                continue
            start, uuid, suffix = parsed
            entry = self._entries.setdefault(uuid, _Entry(start))
            entry.size += path.stat().st_size
            entry.suffixes.add(suffix)
        log.debug("remote index cache %s: %d segments on disk", self.directory, len(self._entries))

    # -- lookups -------------------------------------------------------------------------

    def offset_index(self, metadata: RemoteLogSegmentMetadata) -> OffsetLookup:
        """The segment's offset index; when the tier has lost it, a stand-in whose lookups
        answer the segment's start (the read scans from there), after one WARNING naming the
        missing object."""
        return cast(OffsetLookup, self._get(metadata, IndexType.OFFSET))

    def time_index(self, metadata: RemoteLogSegmentMetadata) -> TimeLookup:
        """The segment's time index, or a stand-in as for :meth:`offset_index`."""
        return cast(TimeLookup, self._get(metadata, IndexType.TIMESTAMP))

    def transaction_index(self, metadata: RemoteLogSegmentMetadata) -> TransactionIndex | None:
        """The segment's aborted transactions; None when it has none (no request is made for a
        segment whose metadata says its transaction index is empty)."""
        if metadata.txn_idx_empty:
            return None
        return cast(TransactionIndex, self._get(metadata, IndexType.TRANSACTION))

    def extra_index(self, metadata: RemoteLogSegmentMetadata, index_type: SegmentIndexType,
                    config: LogConfig) -> SegmentIndex | None:
        """The segment's copy of a plugin index type that is ``uploaded_to_remote``, opened
        with the type's ``open(path, start offset, config)``; None when the tier has none
        (the segment was copied before the type was installed)."""
        index = self._get(metadata, index_type,
                          lambda path: index_type.open(path, metadata.start_offset, config),
                          missing_ok=True)
        return None if index is _ABSENT else cast("SegmentIndex", index)

    def _path(self, metadata: RemoteLogSegmentMetadata, kind: IndexType | IndexObject) -> Path:
        return self.directory / cache_file_name(metadata.start_offset, metadata.segment_id, kind)

    def _get(self, metadata: RemoteLogSegmentMetadata, kind: IndexType | IndexObject,
             opener: Callable[[Path], _Opened] | None = None, missing_ok: bool = False
             ) -> object:
        uuid, suffix = metadata.segment_id, kind.suffix
        with self._lock:
            entry = self._entries.get(uuid)
            if entry is None:
                entry = self._entries[uuid] = _Entry(metadata.start_offset)
            self._entries.move_to_end(uuid)
            index = entry.indexes.get(suffix)
            if index is not None:
                self.stats.hits += 1
                return index
            path = self._path(metadata, kind)
            if path.exists():
                self.stats.hits += 1  # on disk already (cached by an earlier run)
            else:
                self.stats.misses += 1
                try:
                    data = self._fetch(metadata, kind)
                except RemoteResourceNotFoundError:
                    stand_in = _STAND_INS.get(kind)
                    if stand_in is not None:
                        log.warning(
                            "remote index %s is missing from the tier: reads of its segment "
                            "scan the .log from the segment's start instead (repair the tier "
                            "with 'tierlog scrub --repair')",
                            segment_object_key(metadata, kind.suffix))
                        index = entry.indexes[suffix] = stand_in(metadata.start_offset)
                        return index
                    if not missing_ok:
                        raise
                    entry.indexes[suffix] = _ABSENT
                    return _ABSENT
                atomic_write_bytes(path, data)
                entry.size += len(data)
                entry.suffixes.add(suffix)
            index = self._open(path, metadata, kind, opener)
            entry.indexes[suffix] = index
            self._evict()
            return index

    def _fetch(self, metadata: RemoteLogSegmentMetadata, kind: IndexType | IndexObject) -> bytes:
        try:
            with self._rsm.fetch_index(metadata, kind) as stream:
                return stream.read()
        except RemoteResourceNotFoundError:
            if kind is IndexType.TRANSACTION:
                return b""  # a segment copied without a transaction index has no aborts
            raise

    @staticmethod
    def _open(path: Path, metadata: RemoteLogSegmentMetadata, kind: IndexType | IndexObject,
              opener: Callable[[Path], _Opened] | None) -> _Opened:
        start = metadata.start_offset
        index: _Opened
        if opener is not None:
            index = opener(path)
        elif kind is IndexType.TRANSACTION:
            index = TransactionIndex(path, start)
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
            for suffix in entry.suffixes:
                (self.directory / _name(entry.start_offset, uuid, suffix)).unlink(missing_ok=True)
            total -= entry.size
            self.stats.evictions += 1
            log.debug("evicted the remote indexes of segment %s from the cache", uuid)

    def remove(self, metadata: RemoteLogSegmentMetadata) -> None:
        """Drop a deleted segment's indexes."""
        with self._lock:
            entry = self._entries.pop(metadata.segment_id, None)
            suffixes = {kind.suffix for kind in _KINDS}
            if entry is not None:
                entry.close()
                suffixes |= entry.suffixes
            for suffix in suffixes:
                path = self.directory / _name(metadata.start_offset, metadata.segment_id, suffix)
                path.unlink(missing_ok=True)

    @property
    def size_in_bytes(self) -> int:
        with self._lock:
            return sum(e.size for e in self._entries.values())

    def close(self) -> None:
        with self._lock:
            for entry in self._entries.values():
                entry.close()
