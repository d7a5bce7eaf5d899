"""Kafka's text checkpoint files: offsets per topic-partition and leader-epoch start offsets.

Both are ``<version>\\n<count>\\n`` and one space-separated entry per line, replaced atomically.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TypeVar

from tierlog.atomic import atomic_write_text
from tierlog.errors import CorruptCheckpointError
from tierlog.filenames import validate_topic
from tierlog.leader_epoch import EpochEntry

#: The only version of both checkpoint formats Kafka has ever written.
CHECKPOINT_VERSION = 0

_INT_RE = re.compile(r"[+-]?[0-9]+")
_LINE_BREAK_RE = re.compile(r"\r\n|\r|\n")
_INT32_MIN, _INT32_MAX = -(1 << 31), (1 << 31) - 1
_INT64_MIN, _INT64_MAX = -(1 << 63), (1 << 63) - 1

T = TypeVar("T")


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


class _CheckpointFile:
    """The shared text format (Kafka's ``CheckpointFile``): a version line, a count line, then
    ``count`` entry lines, each ending in ``\\n``; UTF-8.

    Thread-safe: reads and writes of one instance are serialized by a lock.
    """

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._lock = threading.Lock()

    def _write_lines(self, lines: Sequence[str]) -> None:
        text = f"{CHECKPOINT_VERSION}\n{len(lines)}\n" + "".join(f"{line}\n" for line in lines)
        with self._lock:
            atomic_write_text(self.path, text)

    def _read_entries(self, parse: Callable[[list[str]], T]) -> list[T]:
        """Parse every entry line with ``parse`` (given the line's whitespace-split fields).

        A missing or empty file holds no entries, as does a file with only a version line
        (Kafka reads both that way).
        """
        with self._lock:
            try:
                raw = self.path.read_bytes()
            except FileNotFoundError:
                return []
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as e:
            raise CorruptCheckpointError(f"checkpoint file {self.path} is not UTF-8: {e}") from e
        lines = _LINE_BREAK_RE.split(text)
        if lines and lines[-1] == "":
            lines.pop()  # the newline ending the last line
        if not lines:
            return []
        version = self._field(lines, 0, lambda f: _parse_int(f[0], _INT32_MIN, _INT32_MAX), 1)
        if version != CHECKPOINT_VERSION:
            raise CorruptCheckpointError(
                f"unrecognised version {version} on line 1 of checkpoint file {self.path} "
                f"(expected {CHECKPOINT_VERSION})"
            )
        if len(lines) == 1:
            return []
        expected = self._field(lines, 1, lambda f: _parse_int(f[0], 0, _INT32_MAX), 1)
        entries = [self._field(lines, i, parse, None) for i in range(2, len(lines))]
        if len(entries) != expected:
            raise CorruptCheckpointError(
                f"checkpoint file {self.path}: line 2 announces {expected} entries "
                f"but {len(entries)} follow"
            )
        return entries

    def _field(
        self, lines: list[str], index: int, parse: Callable[[list[str]], T], width: int | None
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
                f"malformed line {index + 1} of checkpoint file {self.path}: {line!r} ({e})"
            ) from None

    def __repr__(self) -> str:
        return f"{type(self).__name__}({str(self.path)!r})"


def _parse_offset_entry(fields: list[str]) -> tuple[tuple[str, int], int]:
    if len(fields) != 3:
        raise _MalformedLine(f"expected '<topic> <partition> <offset>', found {len(fields)} fields")
    partition = _parse_int(fields[1], _INT32_MIN, _INT32_MAX)
    return (fields[0], partition), _parse_int(fields[2], _INT64_MIN, _INT64_MAX)


def _parse_epoch_entry(fields: list[str]) -> EpochEntry:
    if len(fields) != 2:
        raise _MalformedLine(f"expected '<epoch> <start offset>', found {len(fields)} fields")
    return EpochEntry(
        _parse_int(fields[0], _INT32_MIN, _INT32_MAX), _parse_int(fields[1], _INT64_MIN, _INT64_MAX)
    )


class OffsetCheckpointFile(_CheckpointFile):
    """A log directory's per-partition offsets (recovery point, log start, high watermark,
    cleaner): ``0\\n<count>\\n`` then ``<topic> <partition> <offset>\\n`` per partition.

    Entries are written in the mapping's iteration order, so reading a file and writing the
    result reproduces it byte for byte. Thread-safe (one lock per instance).
    """

    def write(self, offsets: Mapping[tuple[str, int], int]) -> None:
        """Atomically replace the file with ``offsets`` (topic names are validated)."""
        lines = []
        for (topic, partition), offset in offsets.items():
            validate_topic(topic)
            lines.append(f"{topic} {int(partition)} {int(offset)}")
        self._write_lines(lines)

    def read(self) -> dict[tuple[str, int], int]:
        """The offsets by (topic, partition), in file order; ``{}`` when the file is missing.

        Raises CorruptCheckpointError (naming the file and line) for a bad version, a bad
        line or an entry count that does not match the count line.
        """
        return dict(self._read_entries(_parse_offset_entry))


class LeaderEpochCheckpointFile(_CheckpointFile):
    """A partition's ``leader-epoch-checkpoint``: ``0\\n<count>\\n`` then
    ``<epoch> <start offset>\\n`` per epoch, oldest first.

    Thread-safe (one lock per instance).
    """

    def write(self, entries: Sequence[EpochEntry]) -> None:
        """Atomically replace the file with ``entries``."""
        self._write_lines([f"{int(e.epoch)} {int(e.start_offset)}" for e in entries])

    def read(self) -> list[EpochEntry]:
        """The entries in file order; ``[]`` when the file is missing.

        Raises CorruptCheckpointError (naming the file and line) when malformed.
        """
        return self._read_entries(_parse_epoch_entry)
