"""The plugin-facing remote storage API under its public name (docs/plugins.md): ids, segment
metadata and its lifecycle, the data handed to a copy, and the RemoteStorageManager contract.

Its home is :mod:`tierlog.contracts.remote_storage`, below the engine, where the hook specs can
name ``RemoteStorageFactory`` without importing the remote room.
"""

from __future__ import annotations

from tierlog.contracts.remote_storage import (
    METADATA_FORMAT_VERSION,
    UUID_TEXT_LENGTH,
    IndexObject,
    IndexType,
    LogSegmentData,
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemoteLogSegmentState,
    RemoteStorageFactory,
    RemoteStorageManager,
    TopicIdPartition,
    dumps,
    is_valid_transition,
    load_json_object,
    new_uuid_text,
)

__all__ = [
    "METADATA_FORMAT_VERSION",
    "UUID_TEXT_LENGTH",
    "IndexObject",
    "IndexType",
    "LogSegmentData",
    "RemoteLogSegmentId",
    "RemoteLogSegmentMetadata",
    "RemoteLogSegmentMetadataUpdate",
    "RemoteLogSegmentState",
    "RemoteStorageFactory",
    "RemoteStorageManager",
    "TopicIdPartition",
    "dumps",
    "is_valid_transition",
    "load_json_object",
    "new_uuid_text",
]
