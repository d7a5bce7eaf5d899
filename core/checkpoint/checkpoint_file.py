"""Kafka's text checkpoint files: offsets per topic-partition and leader-epoch start offsets.

Both are ``<version>\\n<count>\\n`` and one space-separated entry per line, replaced atomically.
Each format has one pure ``encode_*``/``decode_*`` pair (entries <-> bytes), which the file
classes and the remote tier's copy of the leader-epoch checkpoint both use.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import NamedTuple, TypeVar

from tierlog.common.atomic import atomic_write_bytes
from tierlog.common.filenames import validate_topic
from tierlog.common.int_bounds import INT32_MAX, INT32_MIN, INT64_MAX, INT64_MIN
from tierlog.errors import CorruptCheckpointError

#: The only version of both checkpoint formats Kafka has ever written.
CHECKPOINT_VERSION = 0

_INT_RE = re.compile(r"[+-]?[0-9]+")
_LINE_BREAK_RE = re.compile(r"\r\n|\r|\n")

T = TypeVar("T")


class EpochEntry(NamedTuple):
    """One checkpoint line: ``epoch`` (int32) led the partition from ``start_offset`` (int64)."""

    epoch: int
    start_offset: int


class _MalformedLine(ValueError):
    """A line that does not parse; turned into CorruptCheckpointError with file and line."""


def _parse_int(text: str, low: int, high: int) -> int:
    """Parse as Java's Integer/Long.parseInt would: optional sign, ASCII digits, in range."""
    if not _INT_RE.fullmatch(text):
        raise _MalformedLine(f"{text!r} is not an integer")
    value = int(text)
    if not low <= value <= high:
        raise _MalformedLine(f"{value} is out of range [{low}, {high}]")
    return value


def _encode(lines: Sequence[str]) -> bytes:
    """The checkpoint text of ``lines`` (entries already formatted), UTF-8 encoded."""
    text = f"{CHECKPOINT_VERSION}\n{len(lines)}\n" + "".join(f"{line}\n" for line in lines)
    return text.encode("utf-8")


def _decode(raw: bytes, source: str, parse: Callable[[list[str]], T]) -> list[T]:
    """Parse the entry lines of checkpoint text ``raw`` with ``parse`` (given each line's
    whitespace-split fields); errors name ``source`` (a file path or an object's name).

    Empty text holds no entries, as does text with only a version line (Kafka reads both
    that way).
    """
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise CorruptCheckpointError(f"checkpoint file {source} is not UTF-8: {e}") from e
    lines = _LINE_BREAK_RE.split(text)
    if lines and lines[-1] == "":
        lines.pop()  # the newline ending the last line
    if not lines:
        return []
    version = _field(lines, 0, lambda f: _parse_int(f[0], INT32_MIN, INT32_MAX), 1, source)
    if version != CHECKPOINT_VERSION:
        raise CorruptCheckpointError(
            f"unrecognised version {version} on line 1 of checkpoint file {source} "
            f"(expected {CHECKPOINT_VERSION})"
        )
    if len(lines) == 1:
        return []
    expected = _field(lines, 1, lambda f: _parse_int(f[0], 0, INT32_MAX), 1, source)
    entries = [_field(lines, i, parse, None, source) for i in range(2, len(lines))]
    if len(entries) != expected:
        raise CorruptCheckpointError(
            f"checkpoint file {source}: line 2 announces {expected} entries "
            f"but {len(entries)} follow"
        )
    return entries


def _field(
    lines: list[str], index: int, parse: Callable[[list[str]], T], width: int | None,
    source: str,
) -> T:
    """Parse line ``index``; ``width`` is the required field count (None: ``parse`` checks)."""
    line = lines[index]
    fields = line.split()
    try:
        if width is not None and len(fields) != width:
            raise _MalformedLine(f"expected {width} field(s), found {len(fields)}")
        return parse(fields)
    except _MalformedLine as e:
        raise CorruptCheckpointError(
            f"malformed line {index + 1} of checkpoint file {source}: {line!r} ({e})"
        ) from None


