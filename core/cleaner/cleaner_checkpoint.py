"""CleanerCheckpoints: each log dir's ``cleaner-offset-checkpoint`` (the first dirty offset per
partition).

Kafka's ``LogCleanerManager`` checkpoints, in Kafka's text format, in the parent of the partition
dir.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import TYPE_CHECKING

from tierlog.checkpoint.checkpoint_file import OffsetCheckpointFile
from tierlog.common.filenames import CLEANER_OFFSET_CHECKPOINT

if TYPE_CHECKING:
    from tierlog.log.log import Log


class CleanerCheckpoints:
    """Reads and updates ``<log.dir>/cleaner-offset-checkpoint``: ``0\\n<count>\\n`` then
    ``<topic> <partition> <first dirty offset>\\n`` per compacted partition.

    Thread-safe: updates are read-modify-write of a whole file shared by every partition of
    the log dir, so they are serialized by this object's lock. Use one instance per process
    (the cleaner's) for a given log dir.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._files: dict[Path, OffsetCheckpointFile] = {}

    def file_for(self, log: Log) -> OffsetCheckpointFile:
        """The checkpoint file of ``log``'s log dir (the parent of its partition dir)."""
        log_dir = Path(log.directory).parent
        with self._lock:
            checkpoint = self._files.get(log_dir)
            if checkpoint is None:
                checkpoint = self._files[log_dir] = OffsetCheckpointFile(
                    log_dir / CLEANER_OFFSET_CHECKPOINT
                )
            return checkpoint

    def read(self, log: Log) -> int | None:
        """The checkpointed first dirty offset of ``log``, or None when it has none."""
        return self.file_for(log).read().get((log.topic, log.partition))

    def update(self, log: Log, offset: int) -> None:
        """Set ``log``'s first dirty offset (Kafka's ``updateCheckpoints``)."""
        checkpoint = self.file_for(log)
        with self._lock:
            offsets = checkpoint.read()
            offsets[(log.topic, log.partition)] = offset
            checkpoint.write(offsets)

    def maybe_truncate(self, log: Log, offset: int) -> None:
        """Lower ``log``'s checkpoint to ``offset`` if it is above it (after a truncation)."""
        checkpoint = self.file_for(log)
        key = (log.topic, log.partition)
        with self._lock:
            offsets = checkpoint.read()
            if offsets.get(key, 0) > offset:
                offsets[key] = offset
                checkpoint.write(offsets)

    def remove(self, log: Log) -> None:
        """Drop ``log``'s entry (the partition was deleted or moved)."""
        checkpoint = self.file_for(log)
        with self._lock:
            offsets = checkpoint.read()
            if offsets.pop((log.topic, log.partition), None) is not None:
                checkpoint.write(offsets)
