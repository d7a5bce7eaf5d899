"""TransactionIndex: the ``.txnindex`` of a segment, the aborted transactions whose markers
it holds, and AbortedTxn, the 34-byte entry; used to serve READ_COMMITTED fetches.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

from tierlog.errors import CorruptIndexError, InvalidIndexOffsetError
from tierlog.index.entries import (
    TXN_CURRENT_VERSION,
    TXN_ENTRY,
    TXN_ENTRY_SIZE,
    check_txn_length,
    iter_txn_entries,
    unpack_txn_entry,
)

CURRENT_VERSION = TXN_CURRENT_VERSION
_ENTRY = TXN_ENTRY
ENTRY_SIZE = TXN_ENTRY_SIZE


@dataclass(frozen=True, slots=True)
class AbortedTxn:
    """One aborted transaction: ``version int16=0 | producerId int64 | firstOffset int64 |
    lastOffset int64 | lastStableOffset int64`` (34 bytes, big-endian)."""

    producer_id: int
    first_offset: int
    """Offset of the transaction's first batch."""
    last_offset: int
    """Offset of the ABORT marker."""
    last_stable_offset: int
    """The partition's last stable offset when the marker was written."""

    def to_bytes(self) -> bytes:
        return _ENTRY.pack(CURRENT_VERSION, self.producer_id, self.first_offset,
                           self.last_offset, self.last_stable_offset)

    @classmethod
    def from_bytes(cls, buf: bytes | bytearray | memoryview, pos: int = 0) -> AbortedTxn:
        """Decode the entry at ``buf[pos:pos + 34]``; CorruptIndexError on another version."""
        return cls(*unpack_txn_entry(buf, pos, "aborted transaction"))


def decode_aborted_txns(data: bytes | bytearray | memoryview, source: object
                        ) -> list[AbortedTxn]:
    """The entries of a whole transaction index held in memory (e.g. a fetched ``.txnindex``
    object); CorruptIndexError naming ``source`` unless it is whole entries of version 0."""
    what = f"transaction index {source}"
    check_txn_length(len(data), what)
    return [AbortedTxn(*fields) for _, fields in iter_txn_entries(data, what)]


class TxnIndexSearchResult(NamedTuple):
    """Aborted transactions overlapping a fetch, and whether later segments can be skipped."""

    aborted: list[AbortedTxn]
    is_complete: bool


def search_aborted_txns(
    entries: Iterable[AbortedTxn], fetch_offset: int, upper_bound_offset: int
) -> TxnIndexSearchResult:
    """Kafka's search of one transaction index (entries in ``last_offset`` order): the
    entries overlapping ``[fetch_offset, upper_bound_offset)``, complete once an entry's last
    stable offset reaches the upper bound. The one copy of the rule; every source of aborted
    transactions (local, remote, the tier reader's fetched objects) answers through it."""
    aborted: list[AbortedTxn] = []
    for txn in entries:
        if txn.last_offset >= fetch_offset and txn.first_offset < upper_bound_offset:
            aborted.append(txn)
        if txn.last_stable_offset >= upper_bound_offset:
            return TxnIndexSearchResult(aborted, True)
    return TxnIndexSearchResult(aborted, False)


