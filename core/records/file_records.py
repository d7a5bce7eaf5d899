"""FileRecords: a segment's ``.log`` file of v2 batches, and FileSlice, a byte range of it.

Appends are positional writes of whole batches; reads hand out slices that are sent with
``os.sendfile`` (zero-copy) or read once into memory and walked with zero-copy batch views.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import warnings
import weakref
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import NamedTuple, Protocol

from tierlog.common.filenames import parse_partition_dir
from tierlog.errors import (
    CorruptRecordError,
    LogClosedError,
    TierlogError,
    TruncatedBatchError,
    locating_corrupt_records,
)
from tierlog.records.batch import (
    HEADER_SIZE,
    LOG_OVERHEAD,
    BatchOrigin,
    RecordBatch,
    declared_size,
    iter_batches,
)
from tierlog.records.plain_batch_write import PlainBatchRules, write_plain_batch
from tierlog.records.record import Record

log = logging.getLogger(__name__)

#: Bytes read per call when walking a file batch by batch.
SCAN_CHUNK_BYTES = 1 << 20
#: Most buffers one pwritev call accepts (Linux: 1024).
_IOV_MAX = os.sysconf("SC_IOV_MAX") if hasattr(os, "sysconf") else 1024
#: Bytes a single os.sendfile call is asked to send.
_SENDFILE_CHUNK = 1 << 30


class LogOffsetPosition(NamedTuple):
    """Where a batch is: its last offset, its byte position in the file and its size."""

    offset: int
    position: int
    size: int


class TimestampAndOffset(NamedTuple):
    """The first record at or after a timestamp: its timestamp and offset."""

    timestamp: int
    offset: int


def first_record_at_or_after(
    batch: RecordBatch, target_timestamp: int, starting_offset: int
) -> TimestampAndOffset | None:
    """The first record of ``batch`` with timestamp >= ``target_timestamp`` and offset >=
    ``starting_offset`` (Kafka's ListOffsets search inside one batch), or None. The one home
    of that rule for local segments and the remote tier."""
    for record in batch.records():
        timestamp = record.timestamp
        assert timestamp is not None, "a record decoded from a batch always has a timestamp"
        if timestamp >= target_timestamp and record.offset >= starting_offset:
            return TimestampAndOffset(timestamp, record.offset)
    return None


class Records(Protocol):
    """What a read returns: batches as bytes, locally a file slice, remotely memory."""

    def size_in_bytes(self) -> int: ...

    def batches(self) -> Iterator[RecordBatch]: ...

    def records(self) -> Iterator[Record]: ...

    def to_bytes(self) -> bytes: ...

    def write_to(self, destination: socket.socket | int) -> int: ...


def _fileno(destination: socket.socket | int) -> int:
    return destination if isinstance(destination, int) else destination.fileno()


class MemoryRecords:
    """Batches held in memory (a remote fetch, a builder's output): the Records interface over
    bytes. ``origin`` (where the bytes were read from) is named by the errors of its batches."""

    __slots__ = ("_buffer", "_origin")

    def __init__(self, buffer: bytes | bytearray | memoryview,
                 origin: BatchOrigin | None = None) -> None:
        self._buffer = buffer
        self._origin = origin

    def size_in_bytes(self) -> int:
        return len(self._buffer)

    def batches(self) -> Iterator[RecordBatch]:
        return iter_batches(self._buffer, origin=self._origin)

    def records(self) -> Iterator[Record]:
        for batch in self.batches():
            yield from batch.records()

    def to_bytes(self) -> bytes:
        return bytes(self._buffer)

    def write_to(self, destination: socket.socket | int) -> int:
        """Send every byte; returns the number of bytes sent."""
        view = memoryview(self._buffer)
        if isinstance(destination, socket.socket):
            destination.sendall(view)
            return len(view)
        sent = 0
        while sent < len(view):
            sent += os.write(destination, view[sent:])
        return sent


class FileSlice:
    """A byte range ``[position, position + size)`` of a ``.log`` file.

    Holds the file's descriptor, so it is valid while the segment is open. ``write_to``
    sends the range with ``os.sendfile``: the bytes never enter Python.
    """

    __slots__ = ("_file", "position", "size")

    def __init__(self, file: FileRecords, position: int, size: int) -> None:
        self._file = file
        self.position = position
        self.size = size

    @property
    def path(self) -> Path:
        return self._file.path

    def size_in_bytes(self) -> int:
        return self.size

    def fileno(self) -> int:
        """The segment file's descriptor (for a sendfile driven by an event loop)."""
        return self._file.fileno()

    def to_bytes(self) -> bytes:
        return self._file.read_bytes(self.position, self.size)

    def batches(self) -> Iterator[RecordBatch]:
        """Zero-copy views of the complete batches in the slice (read into memory once); their
        errors name the file and the position in it."""
        return iter_batches(self.to_bytes(), origin=self._file.origin(self.position))

    def records(self) -> Iterator[Record]:
        for batch in self.batches():
            yield from batch.records()

    def write_to(self, destination: socket.socket | int) -> int:
        """Send the slice to a socket or file descriptor with os.sendfile; returns bytes sent."""
        out_fd = _fileno(destination)
        in_fd = self._file.fileno()
        offset, remaining = self.position, self.size
        while remaining > 0:
            try:
                sent = os.sendfile(out_fd, in_fd, offset, min(remaining, _SENDFILE_CHUNK))
            except BlockingIOError:
                _wait_writable(out_fd)
                continue
            if sent == 0:
                break  # the file is shorter than the slice (truncated underneath us)
            offset += sent
            remaining -= sent
        return self.size - remaining

    def __repr__(self) -> str:
        return f"FileSlice({self.path.name}, position={self.position}, size={self.size})"


def _close_dropped(fd: int, path: Path) -> None:
    """Close the descriptor of a FileRecords collected without ``close()``, with the
    ResourceWarning Python's own files give (nothing is trimmed: a preallocated file keeps its
    length, which recovery handles)."""
    warnings.warn(f"unclosed segment file {path}", ResourceWarning, stacklevel=2)
    with contextlib.suppress(OSError):
        os.close(fd)


def _wait_writable(fd: int) -> None:
    import select

    select.select([], [fd], [])


class FileRecords:
    """The ``.log`` file of one segment: v2 batches back to back.

    ``size`` is the number of valid bytes (a preallocated file is longer on disk until it is
    trimmed on close). Appends write at ``size`` with ``os.pwrite``/``os.pwritev``; reads use
    ``os.pread`` and never move a file pointer, so they may run while an append is written.
    Not thread-safe for concurrent appends: the owning Log serialises them.

    The plain appender's contract (:class:`tierlog.log.segment_appender.PlainAppendFile`): ``size``
    changes only through this class's appends and truncation, or the armed appender, which
    writes a batch at ``size`` into :meth:`fileno` and then sets ``size`` past it, under the
    owning Log's lock.
    """

    size: int
    """Valid bytes: where the next batch is written."""

    def __init__(self, path: Path, fd: int, size: int, preallocated: bool) -> None:
        self._path = path
        self._fd = fd
        self.size = size
        self._preallocated = preallocated
        # A raw descriptor is not closed by the garbage collector as a file object is: without
        # this, every Log dropped unclosed kept its segments' descriptors until the process
        # ended (a full test run reached select()'s limit of 1024).
        self._unclosed = weakref.finalize(self, _close_dropped, fd, path)
        # Never at interpreter exit: the OS closes the descriptor then, and a finalizer run
        # before a clean shutdown hook would hand that hook a closed (or reused) descriptor.
        self._unclosed.atexit = False

    @classmethod
    def open(
        cls,
        path: str | os.PathLike[str],
        *,
        mutable: bool = True,
        preallocate_bytes: int = 0,
    ) -> FileRecords:
        """Open (creating if needed) a ``.log`` file.

        ``preallocate_bytes`` > 0 extends a new, empty file to that size up front (Kafka's
        ``preallocate``); its valid size is then found by recovery, or is 0 for a new file.
        """
        path = Path(path)
        flags = (os.O_RDWR | os.O_CREAT) if mutable else os.O_RDONLY
        fd = os.open(path, flags | getattr(os, "O_CLOEXEC", 0), 0o644)
        size = os.fstat(fd).st_size
        preallocated = False
        if mutable and preallocate_bytes > 0 and size == 0:
            os.ftruncate(fd, preallocate_bytes)
            preallocated = True
        return cls(path, fd, size, preallocated)

    # -- properties ----------------------------------------------------------------------

    @property
    def path(self) -> Path:
        return self._path

    def size_in_bytes(self) -> int:
        return self.size

    def fileno(self) -> int:
        if self._fd < 0:
            raise LogClosedError(f"{self._path} is closed")
        return self._fd

    def origin(self, position: int = 0) -> BatchOrigin:
        """Where bytes read from ``position`` of this file came from, for the errors about
        them: the file and, when its directory is a partition's, the topic-partition."""
        try:
            topic: str | None
            partition: int | None
            topic, partition = parse_partition_dir(self._path.parent.name)
        except TierlogError:
            topic, partition = None, None
        return BatchOrigin(str(self._path), position, topic, partition)

    def _truncated(self, detail: str, position: int, offset: int | None = None
                   ) -> TruncatedBatchError:
        return self.origin().locate(TruncatedBatchError(detail, offset=offset,
                                                        position=position, check="size"))

    # -- writing -------------------------------------------------------------------------

    def append(self, data: bytes | bytearray | memoryview) -> int:
        """Append whole batches; returns the number of bytes written."""
        return self.append_pieces((data,))

    def append_pieces(self, pieces: Sequence[bytes | bytearray | memoryview]) -> int:
        """Append the concatenation of ``pieces`` with positional vectored writes (at most
        IOV_MAX pieces per call). If a write fails (a full disk), the file is cut back to its
        previous size before the error propagates, so no partial batch is left behind."""
        fd = self.fileno()
        start = position = self.size
        try:
            if len(pieces) <= _IOV_MAX:
                position = self._write_chunk(fd, pieces, position)
            else:
                for first in range(0, len(pieces), _IOV_MAX):
                    position = self._write_chunk(fd, pieces[first:first + _IOV_MAX], position)
        except BaseException:
            os.ftruncate(fd, start)
            raise
        self.size = position
        return position - start

    def append_plain_batch(
        self,
        data: bytes | bytearray | memoryview,
        base_offset: int,
        leader_epoch: int | None,
        rules: PlainBatchRules,
    ) -> tuple[int, int, int, int, int] | None:
        """Append one plain producer batch with its offset (and epoch) patched in, if it is
        intact and keeps ``rules``: see :mod:`tierlog.records.plain_batch_write`, whose result this
        returns (None: nothing written). Cut back on a failed write."""
        fd = self._fd
        if fd < 0:
            raise LogClosedError(f"{self._path} is closed")
        position = self.size
        try:
            result = write_plain_batch(fd, position, data, base_offset, leader_epoch, rules)
        except BaseException:
            os.ftruncate(fd, position)
            raise
        if result is not None:
            self.size = position + result[0]
        return result

    def _write_chunk(self, fd: int, chunk: Sequence[bytes | bytearray | memoryview],
                     position: int) -> int:
        size = sum(map(len, chunk))
        written = os.pwritev(fd, chunk, position)
        if written != size:
            self._finish_short_write(fd, chunk, written, position)
        return position + size

    @staticmethod
    def _finish_short_write(
        fd: int, pieces: Sequence[bytes | bytearray | memoryview], written: int, position: int
    ) -> None:
        """Write the rest after a short write (a full disk then raises OSError)."""
        rest = memoryview(b"".join(pieces))[written:]
        position += written
        while rest:
            n = os.pwrite(fd, rest, position)
            rest = rest[n:]
            position += n

    def flush(self) -> None:
        """fsync the file's data."""
        os.fsync(self.fileno())

    def truncate_to(self, size: int) -> int:
        """Cut the file to ``size`` bytes; returns how many bytes were removed."""
        if size < 0 or size > self.size:
            raise ValueError(f"cannot truncate {self._path} of {self.size} bytes to {size}")
        removed = self.size - size
        if removed or self._preallocated:
            os.ftruncate(self.fileno(), size)
            self._preallocated = False
        self.size = size
        return removed

    def trim(self) -> None:
        """Give back the unused preallocated tail of the file."""
        if self._preallocated and self._fd >= 0:
            os.ftruncate(self._fd, self.size)
            self._preallocated = False

    def close(self) -> None:
        if self._fd >= 0:
            self.trim()
            self._unclosed.detach()
            os.close(self._fd)
            self._fd = -1

    def rename_to(self, path: Path) -> None:
        os.replace(self._path, path)
        self._path = path

    def delete_if_exists(self) -> bool:
        self.close()
        try:
            self._path.unlink()
        except FileNotFoundError:
            return False
        return True

    # -- reading -------------------------------------------------------------------------

    def read_bytes(self, position: int, size: int) -> bytes:
        """Read ``size`` bytes at ``position`` (fewer only if the file is shorter)."""
        return os.pread(self.fileno(), size, position)

    def read_into(self, buffer: bytearray | memoryview, position: int) -> int:
        """Fill ``buffer`` from ``position`` without allocating, stopping at the valid size;
        returns the number of bytes read (the recovery scan reuses one buffer)."""
        fd = self.fileno()
        want = min(len(buffer), self.size - position)
        if want <= 0:
            return 0
        view = memoryview(buffer)[:want] if want < len(buffer) else buffer
        done = 0
        while done < want:
            n = os.preadv(fd, [view[done:] if done else view], position + done)
            if n == 0:
                break  # the file is shorter than its recorded size
            done += n
        return done

    def slice(self, position: int, size: int) -> FileSlice:
        end = min(self.size, position + size)
        return FileSlice(self, position, max(0, end - position))

    def read_header(self, position: int) -> RecordBatch | None:
        """The header of the batch at ``position`` (as a RecordBatch over 61 bytes), or None at the end."""
        if position + HEADER_SIZE > self.size:
            return None
        return RecordBatch(os.pread(self.fileno(), HEADER_SIZE, position), 0, header_only=True,
                           origin=self.origin(position))

    def headers_from(self, position: int = 0) -> Iterator[tuple[int, RecordBatch]]:
        """(position, header) of every batch from ``position``, reading only 61 bytes each.

        Stops at the end of the valid bytes; raises CorruptRecordError/TruncatedBatchError for
        a batch whose header is damaged or which runs past the end of the file.
        """
        size = self.size
        fd = self.fileno()
        while position + LOG_OVERHEAD <= size:
            header = os.pread(fd, HEADER_SIZE, position)
            if len(header) < HEADER_SIZE:
                raise self._truncated("the batch is cut off by the end of the file", position)
            batch = RecordBatch(header, 0, header_only=True, origin=self.origin(position))
            if position + batch.size_in_bytes > size:
                raise self._truncated(
                    f"the batch declares {batch.size_in_bytes} bytes but only {size - position} "
                    f"remain", position, batch.base_offset)
            yield position, batch
            position += batch.size_in_bytes
        if position != size:
            raise self._truncated(f"{size - position} trailing bytes", position)

    def next_offset(
        self, position: int = 0, *, on_damage: Callable[[CorruptRecordError], None] | None = None
    ) -> int | None:
        """The offset after the last batch from ``position`` on (None if there is none): the
        next offset of a ``.log`` (its owner answers its base offset for None).

        A damaged or cut-off batch raises as in :meth:`headers_from`, unless ``on_damage`` is
        given: then the batches before it count, and ``on_damage`` is told why the scan ended.
        """
        last = None
        try:
            for _, header in self.headers_from(position):
                last = header
        except CorruptRecordError as exc:
            if on_damage is None:
                raise
            on_damage(exc)
        return None if last is None else last.next_offset

    def batches_from(
        self, position: int = 0, end: int | None = None, chunk_bytes: int = SCAN_CHUNK_BYTES
    ) -> Iterator[tuple[int, RecordBatch]]:
        """(position, batch) of every whole batch in ``[position, end)``, read in big chunks.

        The batches are zero-copy views into each chunk. A batch larger than the chunk is
        read on its own. Raises TruncatedBatchError if the range ends inside a batch.
        """
        end = self.size if end is None else min(end, self.size)
        fd = self.fileno()
        while position < end:
            chunk = os.pread(fd, min(chunk_bytes, end - position), position)
            consumed = 0
            origin = self.origin(position)
            for batch in iter_batches(chunk, origin=origin):
                yield position + batch.position, batch
                consumed = batch.position + batch.size_in_bytes
            if consumed == 0:
                with locating_corrupt_records(file=origin.file, shift=position,
                                              topic=origin.topic, partition=origin.partition):
                    needed = declared_size(chunk)  # a batch bigger than the chunk: read it alone
                if needed is not None and len(chunk) < needed <= end - position:
                    yield position, RecordBatch(os.pread(fd, needed, position), 0, origin=origin)
                    position += needed
                    continue
                raise self._truncated(f"incomplete batch ({end - position} bytes before the end)",
                                      position)
            position += consumed

    def search_for_offset_with_size(
        self, target_offset: int, starting_position: int
    ) -> LogOffsetPosition | None:
        """The first batch at or after ``starting_position`` whose last offset >= target."""
        for position, header in self.headers_from(starting_position):
            last_offset = header.last_offset
            if last_offset >= target_offset:
                return LogOffsetPosition(last_offset, position, header.size_in_bytes)
        return None

    def search_for_timestamp(
        self, target_timestamp: int, starting_position: int, starting_offset: int
    ) -> TimestampAndOffset | None:
        """The first record with timestamp >= target and offset >= ``starting_offset``."""
        for position, header in self.headers_from(starting_position):
            if header.max_timestamp < target_timestamp:
                continue
            batch = RecordBatch(self.read_bytes(position, header.size_in_bytes),
                                origin=self.origin(position))
            found = first_record_at_or_after(batch, target_timestamp, starting_offset)
            if found is not None:
                return found
        return None

    def largest_timestamp_after(self, starting_position: int) -> TimestampAndOffset:
        """The largest batch max timestamp after a position, with the last offset of that batch."""
        best = TimestampAndOffset(-1, -1)
        for _, header in self.headers_from(starting_position):
            if header.max_timestamp > best.timestamp:
                best = TimestampAndOffset(header.max_timestamp, header.last_offset)
        return best

    def __repr__(self) -> str:
        return f"FileRecords({self._path}, size={self.size})"


__all__ = [
    "CorruptRecordError",
    "FileRecords",
    "FileSlice",
    "LogOffsetPosition",
    "MemoryRecords",
    "Records",
    "TimestampAndOffset",
]
