"""AbstractIndex: the memory-mapped, preallocated file under the offset and time indexes.

Owns the mmap, the entry count, resize/trim/flush/close, relative offsets, the disk space
reserved under the mapping (grown in steps as entries are appended) and which slots a
lookup searches (Kafka's warm/cold split); the entry layouts and the search itself are
``tierlog.index.entries``.
"""

from __future__ import annotations

import errno
import io
import logging
import mmap
import os
from abc import ABC, abstractmethod
from array import array
from bisect import bisect_right
from pathlib import Path
from typing import ClassVar

from tierlog.common.int_bounds import INT32_MAX
from tierlog.errors import IndexOffsetOverflowError
from tierlog.index.entries import EntryLayout, UnpackFrom, largest_lower_bound, upper_from_lower

log = logging.getLogger(__name__)

# The last WARM_SECTION_BYTES of an index are searched first: appends and in-sync lookups
# touch only those pages, so they stay in the page cache (Kafka's choice of 8 KiB).
WARM_SECTION_BYTES = 8192
# Every FENCE_STRIDE-th key is kept in memory (read once a cold lookup needs it): a cold
# lookup bisects that array in C, then at most FENCE_STRIDE entries of the mapping, so it
# costs about what a lookup in a small index does (Python pays per probe, not per page).
FENCE_STRIDE = 256


#: Disk space under an index's mapping is reserved (posix_fallocate) this many bytes at a
#: time, as entries are appended, rather than all of ``segment.index.bytes`` when the file is
#: created: a new partition's two indexes take 2 x 64 KiB of disk, not 2 x 10 MiB. 64 KiB is
#: 8,192 offset entries, about 32 MiB of log at the default ``index.interval.bytes``.
RESERVE_STEP_BYTES = 64 * 1024


def _allocate(fd: int, start: int, end: int, path: Path) -> None:
    """Allocate the blocks of bytes [start, end) of the file (within its length); OSError
    naming ``path`` when the disk cannot hold them (the file's length is unchanged). Writes
    through the mapping stay within allocated blocks: a write into a hole on a full disk
    would kill the process with SIGBUS, where this fails with OSError before anything
    changes. On a filesystem without fallocate support nothing is allocated, as before."""
    if end <= start:
        return
    try:
        os.posix_fallocate(fd, start, end - start)
    except OSError as e:
        if e.errno in (errno.EOPNOTSUPP, errno.ENOSYS, errno.EINVAL):
            log.debug("%s: posix_fallocate unsupported (%s); left sparse", path, e)
            return
        raise OSError(e.errno, f"cannot reserve {end - start} bytes for index {path}: "
                               f"{e.strerror}", str(path)) from e


