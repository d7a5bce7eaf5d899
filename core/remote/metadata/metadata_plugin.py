"""The built-in segment metadata stores, registered through
``tierlog_register_remote_metadata_managers``: ``tier`` (in the remote tier, for an
FsspecRemoteStorageManager) and ``log-dir`` (in the first log dir, for any other
RemoteStorageManager). ``remote.log.metadata.manager.class.name`` picks one by name; empty
(the default) picks ``tier`` when the RSM has a tier and ``log-dir`` otherwise."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from tierlog.errors import ConfigError
from tierlog.hookspecs import hookimpl
from tierlog.remote.api import RemoteStorageManager
from tierlog.remote.metadata.metadata import RemoteLogMetadataManager
from tierlog.remote.metadata.metadata_logdir import LogDirRemoteLogMetadataManager
from tierlog.remote.metadata_api import RemoteLogMetadataStore
from tierlog.remote.tier.ownership import tier_of

IN_TIER = "tier"
LOG_DIR = "log-dir"
SETTING = "remote.log.metadata.manager.class.name"
#: Directory (in the first log dir) of the local cache of the tier's segment metadata.
METADATA_CACHE_DIR_NAME = "remote-log-metadata-cache"
#: Directory (in the first log dir) of the ``log-dir`` store.
METADATA_DIR_NAME = "remote-log-metadata"


def default_store_name(rsm: RemoteStorageManager) -> str:
    """``tier`` for an RSM with a tier of tierlog's (``rsm.tier``), else ``log-dir``."""
    return IN_TIER if tier_of(rsm) is not None else LOG_DIR


def in_tier_store(rsm: RemoteStorageManager, log_dir: Path) -> RemoteLogMetadataStore:
    tier = tier_of(rsm)
    if tier is None:
        raise ConfigError(SETTING, f"{IN_TIER!r} keeps the metadata in the tier of a "
                                   f"FsspecRemoteStorageManager, and {rsm!r} has none")
    return RemoteLogMetadataManager(tier, cache_dir=log_dir / METADATA_CACHE_DIR_NAME)


def log_dir_store(rsm: RemoteStorageManager, log_dir: Path) -> RemoteLogMetadataStore:
    return LogDirRemoteLogMetadataManager(log_dir / METADATA_DIR_NAME)


@hookimpl(trylast=True)
def tierlog_register_remote_metadata_managers(register: Callable[[str, Any], None]) -> None:
    register(IN_TIER, in_tier_store)
    register(LOG_DIR, log_dir_store)
