"""Tiered storage (KIP-405): the RemoteStorageManager contract, segment metadata and its
lifecycle, the fsspec storage manager and the metadata manager kept in the tier.

Segment ids and topic ids use Kafka's ``Uuid`` text form (22 URL-safe base64 characters).
"""

from __future__ import annotations

from tierlog.remote.api import (
    IndexType,
    LogSegmentData,
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemoteLogSegmentState,
    RemoteStorageManager,
    TopicIdPartition,
    is_valid_transition,
)
from tierlog.remote.metadata.metadata import RemoteLogMetadataManager
from tierlog.remote.metadata.metadata_cache import RemoteLogMetadataCache
from tierlog.remote.rlm.integrity import validate_fetched_batches
from tierlog.remote.tier.fsspec_storage import FsspecRemoteStorageManager
from tierlog.remote.tier.manifest import (
    PartitionManifest,
    list_remote_partitions,
    read_partition_manifest,
)
from tierlog.remote.tier.object_store import RemoteTier, RequestStats

__all__ = [
    "FsspecRemoteStorageManager",
    "IndexType",
    "LogSegmentData",
    "PartitionManifest",
    "RemoteLogMetadataCache",
    "RemoteLogMetadataManager",
    "RemoteLogSegmentId",
    "RemoteLogSegmentMetadata",
    "RemoteLogSegmentMetadataUpdate",
    "RemoteLogSegmentState",
    "RemoteStorageManager",
    "RemoteTier",
    "RequestStats",
    "TopicIdPartition",
    "is_valid_transition",
    "list_remote_partitions",
    "read_partition_manifest",
    "validate_fetched_batches",
]
