"""Seeding a partition directory as the continuation of what the remote tier holds: the
local half of a restore (``tierlog.remote.ops.restore``), and so of an adoption (a topic Spark's
``df.write.format("tierlog")`` wrote, restored without a cut).

The seeded directory is what a tiered log whose older segments all moved to the tier looks
like: the leader-epoch checkpoint of the restored state and either one empty segment at the
restored end offset, or (a point-in-time cut inside a tier segment) that segment's bytes
below the cut as the first local segment, whose indexes the log rebuilds as it opens. The
log opened on it with ``log_start_offset`` = the tier's start and ``remote_snapshots`` loads
the producer snapshot the tier holds at its local log start (``LogLoader``) and replays the
local bytes on top, so producers keep deduplicating and transactions stay decided.
"""

from __future__ import annotations

import logging
from pathlib import Path

from tierlog.checkpoint.checkpoint_file import LeaderEpochCheckpointFile
from tierlog.common import filenames
from tierlog.common.atomic import atomic_write_bytes
from tierlog.errors import ConfigError
from tierlog.log.segment import LogSegment
from tierlog.remote.ops.restore import PartitionRestore

log = logging.getLogger(__name__)

def seed_log_dir(directory: Path, state: PartitionRestore, *, index_interval_bytes: int,
                 max_index_size: int) -> None:
    """Prepare an empty partition directory as the restored partition: the leader-epoch
    checkpoint and the restored local bytes (``state.local_bytes``, as the segment at
    ``state.local_start``), each written atomically, or else an empty segment at the end
    offset. Open the log on it with ``recovery_point=state.local_log_start`` and
    ``had_clean_shutdown`` only when no bytes were restored, so their indexes are built.
    ConfigError when the directory already holds segments."""
    if any(p.name.endswith(filenames.LOG_SUFFIX) for p in directory.iterdir()):
        raise ConfigError("directory", f"{directory} holds segments: a restore starts a log "
                                       f"afresh")
    LeaderEpochCheckpointFile(directory / filenames.LEADER_EPOCH_CHECKPOINT).write(
        list(state.epochs))
    if state.local_bytes:
        atomic_write_bytes(filenames.log_file(directory, state.local_start), state.local_bytes)
    else:
        LogSegment.open(directory, state.end_offset, index_interval_bytes=index_interval_bytes,
                        max_index_size=max_index_size).close()
    log.info("%s: seeded to continue the tier at offset %d (log start %d, local start %d)",
             directory.name, state.end_offset, state.log_start_offset, state.local_log_start)


__all__ = ["seed_log_dir"]
