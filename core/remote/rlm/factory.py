"""Builds the RemoteLogManager of a LogManager from its settings and the remote storage plugins."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from tierlog.errors import ConfigError
from tierlog.events import EventDelivery
from tierlog.remote.api import RemoteStorageManager
from tierlog.remote.metadata.metadata_plugin import SETTING as METADATA_SETTING
from tierlog.remote.metadata.metadata_plugin import default_store_name
from tierlog.remote.metadata_api import RemoteLogMetadataStore
from tierlog.remote.rlm.index_cache import CACHE_DIR_NAME, RemoteIndexCache
from tierlog.remote.rlm.rlm import RemoteLimits, RemoteLogManager

if TYPE_CHECKING:
    from tierlog.plugin_manager import Registries


class RemoteSettings(Protocol):
    """The broker settings the remote side is built from (the LogManager's ManagerConfig
    satisfies it), so this room does not import the manager above it."""

    @property
    def remote_storage_options(self) -> Mapping[str, Any]:
        """``remote.storage.options.*`` without the prefix, for the storage plugin."""

    def __getitem__(self, name: str) -> Any:  # noqa: ANN401 - a setting's type is its key's
        """A broker setting by Kafka's name, already parsed to its type."""


def build_remote_log_manager(config: RemoteSettings, registries: Registries, log_dir: Path,
                             time_ms: Callable[[], int], events: EventDelivery | None) -> RemoteLogManager:
    """The RemoteStorageManager named by ``remote.storage.manager`` (a plugin) on
    ``remote.storage.url`` with the ``remote.storage.options.*``, the segment metadata store
    named by ``remote.log.metadata.manager.class.name`` (by default in the tier, cached
    under ``log_dir``, or in ``log_dir`` for an RSM without a tier), and the index cache
    under ``log_dir``."""
    url = config["remote.storage.url"]
    if not url:
        raise ConfigError("remote.storage.url",
                          "is required when a topic has remote.storage.enable=true")
    if not config["remote.log.storage.system.enable"]:
        raise ConfigError("remote.log.storage.system.enable",
                          "is false, so no topic may set remote.storage.enable=true")
    factory = registries.remote_storage_factory(config["remote.storage.manager"])
    rsm = factory(url, dict(config.remote_storage_options))
    if not isinstance(rsm, RemoteStorageManager):
        missing = [name for name in ("copy_log_segment_data", "fetch_log_segment",
                                     "fetch_index", "delete_log_segment_data", "close")
                   if not callable(getattr(rsm, name, None))]
        raise ConfigError("remote.storage.manager",
                          f"{config['remote.storage.manager']!r} built {type(rsm).__name__}, "
                          f"which does not meet the RemoteStorageManager contract (no "
                          f"{', '.join(missing)})")
    store_name = config[METADATA_SETTING] or default_store_name(rsm)
    rlmm = registries.remote_metadata_manager_factory(store_name)(rsm, log_dir)
    if not isinstance(rlmm, RemoteLogMetadataStore):
        raise ConfigError(METADATA_SETTING,
                          f"{store_name!r} built {type(rlmm).__name__}, which does not meet "
                          f"the RemoteLogMetadataStore contract")
    cache = RemoteIndexCache(log_dir / CACHE_DIR_NAME,
                             config["remote.log.index.file.cache.total.size.bytes"], rsm)
    return RemoteLogManager(
        rsm, rlmm, cache, time_ms=time_ms,
        copy_threads=config["remote.log.manager.thread.pool.size"],
        reader_threads=config["remote.log.reader.threads"], events=events,
        limits=remote_limits(config),
        # A replicating node's manager keeps the high watermark of its replicas itself.
        replicated=not config["auto.high.watermark"],
    )


def remote_limits(config: RemoteSettings) -> RemoteLimits:
    """The RemoteLogManager's quotas, retries and timeouts from the broker settings."""
    prefix = "remote.log.manager."
    return RemoteLimits(
        copy_max_bytes_per_second=config[prefix + "copy.max.bytes.per.second"],
        copy_quota_window_num=config[prefix + "copy.quota.window.num"],
        copy_quota_window_size_s=config[prefix + "copy.quota.window.size.seconds"],
        fetch_max_bytes_per_second=config[prefix + "fetch.max.bytes.per.second"],
        fetch_quota_window_num=config[prefix + "fetch.quota.window.num"],
        fetch_quota_window_size_s=config[prefix + "fetch.quota.window.size.seconds"],
        retry_backoff_ms=config[prefix + "task.retry.backoff.ms"],
        retry_backoff_max_ms=config[prefix + "task.retry.backoff.max.ms"],
        retry_jitter=config[prefix + "task.retry.jitter"],
        request_timeout_ms=config["remote.storage.request.timeout.ms"],
        fetch_max_wait_ms=config["remote.fetch.max.wait.ms"],
        reader_max_pending=config["remote.log.reader.max.pending.tasks"],
        list_offsets_timeout_ms=config["remote.list.offsets.request.timeout.ms"],
    )
