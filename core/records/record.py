"""The Record value: one key/value/headers entry of a v2 record batch.

Decoders create millions of these, so the class is slotted and compared by value.
"""

from __future__ import annotations

from collections.abc import Sequence

Header = tuple[str, "bytes | None"]


class Record:
    """A Kafka record: key, value, headers, timestamp and (once in a log) its offset.

    ``key``/``value`` are ``bytes`` or ``None`` (a null key or value is not the same as
    an empty one). ``headers`` is a sequence of ``(str, bytes | None)`` pairs; decoded
    records carry a tuple (``()`` when there are none). ``timestamp`` is milliseconds
    since the epoch, or ``None`` to let the builder use the current time. ``offset`` is
    -1 until the record has been read from (or appended to) a log.
    """

    __slots__ = ("headers", "key", "offset", "timestamp", "value")

    def __init__(
        self,
        key: bytes | None = None,
        value: bytes | None = None,
        headers: Sequence[Header] = (),
        timestamp: int | None = None,
        offset: int = -1,
    ) -> None:
        self.key = key
        self.value = value
        self.headers = headers
        self.timestamp = timestamp
        self.offset = offset

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Record):
            return NotImplemented
        return (
            self.offset == other.offset
            and self.timestamp == other.timestamp
            and self.key == other.key
            and self.value == other.value
            and tuple(self.headers) == tuple(other.headers)
        )

    __hash__ = None  # type: ignore[assignment]  # mutable value object

    def __repr__(self) -> str:
        return (
            f"Record(offset={self.offset}, timestamp={self.timestamp}, key={self.key!r}, "
            f"value={_short(self.value)}, headers={list(self.headers)!r})"
        )


def _short(value: bytes | None, limit: int = 40) -> str:
    """A repr of a value that stays readable for large payloads."""
    if value is None or len(value) <= limit:
        return repr(value)
    return f"{value[:limit]!r}...({len(value)} bytes)"
