"""The three offset checkpoints Kafka keeps in every log dir, one home for which file holds
which offset of a Log: ``recovery-point-offset-checkpoint`` (flushed up to here),
``log-start-offset-checkpoint`` and ``replication-offset-checkpoint`` (the high watermark).

Each file holds the partitions of its own log dir only and is replaced atomically
(:class:`tierlog.checkpoint.checkpoint_file.OffsetCheckpointFile`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Protocol

from tierlog.checkpoint.checkpoint_file import OffsetCheckpointFile
from tierlog.common import filenames

TopicPartition = tuple[str, int]


class CheckpointedLog(Protocol):
    """What the log dir's checkpoints read of a Log (the checkpoint room sits below the log's)."""

    @property
    def directory(self) -> Path: ...
    @property
    def closed(self) -> bool: ...
    @property
    def recovery_point(self) -> int: ...
    @property
    def log_start_offset(self) -> int: ...
    @property
    def high_watermark(self) -> int: ...


#: Each checkpoint's file name and the Log offset it records.
RECOVERY_POINTS: tuple[str, Callable[[CheckpointedLog], int]] = (
    filenames.RECOVERY_POINT_CHECKPOINT, lambda lg: lg.recovery_point)
LOG_START_OFFSETS: tuple[str, Callable[[CheckpointedLog], int]] = (
    filenames.LOG_START_OFFSET_CHECKPOINT, lambda lg: lg.log_start_offset)
HIGH_WATERMARKS: tuple[str, Callable[[CheckpointedLog], int]] = (
    filenames.REPLICATION_OFFSET_CHECKPOINT, lambda lg: lg.high_watermark)
ALL_CHECKPOINTS = (RECOVERY_POINTS, LOG_START_OFFSETS, HIGH_WATERMARKS)


def read_checkpoint(log_dir: Path, checkpoint: tuple[str, Callable[[CheckpointedLog], int]]
                    ) -> dict[TopicPartition, int]:
    """The offsets a log dir's checkpoint file holds (empty when it has none)."""
    return OffsetCheckpointFile(log_dir / checkpoint[0]).read()


def write_checkpoints(log_dir: Path, logs: Mapping[TopicPartition, CheckpointedLog],
                      checkpoints: Iterable[tuple[str, Callable[[CheckpointedLog], int]]] = ALL_CHECKPOINTS
                      ) -> None:
    """Replace ``checkpoints`` of ``log_dir`` with the offsets of its open logs among ``logs``."""
    mine = [(tp, lg) for tp, lg in list(logs.items())
            if lg.directory.parent == log_dir and not lg.closed]
    for name, value in checkpoints:
        OffsetCheckpointFile(log_dir / name).write({tp: value(lg) for tp, lg in mine})
