"""The segment metadata store's contract: what the RemoteLogManager, the remote reader and
the LogManager call on it, so any store meeting it can be plugged in (through the
``tierlog_register_remote_metadata_managers`` hook, chosen by
``remote.log.metadata.manager.class.name``).

Imports nothing of the engine but the plugin-facing storage API, so it sits below it, beside
the hook specs that name ``RemoteLogMetadataFactory``; its public name is
:mod:`tierlog.remote.metadata_api`.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Protocol, runtime_checkable

from tierlog.contracts.remote_storage import (
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemoteStorageManager,
    TopicIdPartition,
)


@runtime_checkable
class RemoteLogMetadataStore(Protocol):
    """Kafka's RemoteLogMetadataManager as tierlog uses it. Thread-safe; a partition has a
    single writer (its leader). ``tierlog.remote.metadata.metadata.PartitionMetadataStore``
    implements the rules (state transitions, queries) once for a store to build on."""

    def add_remote_log_segment_metadata(self, metadata: RemoteLogSegmentMetadata) -> None:
        """Record a copy attempt (COPY_SEGMENT_STARTED); ValueError for another state."""
        ...

    def update_remote_log_segment_metadata(self, update: RemoteLogSegmentMetadataUpdate) -> None:
        """Move a tracked segment to ``update.state`` (a legal transition, else ValueError;
        RemoteResourceNotFoundError for an unknown segment)."""
        ...

    def update_log_start_offset(self, tip: TopicIdPartition, offset: int) -> None:
        """Raise the partition's recorded log start offset (never lowers it)."""
        ...

    def log_start_offset(self, tip: TopicIdPartition) -> int | None: ...

    def remote_log_segment_metadata(
        self, tip: TopicIdPartition, offset: int, leader_epoch: int | None = None
    ) -> RemoteLogSegmentMetadata | None:
        """The COPY_SEGMENT_FINISHED segment holding ``offset`` (in ``leader_epoch``'s
        lineage when given), or None."""
        ...

    def list_remote_log_segments(
        self, tip: TopicIdPartition, leader_epoch: int | None = None
    ) -> list[RemoteLogSegmentMetadata]:
        """Every segment not DELETE_SEGMENT_FINISHED, sorted by start offset."""
        ...

    def highest_offset_for_epoch(self, tip: TopicIdPartition, leader_epoch: int) -> int | None: ...

    def remote_log_size(self, tip: TopicIdPartition, leader_epoch: int | None = None) -> int: ...

    def list_partitions(self) -> list[TopicIdPartition]: ...

    def close(self) -> None: ...


#: A metadata store as a plugin registers it under its name: ``factory(rsm, log_dir)``, given
#: the RemoteStorageManager it serves and the LogManager's first log dir.
RemoteLogMetadataFactory = Callable[[RemoteStorageManager, Path], RemoteLogMetadataStore]
