"""Kafka's ``.properties`` files (Java's format), read and written in one place: the CLI's
``--config`` and ``server.properties``, and each partition's ``topic-config.properties``.

Reading follows ``java.util.Properties.load``: ``key=value``, ``key: value`` or ``key value``
lines, ``#``/``!`` comments, a trailing ``\\`` continuing the line, ``\\t \\n \\uXXXX``
escapes. Writing escapes what reading would otherwise change, and replaces the file atomically.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from tierlog.common.atomic import atomic_write_text
from tierlog.errors import PropertiesError

_ESCAPES = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}
_ESCAPED_ON_WRITE = {"\\": "\\\\", "\n": "\\n", "\r": "\\r", "\t": "\\t", "\f": "\\f"}




def _logical_lines(text: str) -> Iterator[tuple[int, str]]:
    """(first physical line number, logical line): a line ending in an odd number of
    backslashes continues on the next, whose leading whitespace is dropped."""
    pending: list[str] = []
    start = 0
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.lstrip() if pending else raw
        if not pending:
            stripped = line.lstrip()
            if not stripped or stripped[0] in "#!":
                continue
            start = number
        trailing = len(line) - len(line.rstrip("\\"))
        if trailing % 2:
            pending.append(line[:-1])
            continue
        pending.append(line)
        yield start, "".join(pending)
        pending = []
    if pending:
        yield start, "".join(pending)


def _unescape(text: str, where: str) -> str:
    out: list[str] = []
    i = 0
    while i < len(text):
        ch = text[i]
        if ch != "\\" or i + 1 == len(text):
            out.append(ch)
            i += 1
            continue
        nxt = text[i + 1]
        if nxt == "u":
            digits = text[i + 2:i + 6]
            try:
                out.append(chr(int(digits, 16)))
            except ValueError:
                raise PropertiesError(where, f"malformed \\u escape {text[i:i + 6]!r}") from None
            i += 6
            continue
        out.append(_ESCAPES.get(nxt, nxt))
        i += 2
    return "".join(out)


def _split_key(line: str) -> tuple[str, str]:
    """Java Properties: the key ends at the first unescaped '=', ':' or whitespace; the
    separator may be surrounded by whitespace."""
    line = line.lstrip()
    i = 0
    while i < len(line):
        ch = line[i]
        if ch == "\\":
            i += 2
            continue
        if ch in "=: \t\f":
            break
        i += 1
    key, rest = line[:i], line[i:].lstrip(" \t\f")
    if rest[:1] in ("=", ":"):
        rest = rest[1:].lstrip(" \t\f")
    return key, rest


def read_properties(path: str | os.PathLike[str]) -> dict[str, str]:
    """A Kafka ``.properties`` file (Java's format): ``key=value``, ``key: value`` or
    ``key value`` lines, ``#``/``!`` comments, ``\\`` continuations and escapes."""
    path = Path(path)
    try:
        text = path.read_text("utf-8")
    except FileNotFoundError:
        raise PropertiesError(str(path), "does not exist") from None
    except UnicodeDecodeError as e:
        raise PropertiesError(str(path), f"is not UTF-8 text: {e.reason}") from None
    except OSError as e:
        raise PropertiesError(str(path), f"cannot be read: {e.strerror}") from None
    values: dict[str, str] = {}
    for number, line in _logical_lines(text):
        where = f"{path}:{number}"
        raw_key, raw_value = _split_key(line)
        values[_unescape(raw_key, where)] = _unescape(raw_value, where)
    return values


def read_properties_if_exists(path: str | os.PathLike[str]) -> dict[str, str]:
    """:func:`read_properties`, or ``{}`` when the file does not exist."""
    return read_properties(path) if Path(path).exists() else {}


def _escape(text: str, *, key: bool) -> str:
    """Escape what reading would change: backslashes and line breaks anywhere; in a key the
    separators (``=``, ``:``, space) and a leading comment mark; a value's leading blank."""
    out = "".join(_ESCAPED_ON_WRITE.get(ch, ch) for ch in text)
    if key:
        out = "".join("\\" + ch if ch in "=: " else ch for ch in out)
        if out.startswith(("#", "!")):
            out = "\\" + out
    elif out.startswith(" "):
        out = "\\" + out
    return out


def format_properties(values: Mapping[str, Any]) -> str:
    """``key=value`` lines, sorted by key, that :func:`read_properties` reads back exactly.
    Tuples are comma-joined (Kafka's list values) and booleans lower-case."""
    lines = []
    for key, value in sorted(values.items()):
        if isinstance(value, tuple):
            value = ",".join(value)
        elif isinstance(value, bool):
            value = str(value).lower()
        lines.append(f"{_escape(key, key=True)}={_escape(str(value), key=False)}\n")
    return "".join(lines)


def write_properties(path: str | os.PathLike[str], values: Mapping[str, Any]) -> None:
    """Replace ``path`` atomically with ``values`` in the .properties format."""
    atomic_write_text(Path(path), format_properties(values))
