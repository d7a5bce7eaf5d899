"""DataDirLock: one writing process per data dir, as Kafka's exclusive lock on ``<log.dir>/.lock``.

Every process that opens a data dir for writing holds ``fcntl.flock(LOCK_EX)`` on its ``.lock``
file for as long as it has it open; the kernel drops the lock when the process dies (a SIGKILL
leaves no stale lock), and the file names the holder's pid for the message a second writer
gets. Read-only opens take no lock: :func:`live_owner` only asks whether a writer holds it,
without creating or changing the file.
"""

from __future__ import annotations

import errno
import fcntl
import logging
import os
from pathlib import Path

from tierlog.errors import DataDirLockedError

log = logging.getLogger(__name__)

#: Kafka's name for the lock file in every log dir.
LOCK_FILE = ".lock"
#: The kernel's table of file locks (Linux).
PROC_LOCKS = "/proc/locks"


class DataDirLock:
    """The exclusive lock of one data dir, held until :meth:`release` (or the process ends).

    A lock belongs to its open file: a second :meth:`acquire` of the same dir is refused
    even in the same process. Not thread-safe: one owner acquires and releases it.
    """

    __slots__ = ("_fd", "directory")

    def __init__(self, directory: Path, fd: int) -> None:
        self.directory = directory
        self._fd = fd

    @classmethod
    def acquire(cls, directory: str | os.PathLike[str]) -> DataDirLock:
        """Lock ``directory`` (which must exist) for this process and write its pid into
        the lock file. DataDirLockedError naming the holder's pid when another open holds
        it; nothing is written then."""
        directory = Path(directory)
        path = directory / LOCK_FILE
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            os.close(fd)
            if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN):
                raise
            raise DataDirLockedError(directory, _read_pid(path)) from None
        try:
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        except BaseException:
            os.close(fd)  # closing releases the lock
            raise
        log.debug("locked data dir %s (pid %d)", directory, os.getpid())
        return cls(directory, fd)

    @property
    def held(self) -> bool:
        return self._fd >= 0

    def release(self) -> None:
        """Drop the lock (the file stays, as Kafka's does). Idempotent."""
        if self._fd < 0:
            return
        fd, self._fd = self._fd, -1
        os.close(fd)  # the only descriptor of this open file: the lock goes with it
        log.debug("unlocked data dir %s", self.directory)


def live_owner(directory: str | os.PathLike[str]) -> int | None:
    """The pid of the process holding ``directory``'s lock now, 0 when a holder's pid is not
    known, or None when no process holds it. Creates, writes and locks nothing (a dir without
    a lock file has no owner): on Linux the kernel's table of locks (``/proc/locks``) is
    read, so a writer starting at the same moment is never refused because of the probe."""
    path = Path(directory) / LOCK_FILE
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return None
    held = _holder_from_proc_locks(st)
    if held is not NOT_LISTED:
        return held
    return _probe_with_flock(path)  # no /proc/locks: a shared lock taken and dropped at once


#: _holder_from_proc_locks found no table of locks to read.
NOT_LISTED = -1


def _holder_from_proc_locks(st: os.stat_result) -> int | None:
    """The pid holding an flock on the file ``st`` describes (0 if the table names none),
    None when no process holds one, NOT_LISTED when there is no ``/proc/locks``."""
    try:
        table = Path(PROC_LOCKS).read_text(encoding="ascii", errors="replace")
    except OSError:
        return NOT_LISTED
    device = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}"
    for line in table.splitlines():
        fields = line.split()
        # "1: FLOCK  ADVISORY  WRITE 4242 fe:00:2146526 0 EOF"; waiters are "1: -> FLOCK ..."
        if len(fields) >= 6 and fields[1] == "FLOCK" and fields[5] == device:
            return int(fields[4]) if fields[4].isdigit() else 0
    return None


def _probe_with_flock(path: Path) -> int | None:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except OSError as exc:
        if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN):
            raise
        return _read_pid(path) or 0
    finally:
        os.close(fd)  # also drops the probe's shared lock
    return None


def _read_pid(path: Path) -> int | None:
    """The pid the lock file names, or None when it names none (yet)."""
    try:
        text = path.read_text(encoding="ascii", errors="replace").strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None
