"""Kafka's text checkpoint files: offsets and leader-epoch entries per
partition, the log dir's checkpoints and partition.metadata.

Its public names are importable from the package itself; each is imported on first use
(PEP 562), so importing one module of the room does not load the rest.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

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


def __getattr__(name: str) -> object:
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(_EXPORTS[name]), name)
    globals()[name] = value
    return value


__all__ = [
    "EpochEntry",
    "LeaderEpochCheckpointFile",
    "OffsetCheckpointFile",
    "decode_leader_epoch_checkpoint",
    "decode_offset_checkpoint",
    "encode_leader_epoch_checkpoint",
    "encode_offset_checkpoint",
]
