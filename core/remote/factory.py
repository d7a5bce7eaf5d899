"""Builds the RemoteLogManager of a LogManager from its settings and the remote storage plugins."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from tierlog.errors import ConfigError
from tierlog.events import EventDelivery
from tierlog.remote.index_cache import CACHE_DIR_NAME, RemoteIndexCache
from tierlog.remote.metadata import RemoteLogMetadataManager
from tierlog.remote.rlm import RemoteLogManager

if TYPE_CHECKING:
    from tierlog.manager_config import ManagerConfig
    from tierlog.plugin_manager import Registries

#: Directory (in the first log dir) of the local cache of the tier's segment metadata.
METADATA_CACHE_DIR_NAME = "remote-log-metadata-cache"


def build_remote_log_manager(config: ManagerConfig, registries: Registries, log_dir: Path,
                             time_ms: Callable[[], int], events: EventDelivery | None) -> RemoteLogManager:
    """The RemoteStorageManager named by ``remote.storage.manager`` (a plugin) on
    ``remote.storage.url`` with the ``remote.storage.options.*``, its metadata kept in the
    tier (cached under ``log_dir``), and the index cache under ``log_dir``."""
    url = config["remote.storage.url"]
    if not url:
        raise ConfigError("remote.storage.url",
                          "is required when a topic has remote.storage.enable=true")
    if not config["remote.log.storage.system.enable"]:
        raise ConfigError("remote.log.storage.system.enable",
                          "is false, so no topic may set remote.storage.enable=true")
    factory = registries.remote_storage_factory(config["remote.storage.manager"])
    rsm = factory(url, dict(config.remote_storage_options))
    tier = getattr(rsm, "tier", None)
    if tier is None:
        raise ConfigError("remote.storage.manager",
                          f"{config['remote.storage.manager']!r} is not built on "
                          "tierlog.remote.FsspecRemoteStorageManager, which keeps the "
                          "segment metadata in the tier")
    rlmm = RemoteLogMetadataManager(tier, cache_dir=log_dir / METADATA_CACHE_DIR_NAME)
    cache = RemoteIndexCache(log_dir / CACHE_DIR_NAME,
                             config["remote.log.index.file.cache.total.size.bytes"], rsm)
    return RemoteLogManager(
        rsm, rlmm, cache, time_ms=time_ms,
        copy_threads=config["remote.log.manager.thread.pool.size"],
        reader_threads=config["remote.log.reader.threads"], events=events,
    )
