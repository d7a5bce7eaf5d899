"""Producer id allocation that never hands out an id twice, across restarts and SIGKILLs, and
across the nodes of a cluster.

Ids are reserved in blocks (Kafka's ProducerIdManager does the same through its controller):
before the first id of a block is handed out, the block is reserved durably. A node that is a
cluster of one writes the end of the block atomically to ``producer-id-block`` in its first log
dir (:func:`file_blocks`), so a restarted server starts after every id any earlier run could
have handed out; a replicating node reserves it in the cluster store
(``tierlog.cluster.producer_ids``), so no two nodes hold one id. The first block also starts
above every producer id the logs already hold (data written by the engine directly, or by an
older server).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from pathlib import Path

from tierlog.common.atomic import atomic_write_text
from tierlog.errors import CorruptCheckpointError

log = logging.getLogger(__name__)

BLOCK_FILE = "producer-id-block"
BLOCK_SIZE = 1000


#: Reserves a block for this node alone: ``(at_least, size) -> first``, the block being
#: ``[first, first + size)`` with ``first >= at_least``, durably, before it returns.
BlockReserver = Callable[[int, int], int]


def _read_block_file(path: Path) -> int:
    try:
        text = path.read_text().strip()
    except FileNotFoundError:
        return 0
    try:
        value = int(text)
    except ValueError:
        raise CorruptCheckpointError(f"{path}: not a producer id: {text[:40]!r}") from None
    if value < 0:
        raise CorruptCheckpointError(f"{path}: negative producer id {value}")
    return value


def file_blocks(path: Path) -> BlockReserver:
    """Blocks reserved in the file ``path`` (the end of the last block, atomically written)."""
    def reserve(at_least: int, size: int) -> int:
        start = max(at_least, _read_block_file(path))
        atomic_write_text(path, f"{start + size}\n")
        return start
    return reserve


class ProducerIdBlocks:
    """The next producer id; :meth:`allocate` blocks (it may fsync or write to the cluster
    store): run it on a worker. Blocks come from ``reserve`` (default: the file ``path``)."""

    def __init__(self, path: Path, floor: int = 0, block_size: int = BLOCK_SIZE, *,
                 reserve: BlockReserver | None = None) -> None:
        self.path = Path(path)
        self.block_size = block_size
        if reserve is None:
            _read_block_file(self.path)  # a damaged file fails the start, naming it
            reserve = file_blocks(self.path)
        self._reserve = reserve
        self._lock = threading.Lock()
        self._next = floor
        self._block_end = self._next  # nothing reserved yet in this run

    def raise_floor(self, floor: int) -> None:
        """Never allocate below ``floor`` (an id known to be in use)."""
        with self._lock:
            self._next = max(self._next, floor)

    def allocate(self) -> int:
        with self._lock:
            if self._next >= self._block_end:
                self._next = self._reserve(self._next, self.block_size)
                self._block_end = self._next + self.block_size
                log.debug("reserved producer ids [%d, %d)", self._next, self._block_end)
            pid = self._next
            self._next += 1
            return pid