class _CheckpointFile:
    """A checkpoint file (Kafka's ``CheckpointFile``): the bytes of the format's pure
    encode/decode pair, replaced atomically on write. Subclasses say which pair.

    Thread-safe: reads and writes of one instance are serialized by a lock.
    """

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._lock = threading.Lock()

    def _write_bytes(self, data: bytes) -> None:
        with self._lock:
            atomic_write_bytes(self.path, data)

    def _read_bytes(self) -> bytes:
        """The file's bytes; empty when it is missing (Kafka reads that as no entries)."""
        with self._lock:
            try:
                return self.path.read_bytes()
            except FileNotFoundError:
                return b""

    def __repr__(self) -> str:
        return f"{type(self).__name__}({str(self.path)!r})"


def _parse_offset_entry(fields: list[str]) -> tuple[tuple[str, int], int]:
    if len(fields) != 3:
        raise _MalformedLine(f"expected '<topic> <partition> <offset>', found {len(fields)} fields")
    partition = _parse_int(fields[1], INT32_MIN, INT32_MAX)
    return (fields[0], partition), _parse_int(fields[2], INT64_MIN, INT64_MAX)


def _parse_epoch_entry(fields: list[str]) -> EpochEntry:
    if len(fields) != 2:
        raise _MalformedLine(f"expected '<epoch> <start offset>', found {len(fields)} fields")
    return EpochEntry(
        _parse_int(fields[0], INT32_MIN, INT32_MAX), _parse_int(fields[1], INT64_MIN, INT64_MAX)
    )


def encode_offset_checkpoint(offsets: Mapping[tuple[str, int], int]) -> bytes:
    """The bytes of an offset checkpoint holding ``offsets`` in iteration order (topic names
    are validated: InvalidTopicError)."""
    lines = []
    for (topic, partition), offset in offsets.items():
        validate_topic(topic)
        lines.append(f"{topic} {int(partition)} {int(offset)}")
    return _encode(lines)


def decode_offset_checkpoint(data: bytes, source: str) -> dict[tuple[str, int], int]:
    """The offsets by (topic, partition) of offset checkpoint bytes, in their order.

    Raises CorruptCheckpointError (naming ``source`` and the line) for a bad version, a bad
    line or an entry count that does not match the count line.
    """
    return dict(_decode(data, source, _parse_offset_entry))


def encode_leader_epoch_checkpoint(entries: Iterable[EpochEntry]) -> bytes:
    """The bytes of a leader-epoch checkpoint holding ``entries`` (oldest first): the local
    ``leader-epoch-checkpoint`` file and the copy uploaded beside each remote segment."""
    return _encode([f"{int(e.epoch)} {int(e.start_offset)}" for e in entries])


def decode_leader_epoch_checkpoint(data: bytes, source: str) -> list[EpochEntry]:
    """The entries of leader-epoch checkpoint bytes, in their order.

    Raises CorruptCheckpointError (naming ``source`` and the line) when malformed.
    """
    return _decode(data, source, _parse_epoch_entry)


class OffsetCheckpointFile(_CheckpointFile):
    """A log directory's per-partition offsets (recovery point, log start, high watermark,
    cleaner): ``0\\n<count>\\n`` then ``<topic> <partition> <offset>\\n`` per partition.

    Entries are written in the mapping's iteration order, so reading a file and writing the
    result reproduces it byte for byte. Thread-safe (one lock per instance).
    """

    def write(self, offsets: Mapping[tuple[str, int], int]) -> None:
        """Atomically replace the file with ``offsets`` (topic names are validated)."""
        self._write_bytes(encode_offset_checkpoint(offsets))

    def read(self) -> dict[tuple[str, int], int]:
        """The offsets by (topic, partition), in file order; ``{}`` when the file is missing.

        Raises CorruptCheckpointError (naming the file and line) for a bad version, a bad
        line or an entry count that does not match the count line.
        """
        return decode_offset_checkpoint(self._read_bytes(), str(self.path))


class LeaderEpochCheckpointFile(_CheckpointFile):
    """A partition's ``leader-epoch-checkpoint``: ``0\\n<count>\\n`` then
    ``<epoch> <start offset>\\n`` per epoch, oldest first.

    Thread-safe (one lock per instance).
    """

    def write(self, entries: Sequence[EpochEntry]) -> None:
        """Atomically replace the file with ``entries``."""
        self._write_bytes(encode_leader_epoch_checkpoint(entries))

    def read(self) -> list[EpochEntry]:
        """The entries in file order; ``[]`` when the file is missing.

        Raises CorruptCheckpointError (naming the file and line) when malformed.
        """
        return decode_leader_epoch_checkpoint(self._read_bytes(), str(self.path))
