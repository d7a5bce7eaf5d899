"""The remote storage plugin's manager for a tier URL, built as a LogManager builds it: what a
command working on a bare tier (scrub, tierlog table build) writes through, so its objects are
published as the tier's own writer publishes them (atomically on a directory).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from tierlog.errors import RemoteStorageError
from tierlog.plugin_manager import get_plugins
from tierlog.remote.tier.fsspec_storage import FsspecRemoteStorageManager
from tierlog.remote.tier.options import backend_for_url, local_directory

__all__ = ["open_storage"]


def open_storage(url: str, storage_options: Mapping[str, Any] | None = None, *,
                 manager: str | None = None) -> FsspecRemoteStorageManager:
    """The remote storage plugin's manager for ``url`` (the plugin ``manager``; by default
    the one its scheme calls for: ``s3://...`` the s3 plugin, a path or ``file://`` URL the
    local one), built as a LogManager builds it, so a repair writes as the tier's writer
    does (atomic publication on a directory). RemoteStorageError when a local tier's
    directory does not exist (a command on a bare tier never creates one), or when the plugin
    builds a manager without an fsspec tier."""
    backend = manager or backend_for_url(url)
    if backend == "local":
        path = local_directory(url)
        if not os.path.isdir(path):
            raise RemoteStorageError(f"remote tier {url!r}: directory {path} does not exist")
    factory = get_plugins().registries.remote_storage_factory(backend)
    rsm = factory(url, dict(storage_options or {}))
    if not isinstance(rsm, FsspecRemoteStorageManager):
        raise RemoteStorageError(f"remote tier {url!r}: the {backend} plugin built "
                                 f"{type(rsm).__name__}, which has no fsspec tier to work on")
    return rsm
