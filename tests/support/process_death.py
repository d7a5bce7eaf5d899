"""A process death inside one test process: for tests that "crash" a LogManager by abandoning it
and open its dirs again in the same process.

A real death makes the kernel drop the data dirs' locks (``<dir>/.lock``) and nothing else: no
flush, no checkpoint, no clean-shutdown marker. :func:`die` does exactly that to a manager, so
the next open in the same process is not refused as a second owner.
"""

from __future__ import annotations

from tierlog.manager.log_manager import LogManager


def die(mgr: LogManager) -> None:
    """Drop ``mgr``'s data dir locks as the kernel does when its process dies; nothing of it
    is closed, flushed or written (its objects are simply abandoned)."""
    mgr._release_dirs()
