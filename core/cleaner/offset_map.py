"""OffsetMap: the log cleaner's key -> latest offset map (Kafka's ``SkimpyOffsetMap``).

Keys are stored as fixed-size digests in flat arrays, so a key costs ~24 bytes, not a dict entry.
"""

from __future__ import annotations

import hashlib
import struct
from array import array
from collections.abc import Callable
from typing import Protocol, TypeAlias

#: Kafka's ``log.cleaner.dedupe.buffer.size`` default: the memory cap of the map.
DEFAULT_MAX_MEMORY = 128 * 1024 * 1024
#: Kafka's ``log.cleaner.io.buffer.load.factor``: how full the table may get.
DEFAULT_LOAD_FACTOR = 0.9
#: Kafka's digest (``SkimpyOffsetMap``'s default hash algorithm).
DEFAULT_HASH_ALGORITHM = "md5"
#: Slots of a fresh table; it doubles (up to the memory cap) as keys arrive.
INITIAL_SLOTS = 1 << 12
_OFFSET_BYTES = 8
#: A key's first slot: its digest's first 8 bytes, little-endian, modulo the slots.
_PROBE = struct.Struct("<Q")
_first_probe: Callable[[bytes], tuple[int]] = _PROBE.unpack_from
_EMPTY = -1

#: What a key may be: any bytes-like object.
Key: TypeAlias = "bytes | bytearray | memoryview"


class _Digest(Protocol):
    """What the map uses of a hashlib hash object."""

    @property
    def digest_size(self) -> int: ...

    def digest(self) -> bytes: ...


