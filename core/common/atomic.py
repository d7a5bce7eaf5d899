"""Crash-safe replacement of small files: write ``<name>.tmp``, fsync, rename, fsync the directory.

Every checkpoint, snapshot and metadata file of tierlog is written through here.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

from tierlog.common.filenames import TMP_SUFFIX


def fsync_dir(path: str | os.PathLike[str]) -> None:
    """fsync a directory so that entries created, renamed or removed in it are durable."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def atomic_write_bytes(path: str | os.PathLike[str], data: bytes) -> None:
    """Replace ``path`` with ``data`` so that a crash leaves either the old or the new content.

    The bytes go to ``<path>.tmp`` (truncating any stale one a crash left behind), are flushed
    and fsynced, the temporary file is renamed over ``path``, and the directory is fsynced.
    Not thread-safe for one ``path``: writers of the same file must serialize (each checkpoint
    class holds a lock for that).
    """
    target = Path(path)
    tmp = target.with_name(target.name + TMP_SUFFIX)
    try:
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise
    fsync_dir(target.parent)


def atomic_write_text(path: str | os.PathLike[str], text: str) -> None:
    """:func:`atomic_write_bytes` of ``text`` encoded as UTF-8 (Kafka's checkpoint charset)."""
    atomic_write_bytes(path, text.encode("utf-8"))
