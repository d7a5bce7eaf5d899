"""Kafka's text checkpoint files: offsets and leader-epoch entries per
partition, the log dir's checkpoints and partition.metadata.

Its public names are importable from the package itself; each is imported on first use
(PEP 562), so importing one module of the room does not load the rest.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tierlog.common.lazy_exports import lazy_getattr

if TYPE_CHECKING:
    from tierlog.checkpoint.checkpoint_file import (
        EpochEntry,
        LeaderEpochCheckpointFile,
        OffsetCheckpointFile,
        decode_leader_epoch_checkpoint,
        decode_offset_checkpoint,
        encode_leader_epoch_checkpoint,
        encode_offset_checkpoint,
    )

_EXPORTS = {
    "EpochEntry": "tierlog.checkpoint.checkpoint_file",
    "LeaderEpochCheckpointFile": "tierlog.checkpoint.checkpoint_file",
    "OffsetCheckpointFile": "tierlog.checkpoint.checkpoint_file",
    "decode_leader_epoch_checkpoint": "tierlog.checkpoint.checkpoint_file",
    "decode_offset_checkpoint": "tierlog.checkpoint.checkpoint_file",
    "encode_leader_epoch_checkpoint": "tierlog.checkpoint.checkpoint_file",
    "encode_offset_checkpoint": "tierlog.checkpoint.checkpoint_file",
}


__getattr__ = lazy_getattr(__name__, _EXPORTS, globals())


__all__ = [
    "EpochEntry",
    "LeaderEpochCheckpointFile",
    "OffsetCheckpointFile",
    "decode_leader_epoch_checkpoint",
    "decode_offset_checkpoint",
    "encode_leader_epoch_checkpoint",
    "encode_offset_checkpoint",
]