class TransactionIndex:
    """An append-only file of AbortedTxn entries in increasing ``last_offset`` order.

    Not memory-mapped and no handle is held between operations: most segments have no
    aborted transaction, and their empty index is answered without touching the disk.
    A trailing partial entry (a torn write) is ignored by reads and fails
    ``sanity_check``. Not thread-safe: the owning segment serialises access.
    """

    def __init__(self, path: str | os.PathLike[str], start_offset: int, *,
                 create: bool = True) -> None:
        """``create=False`` (a read-only open) creates no file: a missing one is empty."""
        self._path = Path(path)
        self._start_offset = start_offset
        self._dirty = False
        self._last_offset: int | None = None
        self._size = 0
        try:
            fd = os.open(self._path, os.O_RDONLY | (os.O_CREAT if create else 0), 0o644)
        except FileNotFoundError:
            if create:
                raise
            return
        try:
            self._size = os.fstat(fd).st_size
            if self._size >= ENTRY_SIZE:
                # Only the last complete entry's last offset; sanity_check judges the rest.
                last = os.pread(fd, ENTRY_SIZE, self._size // ENTRY_SIZE * ENTRY_SIZE - ENTRY_SIZE)
                self._last_offset = _ENTRY.unpack(last)[3]
        finally:
            os.close(fd)

    @property
    def path(self) -> Path:
        return self._path

    @property
    def start_offset(self) -> int:
        return self._start_offset

    def is_empty(self) -> bool:
        """True when the file holds no complete entry."""
        return self._size < ENTRY_SIZE

    # -- writes ----------------------------------------------------------------------

    def append(self, txn: AbortedTxn) -> None:
        """Append ``txn``; its last offset must exceed the previous entry's."""
        if self._last_offset is not None and txn.last_offset <= self._last_offset:
            raise InvalidIndexOffsetError(
                f"aborted transaction last offset {txn.last_offset} appended to {self._path}"
                f" is not above the last one, {self._last_offset}"
            )
        data = txn.to_bytes()
        fd = os.open(self._path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, data)
        finally:
            os.close(fd)
        self._size += len(data)
        self._last_offset = txn.last_offset
        self._dirty = True

    def truncate_to(self, offset: int) -> None:
        """Drop every entry (and all after it) whose last offset is >= ``offset``."""
        previous: int | None = None
        for position, txn in self._entries_with_positions():
            if txn.last_offset >= offset:
                os.truncate(self._path, position)
                self._size = position
                self._last_offset = previous
                self._dirty = True
                return
            previous = txn.last_offset

    def reset(self) -> None:
        """Remove every entry (the file stays, empty)."""
        fd = os.open(self._path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.close(fd)
        self._size = 0
        self._last_offset = None
        self._dirty = True

    def flush(self) -> None:
        """fsync the file if it was written since the last flush."""
        if not self._dirty:
            return
        try:
            fd = os.open(self._path, os.O_RDONLY)
        except FileNotFoundError:
            return
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        self._dirty = False

    def close(self) -> None:
        """Nothing to release: no handle is held between operations (kept for symmetry
        with the other indexes; does not flush, as Kafka's does not)."""

    def delete_if_exists(self) -> bool:
        """Delete the file; False if it did not exist."""
        self._size = 0
        self._last_offset = None
        self._dirty = False
        try:
            self._path.unlink()
        except FileNotFoundError:
            return False
        return True

    def rename_to(self, new_path: str | os.PathLike[str]) -> None:
        """Atomically rename the file (if it exists) and follow it."""
        target = Path(new_path)
        if self._path.exists():
            os.replace(self._path, target)
        self._path = target

    # -- reads -----------------------------------------------------------------------

    def all_aborted_txns(self) -> list[AbortedTxn]:
        return [txn for _, txn in self._entries_with_positions()]

    def collect_aborted_txns(
        self, fetch_offset: int, upper_bound_offset: int
    ) -> TxnIndexSearchResult:
        """Aborted transactions overlapping ``[fetch_offset, upper_bound_offset)``.

        ``is_complete`` is True once an entry's last stable offset reaches the upper bound:
        no transaction aborted in a later segment can then overlap the range.
        """
        entries = (txn for _, txn in self._entries_with_positions())
        return search_aborted_txns(entries, fetch_offset, upper_bound_offset)

    def sanity_check(self) -> None:
        """Check the length, every entry's version, first <= last offset, last offsets
        strictly increasing and not below the segment's start offset."""
        data = self._read()
        check_txn_length(len(data), f"transaction index {self._path}")
        previous: int | None = None
        start = self._start_offset
        for position, txn in self._decode(data):
            if txn.last_offset < self._start_offset:
                problem = f"its last offset is below the segment's start offset {start}"
            elif txn.first_offset > txn.last_offset:
                problem = "its first offset is above its last offset"
            elif previous is not None and txn.last_offset <= previous:
                problem = f"its last offset is not above the previous entry's, {previous}"
            else:
                previous = txn.last_offset
                continue
            raise CorruptIndexError(f"transaction index {self._path} is corrupt: entry at byte "
                                    f"{position} {txn}: {problem}")

    def _read(self) -> bytes:
        try:
            return self._path.read_bytes()
        except FileNotFoundError:
            return b""

    def _entries_with_positions(self) -> Iterator[tuple[int, AbortedTxn]]:
        if self._size < ENTRY_SIZE:
            return iter(())
        return self._decode(self._read())

    def _decode(self, data: bytes) -> Iterator[tuple[int, AbortedTxn]]:
        for position, fields in iter_txn_entries(data, f"transaction index {self._path}"):
            yield position, AbortedTxn(*fields)

    def __repr__(self) -> str:
        return f"TransactionIndex({str(self._path)!r}, start_offset={self._start_offset})"
