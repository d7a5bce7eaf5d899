"""The segment metadata store kept in a local directory: for a RemoteStorageManager that has
no tier of tierlog's to keep the metadata in (one not built on FsspecRemoteStorageManager)."""

from __future__ import annotations

import os

from tierlog.remote.metadata.metadata import PartitionMetadataStore


class LogDirRemoteLogMetadataManager(PartitionMetadataStore):
    """Segment metadata in ``directory`` (by default ``<first log dir>/remote-log-metadata``):
    per partition, ``<topic>-<partition>-<topicId>.json`` in PartitionManifest JSON, replaced
    atomically (``tierlog.common.atomic``) after every change. The file is the store, not a cache: a
    corrupt one raises CorruptRemoteMetadataError naming it. The rules are
    PartitionMetadataStore's."""

    local_file_is_cache = False

    def __init__(self, directory: str | os.PathLike[str]) -> None:
        super().__init__(directory)

    def __repr__(self) -> str:
        return f"LogDirRemoteLogMetadataManager({self._cache_dir})"