class OffsetMap:
    """Open-addressing hash table of ``digest(key) -> offset`` with linear probing.

    Layout: ``slots`` entries in two flat arrays: a ``bytearray`` of ``slots * digest_size``
    digest bytes and an ``array('q')`` of int64 offsets, where -1 marks an empty slot; a key's
    first slot is its digest's first 8 bytes (little-endian) modulo ``slots``. That is
    ``digest_size + 8`` bytes per slot (24 with MD5), like Kafka's buffer. The table starts at
    ``INITIAL_SLOTS`` and doubles (a rehash) whenever it would pass ``load_factor``, up to
    ``max_memory // (digest_size + 8)`` slots; the map is *full* once it holds
    ``load_factor`` of that many keys (Kafka's ``maxDesiredMapSize``), and the cleaner then
    stops adding keys and cleans up to the last offset it mapped.

    Like Kafka, two keys with the same digest are the same key: the cleaner would keep only the
    later one's records. With MD5's 128 bits an accidental collision needs ~2^64 keys; keys
    crafted to collide (MD5 is broken) can only make their own records look superseded.
    Not thread-safe: one cleaner uses one map at a time.
    """

    __slots__ = ("_digest_size", "_digests", "_entries", "_grow_at", "_hash", "_latest_offset",
                 "_load_factor", "_max_entries", "_max_slots", "_offsets", "_slots", "hash_algorithm")

    def __init__(
        self,
        max_memory: int = DEFAULT_MAX_MEMORY,
        *,
        load_factor: float = DEFAULT_LOAD_FACTOR,
        hash_algorithm: str = DEFAULT_HASH_ALGORITHM,
    ) -> None:
        if not 0 < load_factor <= 1:
            raise ValueError(f"offset map load factor must be in (0, 1], got {load_factor}")
        self.hash_algorithm = hash_algorithm
        self._hash = _hash_constructor(hash_algorithm)
        self._digest_size: int = self._hash(b"").digest_size
        self._max_slots = max_memory // (self._digest_size + _OFFSET_BYTES)
        self._load_factor = load_factor
        self._max_entries = int(self._max_slots * load_factor)
        if self._max_entries < 1:
            raise ValueError(
                f"an offset map of {max_memory} bytes cannot hold one {hash_algorithm} entry of "
                f"{self._digest_size + _OFFSET_BYTES} bytes at load factor {load_factor}"
            )
        self.clear()

    # -- facts -----------------------------------------------------------------------

    @property
    def bytes_per_entry(self) -> int:
        """Bytes of one slot: the digest and an 8-byte offset."""
        return self._digest_size + _OFFSET_BYTES

    @property
    def slots(self) -> int:
        """Slots of the current table."""
        return self._slots

    @property
    def max_slots(self) -> int:
        """Slots of the largest table the memory cap allows."""
        return self._max_slots

    @property
    def max_entries(self) -> int:
        """Keys the map takes before it is full (``max_slots * load_factor``)."""
        return self._max_entries

    @property
    def is_full(self) -> bool:
        return self._entries >= self._max_entries

    @property
    def latest_offset(self) -> int:
        """The offset last put (or set with ``update_latest_offset``); -1 when cleared."""
        return self._latest_offset

    @property
    def memory_bytes(self) -> int:
        """Bytes held by the current table's arrays."""
        return len(self._digests) + len(self._offsets) * self._offsets.itemsize

    @property
    def utilization(self) -> float:
        """Keys over the slots the memory cap allows (Kafka's buffer utilization)."""
        return self._entries / self._max_slots

    def __len__(self) -> int:
        return self._entries

    # -- operations ------------------------------------------------------------------

    def put(self, key: Key, offset: int) -> None:
        """Map ``key`` to ``offset`` (a later put of the same key overwrites it).

        Raises ValueError when the map is full and ``key`` is new: check ``is_full`` first.
        """
        # The probe loop of _find, inlined: this runs once per record of the dirty range.
        digest = self._hash(key).digest()
        size, slots = self._digest_size, self._slots
        digests, offsets = self._digests, self._offsets
        slot = _first_probe(digest)[0] % slots
        while offsets[slot] != _EMPTY:
            if digests.startswith(digest, slot * size):
                offsets[slot] = offset
                self._latest_offset = offset
                return
            slot += 1
            if slot == slots:
                slot = 0
        if self._entries >= self._grow_at:
            if self._entries >= self._max_entries:
                raise ValueError(
                    f"offset map is full ({self._entries} keys, {self._max_slots} slots); "
                    f"cannot add the key for offset {offset}"
                )
            self._grow()
            slot = self._find(digest)
        self._digests[slot * size:slot * size + size] = digest
        self._offsets[slot] = offset
        self._entries += 1
        self._latest_offset = offset

    def get(self, key: Key) -> int:
        """The offset mapped for ``key``, or -1 when it has none."""
        return self._offsets[self._find(self._hash(key).digest())]

    def update_latest_offset(self, offset: int) -> None:
        """Record that the map covers the log up to ``offset`` (a batch or segment end)."""
        self._latest_offset = offset

    def clear(self) -> None:
        """Forget every key and go back to a small table."""
        self._slots = min(INITIAL_SLOTS, self._max_slots)
        self._digests = bytearray(self._slots * self._digest_size)
        self._offsets = array("q", [_EMPTY]) * self._slots
        self._grow_at = self._grow_threshold()
        self._entries = 0
        self._latest_offset = -1

    # -- internals -------------------------------------------------------------------

    def _find(self, digest: bytes) -> int:
        """The slot holding ``digest``, or the empty slot where it would go."""
        size, slots = self._digest_size, self._slots
        digests, offsets = self._digests, self._offsets
        slot = _first_probe(digest)[0] % slots
        while offsets[slot] != _EMPTY:
            if digests.startswith(digest, slot * size):
                return slot
            slot += 1
            if slot == slots:
                slot = 0
        return slot

    def _grow_threshold(self) -> int:
        """Entries at which the table doubles; the largest table is never outgrown."""
        if self._slots >= self._max_slots:
            return self._max_entries
        return int(self._slots * self._load_factor)

    def _grow(self) -> None:
        """Double the table (capped at ``max_slots``) and re-insert every entry."""
        size = self._digest_size
        old_digests, old_offsets = self._digests, self._offsets
        self._slots = min(self._slots * 2, self._max_slots)
        self._digests = bytearray(self._slots * size)
        self._offsets = array("q", [_EMPTY]) * self._slots
        self._grow_at = self._grow_threshold()
        digests, offsets = self._digests, self._offsets
        for old_slot, offset in enumerate(old_offsets):
            if offset == _EMPTY:
                continue
            digest = bytes(old_digests[old_slot * size:old_slot * size + size])
            slot = self._find(digest)
            digests[slot * size:slot * size + size] = digest
            offsets[slot] = offset

    def __repr__(self) -> str:
        return (
            f"OffsetMap({self._entries} keys, {self._slots}/{self._max_slots} slots, "
            f"{self.hash_algorithm}, latest offset {self._latest_offset})"
        )


def _hash_constructor(name: str) -> Callable[[Key], _Digest]:
    """The hashlib constructor of a fixed-size algorithm (md5, sha1, sha256, ...)."""
    try:
        constructor: Callable[[Key], _Digest] = getattr(hashlib, name)
        size = constructor(b"").digest_size
    except (AttributeError, TypeError) as e:
        raise ValueError(f"unsupported offset map hash algorithm {name!r}") from e
    if size < _PROBE.size:
        raise ValueError(
            f"hash algorithm {name!r} has a {size}-byte digest; {_PROBE.size} or more needed"
        )
    return constructor