class AbstractIndex(ABC):
    """A file of fixed-size, big-endian entries, memory-mapped and preallocated.

    A file it creates is grown to ``max_index_size`` rounded down to a multiple of
    ``entry_size`` so appends write into the mapping. Its disk space is reserved for real
    (``posix_fallocate``) in steps of :data:`RESERVE_STEP_BYTES` ahead of the entries
    (:meth:`reserve`, called by every append before it writes, and for a writer that
    writes into :attr:`mapping` itself, :attr:`reserved_entries` bounds it): a hole on a
    full disk would kill the process with SIGBUS on a write through the mapping, where a
    reservation fails with OSError before anything changes; ``trim_to_valid_size`` (on
    roll and close) cuts it back to ``entries * entry_size``. An existing file is trusted as Kafka
    does: ``entries = length // entry_size``, so an untrimmed file counts its zero tail
    as entries and ``sanity_check`` must reject it; the owner grows the active segment's
    index back with ``resize``. Not thread-safe: the owning segment serialises access.
    """

    layout: ClassVar[EntryLayout]
    """The entry format (``tierlog.index.entries``)."""
    entry_size: ClassVar[int]
    """Bytes of one entry (``layout.size``)."""
    entries: int
    """Entries in the file. Changes only through the index's own methods or, while its
    segment is armed, the plain appender (:mod:`tierlog.log.segment_appender`, which writes the
    entry into :attr:`mapping` and then sets this), always under the owning Log's lock."""

    def __init__(
        self,
        path: str | os.PathLike[str],
        base_offset: int,
        max_index_size: int = -1,
        writable: bool = True,
        missing_ok: bool = False,
    ) -> None:
        self._path = Path(path)
        self._base_offset = base_offset
        self._max_index_size = max_index_size
        self._writable = writable
        #: A read-only index whose file is missing is empty (a read-only open of a segment
        #: creates nothing and scans its ``.log`` instead).
        self._missing_ok = missing_ok and not writable
        self._warm_entries = WARM_SECTION_BYTES // self.entry_size
        self._mm: mmap.mmap | None = None
        self._fence = array("q")
        self._closed = False
        self._length = 0
        #: Bytes from the start whose blocks this object has reserved (an existing file's
        #: are reserved again, cheaply, as appends reach them).
        self._reserved = 0
        self._open()
        self._max_entries = self._length // self.entry_size
        self._load_last_entry()
        log.debug("loaded index %s: entries=%d max_entries=%d length=%d", self._path,
                  self.entries, self._max_entries, self._length)

    def _open(self) -> None:
        newly_created = False
        if not self._writable:
            try:
                fd = os.open(self._path, os.O_RDONLY)
            except FileNotFoundError:
                if not self._missing_ok:
                    raise
                self.entries = 0
                self._map(-1, 0)
                return
        else:
            try:
                fd = os.open(self._path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
                newly_created = True
            except FileExistsError:
                fd = os.open(self._path, os.O_RDWR)
        try:
            length = os.fstat(fd).st_size
            self.entries = length // self.entry_size
            # Kafka preallocates only a file it has just created: an existing (trimmed) empty
            # index stays empty until its segment becomes active again and is resized.
            if newly_created and self._max_index_size >= 0:
                if self._max_index_size < self.entry_size:
                    raise ValueError(f"{self._path}: invalid max index size {self._max_index_size}"
                                     f" (an entry takes {self.entry_size} bytes)")
                length = self._round_down(self._max_index_size)
                os.ftruncate(fd, length)
                self._allocate_through(fd, 0, length)
            self._map(fd, length)
        except BaseException:
            if newly_created:  # a file that could not be reserved is not left behind
                self._path.unlink(missing_ok=True)
            raise
        finally:
            os.close(fd)

    def _map(self, fd: int, length: int) -> None:
        # mmap refuses zero bytes: an empty index simply has no mapping.
        access = mmap.ACCESS_WRITE if self._writable else mmap.ACCESS_READ
        self._mm = mmap.mmap(fd, length, access=access) if length else None
        self._length = length

    def _round_down(self, size: int) -> int:
        return max(size, 0) // self.entry_size * self.entry_size

    def _allocate_through(self, fd: int, entries: int, length: int) -> None:
        """Reserve the blocks under the first ``entries + 1`` slots, rounded up to the next
        step (at most ``length``); OSError when the disk cannot hold them."""
        step = RESERVE_STEP_BYTES
        end = min(length, ((entries + 1) * self.entry_size + step - 1) // step * step)
        if end > self._reserved:
            _allocate(fd, self._reserved, end, self._path)
            self._reserved = end

    def reserve(self, more: int = 1) -> None:
        """Reserve the disk space of the next ``more`` entries (up to the file's length), in
        steps of :data:`RESERVE_STEP_BYTES`; every append calls it before it writes, a caller
        writing several entries may call it first. OSError naming the file when the disk
        cannot hold them (nothing changes)."""
        if min((self.entries + more) * self.entry_size, self._length) <= self._reserved:
            return
        self._check_writable()
        fd = os.open(self._path, os.O_RDWR)
        try:
            self._allocate_through(fd, self.entries + more - 1, self._length)
        finally:
            os.close(fd)

    @property
    def reserved_entries(self) -> int:
        """Slots whose disk space is reserved (at most :attr:`max_entries`): a writer into
        :attr:`mapping` (the armed plain appender) writes no slot at or beyond this."""
        return min(self._reserved // self.entry_size, self._max_entries)

    # -- facts -----------------------------------------------------------------------

    @property
    def path(self) -> Path:
        return self._path

    @property
    def base_offset(self) -> int:
        return self._base_offset

    @property
    def mapping(self) -> mmap.mmap:
        """The file's memory map, entry ``n`` at byte ``n * entry_size``: the armed plain
        appender writes entries into it, holding its buffer so that the map cannot be closed
        or resized meanwhile (BufferError). ValueError when the index is closed or empty."""
        return self._buffer()

    @property
    def max_entries(self) -> int:
        return self._max_entries

    @property
    def max_index_size(self) -> int:
        return self._max_index_size

    @property
    def length(self) -> int:
        """Bytes of the file (and of its mapping), preallocated slots included."""
        return self._length

    @property
    def size_in_bytes(self) -> int:
        """Bytes used by entries."""
        return self.entries * self.entry_size

    @property
    def writable(self) -> bool:
        return self._writable

    def is_full(self) -> bool:
        return self.entries >= self._max_entries

    def relative_offset(self, offset: int) -> int:
        """``offset - base_offset``; raises IndexOffsetOverflowError outside [0, 2^31-1]."""
        relative = offset - self._base_offset
        if relative < 0 or relative > INT32_MAX:
            raise IndexOffsetOverflowError(
                f"offset {offset} does not fit a 4-byte offset relative to base offset "
                f"{self._base_offset} of index {self._path}"
            )
        return relative

    def can_append_offset(self, offset: int) -> bool:
        return 0 <= offset - self._base_offset <= INT32_MAX

    # -- abstract --------------------------------------------------------------------

    @abstractmethod
    def sanity_check(self) -> None:
        """Raise CorruptIndexError (naming the file) if the index is obviously broken."""

    @abstractmethod
    def truncate_to(self, offset: int) -> None:
        """Remove every entry whose offset is >= ``offset``."""

    @abstractmethod
    def _load_last_entry(self) -> None:
        """Refresh the cached last entry after the entry count changed."""

    # -- file management -------------------------------------------------------------

    def resize(self, new_size: int) -> bool:
        """Set the file and mapping to ``new_size`` rounded down to whole entries.

        Returns False when the length is already that. Entries beyond the new size are
        dropped. Used to trim on roll/close and to grow the active segment's index.
        """
        if self._closed:
            raise ValueError(f"index {self._path} is closed")
        rounded = self._round_down(new_size)
        if rounded == self._length:
            return False
        self._check_writable()
        if self._mm is not None:
            self._mm.close()
            self._mm = None
        fd = os.open(self._path, os.O_RDWR)
        try:
            try:
                if rounded > self._length:
                    self._reserved = min(self._reserved, self._length)
                    # The next entry's blocks first: on a full disk nothing has changed.
                    self._allocate_through(fd, self.entries, rounded)
                os.ftruncate(fd, rounded)
            except OSError:
                os.ftruncate(fd, self._length)
                self._reserved = min(self._reserved, self._length)
                self._map(fd, self._length)  # unchanged: the old mapping is restored
                raise
            self._reserved = min(self._reserved, rounded)
            self._map(fd, rounded)
        finally:
            os.close(fd)
        self._max_entries = rounded // self.entry_size
        if self.entries > self._max_entries:
            self._truncate_to_entries(self._max_entries)
        log.debug("resized index %s to %d bytes", self._path, rounded)
        return True

    def trim_to_valid_size(self) -> None:
        """Cut the preallocated tail so the file holds exactly its entries."""
        if self._writable and not self._closed:
            self.resize(self.size_in_bytes)

    def use_first(self, entries: int) -> None:
        """Serve only the first ``entries`` entries, changing nothing on disk: how a read-only
        open uses the valid prefix of an untrimmed (a live active segment's) or damaged file."""
        if not 0 <= entries <= self.entries:
            raise ValueError(f"index {self._path} has {self.entries} entries, not {entries}")
        self._truncate_to_entries(entries)

    def zero_tail_start(self) -> int:
        """The first slot of the file's all-zero tail (``entries`` when its last slot holds a
        non-zero byte): the unused, preallocated space of an untrimmed index (a live owner's
        active segment, or one a crash left), where Kafka's DumpLogSegments stops too. No
        writer writes an all-zero entry (the sparse rule never indexes position 0, later
        entries' offsets are above the base offset; only a time entry for a record stamped 0
        at the base offset would be, and leaving it out costs a longer scan), so the slots
        before it are those in use; a zeroed slot before a non-zero one is damage, left for
        ``sanity_check``."""
        mm, end = (self._buffer() if self.entries else b""), self.entries * self.entry_size
        while end > 0:  # from the end, a step at a time: a trimmed file stops at once
            start = max(0, end - RESERVE_STEP_BYTES)
            used = len(mm[start:end].rstrip(b"\0"))
            if used:
                return -(-(start + used) // self.entry_size)
            end = start
        return 0

    def reset(self) -> None:
        """Remove every entry and preallocate the file to ``max_index_size`` again."""
        self._truncate_to_entries(0)
        self.resize(self._max_index_size)

    def flush(self) -> None:
        """Write the mapping's dirty pages and fsync the file."""
        if not self._writable or self._closed:
            return
        if self._mm is not None:
            self._mm.flush()
        fd = os.open(self._path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def close(self) -> None:
        """Trim to the valid entries, then unmap. Idempotent."""
        self.trim_to_valid_size()
        self._unmap()

    def delete_if_exists(self) -> bool:
        """Unmap (without trimming) and delete the file; False if it did not exist."""
        self._unmap()
        try:
            self._path.unlink()
        except FileNotFoundError:
            return False
        return True

    def rename_to(self, new_path: str | os.PathLike[str]) -> None:
        """Atomically rename the file; the mapping stays valid."""
        target = Path(new_path)
        os.replace(self._path, target)
        self._path = target

    def _unmap(self) -> None:
        if self._mm is not None:
            self._mm.close()
            self._mm = None
        self._closed = True

    def _check_writable(self) -> None:
        if not self._writable:
            raise io.UnsupportedOperation(f"index {self._path} was opened read-only")

    def _buffer(self) -> mmap.mmap:
        """The mapping, for reading entries that are known to exist."""
        if self._mm is None:
            raise ValueError(f"index {self._path} is closed")
        return self._mm

    def _truncate_to_entries(self, entries: int) -> None:
        self.entries = entries
        del self._fence[(entries + FENCE_STRIDE - 1) // FENCE_STRIDE:]
        self._load_last_entry()
        log.debug("truncated index %s to %d entries", self._path, entries)

    def _slot_of(self, n: int) -> int:
        """Byte position of entry ``n``; IndexError unless 0 <= n < entries."""
        if n < 0 or n >= self.entries:
            raise IndexError(f"entry {n} requested from index {self._path} of {self.entries}"
                             " entries")
        return n * self.entry_size

    # -- search ----------------------------------------------------------------------

    def _largest_lower_bound_slot(self, target: int, unpack: UnpackFrom, field: int) -> int:
        """Slot of the largest entry whose field (at byte ``field`` of the entry, read with
        ``unpack``) is <= ``target``; -1 if every entry is larger or there is none.

        The search is ``tierlog.index.entries.largest_lower_bound``; this picks the slots it
        searches with Kafka's split: the warm tail (the last 8 KiB, where appends and in-sync
        reads go) alone when the target is in it; an older target searches the cold head.
        Searches on the lookup key (field 0) start the cold search from the fence.
        """
        entries = self.entries
        if entries == 0:
            return -1
        mm = self._mm
        if mm is None:
            raise ValueError(f"index {self._path} is closed")
        size = self.entry_size
        first_hot = entries - 1 - self._warm_entries
        first_hot = max(first_hot, 0)
        hot_key = unpack(mm, first_hot * size + field)[0]
        if hot_key < target:
            lo, hi = first_hot, entries
        elif hot_key == target:
            return first_hot
        elif unpack(mm, field)[0] > target:
            return -1
        elif field == 0:
            lo, hi = self._fence_bracket(target, unpack, first_hot)
        else:
            lo, hi = 0, first_hot
        # field(lo) <= target is known: search the slots after it.
        return largest_lower_bound(mm, unpack, size, field, target, lo + 1, hi)

    def _fence_bracket(self, target: int, unpack: UnpackFrom, first_hot: int) -> tuple[int, int]:
        """(lo, hi) around ``target`` in the cold head, with field 0 of lo <= target <
        field 0 of hi, found by bisecting the fence (the key of every FENCE_STRIDE-th
        entry, read lazily once): a cold lookup then costs what one in a small index does.
        """
        fence = self._fence
        needed = first_hot // FENCE_STRIDE + 1
        if len(fence) < needed:
            mm, stride = self._buffer(), FENCE_STRIDE * self.entry_size
            fence.extend(unpack(mm, i * stride)[0] for i in range(len(fence), needed))
        block = bisect_right(fence, target, 0, needed) - 1
        lo = block * FENCE_STRIDE
        return lo, min(lo + FENCE_STRIDE, first_hot)

    def _smallest_upper_bound_slot(self, target: int, unpack: UnpackFrom, field: int) -> int:
        """Slot of the smallest entry whose field is >= ``target``; -1 if there is none."""
        lower = self._largest_lower_bound_slot(target, unpack, field)
        return upper_from_lower(self._mm, unpack, self.entry_size, field, target,
                                self.entries, lower)

    def __repr__(self) -> str:
        return (f"{type(self).__name__}({str(self._path)!r}, base_offset={self._base_offset}, "
                f"entries={self.entries})")
