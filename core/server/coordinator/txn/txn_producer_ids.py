"""Producer id allocation that never hands out an id twice, across restarts and SIGKILLs.

Ids are reserved in blocks (Kafka's ProducerIdManager does the same through its controller):
before the first id of a block is handed out, the end of the block is written atomically to
``producer-id-block`` in the first log dir, so a restarted server starts after every id any
earlier run could have handed out. The first block also starts above every producer id the
logs already hold (data written by the engine directly, or by an older server).
"""

from __future__ import annotations

import logging
import threading
from pathlib import Path

from tierlog.common.atomic import atomic_write_text
from tierlog.errors import CorruptCheckpointError

log = logging.getLogger(__name__)

BLOCK_FILE = "producer-id-block"
BLOCK_SIZE = 1000


class ProducerIdBlocks:
    """The next producer id; :meth:`allocate` blocks (it may fsync): run it on a worker."""

    def __init__(self, path: Path, floor: int = 0, block_size: int = BLOCK_SIZE) -> None:
        self.path = Path(path)
        self.block_size = block_size
        self._lock = threading.Lock()
        self._next = max(floor, self._read())
        self._block_end = self._next  # nothing reserved yet in this run

    def _read(self) -> int:
        try:
            text = self.path.read_text().strip()
        except FileNotFoundError:
            return 0
        try:
            value = int(text)
        except ValueError:
            raise CorruptCheckpointError(f"{self.path}: not a producer id: {text[:40]!r}") \
                from None
        if value < 0:
            raise CorruptCheckpointError(f"{self.path}: negative producer id {value}")
        return value

    def raise_floor(self, floor: int) -> None:
        """Never allocate below ``floor`` (an id known to be in use)."""
        with self._lock:
            self._next = max(self._next, floor)

    def allocate(self) -> int:
        with self._lock:
            if self._next >= self._block_end:
                end = self._next + self.block_size
                atomic_write_text(self.path, f"{end}\n")
                self._block_end = end
                log.debug("reserved producer ids [%d, %d)", self._next, end)
            pid = self._next
            self._next += 1
            return pid
