"""The three offset checkpoints Kafka keeps in every log dir, one home for which file holds
which offset of a Log: ``recovery-point-offset-checkpoint`` (flushed up to here),
``log-start-offset-checkpoint`` and ``replication-offset-checkpoint`` (the high watermark).

Each file holds the partitions of its own log dir only and is replaced atomically
(:class:`tierlog.checkpoint.checkpoint_file.OffsetCheckpointFile`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from pathlib import Path

from tierlog.checkpoint.checkpoint_file import OffsetCheckpointFile
from tierlog.common import filenames
from tierlog.log.log import Log

TopicPartition = tuple[str, int]

#: Each checkpoint's file name and the Log offset it records.
RECOVERY_POINTS: tuple[str, Callable[[Log], int]] = (
    filenames.RECOVERY_POINT_CHECKPOINT, lambda lg: lg.recovery_point)
LOG_START_OFFSETS: tuple[str, Callable[[Log], int]] = (
    filenames.LOG_START_OFFSET_CHECKPOINT, lambda lg: lg.log_start_offset)
HIGH_WATERMARKS: tuple[str, Callable[[Log], int]] = (
    filenames.REPLICATION_OFFSET_CHECKPOINT, lambda lg: lg.high_watermark)
ALL_CHECKPOINTS = (RECOVERY_POINTS, LOG_START_OFFSETS, HIGH_WATERMARKS)


def read_checkpoint(log_dir: Path, checkpoint: tuple[str, Callable[[Log], int]]
                    ) -> dict[TopicPartition, int]:
    """The offsets a log dir's checkpoint file holds (empty when it has none)."""
    return OffsetCheckpointFile(log_dir / checkpoint[0]).read()


def write_checkpoints(log_dir: Path, logs: Mapping[TopicPartition, Log],
                      checkpoints: Iterable[tuple[str, Callable[[Log], int]]] = ALL_CHECKPOINTS
                      ) -> None:
    """Replace ``checkpoints`` of ``log_dir`` with the offsets of its open logs among ``logs``."""
    mine = [(tp, lg) for tp, lg in list(logs.items())
            if lg.directory.parent == log_dir and not lg.closed]
    for name, value in checkpoints:
        OffsetCheckpointFile(log_dir / name).write({tp: value(lg) for tp, lg in mine})
