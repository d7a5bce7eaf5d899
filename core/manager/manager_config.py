"""ManagerConfig: broker-level settings of a LogManager, plus the default topic configuration.

One flat dict, as a Kafka ``server.properties``: broker keys (``log.flush.scheduler.interval.ms``),
topic defaults by topic name (``segment.bytes``) or broker synonym (``log.segment.bytes``).
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

from tierlog.cluster.replica_state import DEFAULT_REPLICA_LAG_TIME_MAX_MS
from tierlog.config import LONG_MAX, ConfigKey, LogConfig, topic_config_key
from tierlog.errors import ConfigError
from tierlog.remote.tier.options import (
    CONFIG_PREFIXES,
    MaskedOptions,
    backend_for_url,
    options_under,
)

#: Kafka's broker-level names for topic defaults.
BROKER_SYNONYMS: Mapping[str, str] = MappingProxyType({
    "log.segment.bytes": "segment.bytes",
    "log.roll.ms": "segment.ms",
    "log.roll.jitter.ms": "segment.jitter.ms",
    "log.index.size.max.bytes": "segment.index.bytes",
    "log.index.interval.bytes": "index.interval.bytes",
    "log.flush.interval.messages": "flush.messages",
    "log.flush.interval.ms": "flush.ms",
    "log.retention.ms": "retention.ms",
    "log.retention.bytes": "retention.bytes",
    "log.local.retention.ms": "local.retention.ms",
    "log.local.retention.bytes": "local.retention.bytes",
    "log.cleanup.policy": "cleanup.policy",
    "message.max.bytes": "max.message.bytes",
    "log.message.timestamp.type": "message.timestamp.type",
    "log.preallocate": "preallocate",
    "log.segment.delete.delay.ms": "file.delete.delay.ms",
    "log.cleaner.delete.retention.ms": "delete.retention.ms",
    "log.cleaner.min.compaction.lag.ms": "min.compaction.lag.ms",
    "log.cleaner.max.compaction.lag.ms": "max.compaction.lag.ms",
    "log.cleaner.min.cleanable.ratio": "min.cleanable.dirty.ratio",
    "compression.type": "compression.type",
})

BROKER_CONFIG_KEYS: Mapping[str, ConfigKey] = MappingProxyType({
    key.name: key
    for key in (
        ConfigKey("num.recovery.threads.per.data.dir", "int", 1,
                  "Threads per log dir that load and recover partitions.", 1),
        ConfigKey("num.partitions", "int", 1, "Partitions of a topic created without a count.", 1),
        ConfigKey("log.flush.scheduler.interval.ms", "long", LONG_MAX,
                  "How often logs are checked for flush.ms (default: never).", 1),
        ConfigKey("log.flush.offset.checkpoint.interval.ms", "int", 60_000,
                  "How often the recovery point checkpoint is written.", 0),
        ConfigKey("log.flush.start.offset.checkpoint.interval.ms", "int", 60_000,
                  "How often the log start offset checkpoint is written.", 0),
        ConfigKey("replica.high.watermark.checkpoint.interval.ms", "long", 5_000,
                  "How often high watermarks are checkpointed.", 1),
        ConfigKey("replica.lag.time.max.ms", "long", DEFAULT_REPLICA_LAG_TIME_MAX_MS,
                  "How long an in-sync follower may go without reaching the leader's log end "
                  "before the leader drops it from the in-sync set (replication).", 0),
        ConfigKey("log.retention.check.interval.ms", "long", 300_000,
                  "How often retention is enforced.", 1),
        ConfigKey("log.cleaner.enable", "bool", True, "Run the log cleaner for compacted topics."),
        ConfigKey("log.cleaner.backoff.ms", "long", 15_000,
                  "Sleep between cleaner runs when there is nothing to clean.", 0),
        ConfigKey("log.cleaner.dedupe.buffer.size", "long", 128 * 1024 * 1024,
                  "Memory for the cleaner's offset map.", 1024),
        ConfigKey("producer.id.expiration.ms", "int", 86_400_000,
                  "Idle producer ids are forgotten after this long.", 1),
        ConfigKey("auto.high.watermark", "bool", True,
                  "Advance the high watermark to the log end on every append (one replica)."),
        ConfigKey("remote.log.storage.system.enable", "bool", True,
                  "Allow topics to enable tiered storage."),
        ConfigKey("remote.storage.manager", "string", "local",
                  "Name of the RemoteStorageManager plugin (local, s3, ...); unset: the one "
                  "remote.storage.url's scheme implies (s3:// s3, file:// or a path local)."),
        ConfigKey("remote.log.metadata.manager.class.name", "string", "",
                  "Name of the segment metadata store plugin (tier, log-dir, ...); empty: "
                  "tier for an fsspec-based RemoteStorageManager, else log-dir."),
        ConfigKey("remote.storage.url", "string", "",
                  "fsspec URL of the remote tier (file:///srv/tier, s3://bucket/prefix)."),
        ConfigKey("remote.log.manager.task.interval.ms", "long", 30_000,
                  "How often tiering (copy, local and remote retention) runs.", 1),
        ConfigKey("remote.log.manager.thread.pool.size", "int", 2,
                  "Threads that copy segments to the remote tier.", 1),
        ConfigKey("remote.log.tail.check.interval.ms", "long", 100,
                  "tierlog's own: how often the scheduler looks for partitions whose tail is "
                  "due for publishing (remote.log.tail.ms); a check sends no request.", 1),
        ConfigKey("remote.log.reader.threads", "int", 10,
                  "Threads that serve reads from the remote tier (Kafka's default 10).", 1),
        ConfigKey("remote.log.reader.max.pending.tasks", "int", 100,
                  "Reads of the remote tier that may wait for a reader thread; one more is "
                  "rejected at once with the retriable RemoteReaderBusyError.", 1),
        ConfigKey("remote.fetch.max.wait.ms", "int", 500,
                  "How long a read of the remote tier is waited for; then Log.read raises "
                  "the retriable RemoteFetchTimeoutError instead of hanging.", 1),
        ConfigKey("remote.list.offsets.request.timeout.ms", "long", 30_000,
                  "How long a lookup of a timestamp in the remote tier (ListOffsets, "
                  "offset_for_timestamp) is waited for; then it raises the retriable "
                  "RemoteFetchTimeoutError.", 1),
        ConfigKey("remote.log.manager.copy.max.bytes.per.second", "long", LONG_MAX,
                  "Bytes per second segments are copied to the remote tier at most, over "
                  "every copy thread (default: unlimited); a copy waits while it is exceeded.",
                  1),
        ConfigKey("remote.log.manager.copy.quota.window.num", "int", 11,
                  "Samples the copy rate is measured over.", 1),
        ConfigKey("remote.log.manager.copy.quota.window.size.seconds", "int", 1,
                  "Time span of each sample of the copy rate.", 1),
        ConfigKey("remote.log.manager.fetch.max.bytes.per.second", "long", LONG_MAX,
                  "Bytes per second read from the remote tier at most (default: unlimited); "
                  "a read while it is exceeded raises the retriable "
                  "RemoteFetchQuotaExceededError.", 1),
        ConfigKey("remote.log.manager.fetch.quota.window.num", "int", 11,
                  "Samples the fetch rate is measured over.", 1),
        ConfigKey("remote.log.manager.fetch.quota.window.size.seconds", "int", 1,
                  "Time span of each sample of the fetch rate.", 1),
        ConfigKey("remote.log.manager.task.retry.backoff.ms", "long", 500,
                  "First delay before a failed tiering run of a partition is retried.", 1),
        ConfigKey("remote.log.manager.task.retry.backoff.max.ms", "long", 30_000,
                  "Largest delay between retries of a failing partition's tiering (the delay "
                  "doubles per failure).", 1),
        ConfigKey("remote.log.manager.task.retry.jitter", "double", 0.2,
                  "Random fraction (+/-) applied to each retry delay.", 0, 0.5),
        ConfigKey("remote.storage.request.timeout.ms", "long", 30_000,
                  "tierlog's own: how long one call to the remote tier (a segment copy, a "
                  "delete, a metadata update) is waited for before it is abandoned and "
                  "retried with backoff.", 1),
        ConfigKey("remote.log.copy.lag.max.bytes", "long", LONG_MAX,
                  "tierlog's own: local bytes of a tiered partition not yet copied to the "
                  "remote tier beyond which client appends raise the retriable "
                  "CopyLagExceededError (default: unlimited).", 0),
        ConfigKey("remote.log.index.file.cache.total.size.bytes", "long", 1 << 30,
                  "Disk budget of the cache of remote indexes.", 1),
    )
})


#: The remote storage plugins a ``remote.storage.url`` implies when ``remote.storage.manager``
#: is not set (see :func:`tierlog.remote.tier.options.backend_for_url`); another scheme keeps the
#: default.
_INFERRED_MANAGERS = frozenset({"s3", "local"})


class ManagerConfig:
    """Broker settings, topic defaults and remote storage options, split from one dict.

    Unknown keys raise ConfigError naming the key; ``remote.storage.options.<name>`` (or
    Kafka's ``rsm.config.<name>``) keys are kept for the remote storage plugin, which checks
    them (tierlog.remote.tier.options).
    """

    def __init__(self, values: Mapping[str, Any] | None = None) -> None:
        broker: dict[str, Any] = {n: k.default for n, k in BROKER_CONFIG_KEYS.items()}
        topic: dict[str, Any] = {}
        values = values or {}
        options = options_under(CONFIG_PREFIXES, values)
        for name, raw in values.items():
            if name.startswith(CONFIG_PREFIXES):
                continue
            if name in BROKER_CONFIG_KEYS:
                broker[name] = BROKER_CONFIG_KEYS[name].parse(raw)
            elif topic_config_key(name) is not None:
                topic[name] = raw
            elif name in BROKER_SYNONYMS:
                topic.setdefault(BROKER_SYNONYMS[name], raw)
            else:
                raise ConfigError(name, "unknown configuration key")
        if "remote.storage.manager" not in values and broker["remote.storage.url"]:
            # The plugin the URL's scheme calls for (s3:// s3, file:// or a path local), as
            # the CLI's restore and scrub find it: an s3:// URL alone must not mean local.
            implied = backend_for_url(broker["remote.storage.url"])
            if implied in _INFERRED_MANAGERS:
                broker["remote.storage.manager"] = implied
        self.broker: Mapping[str, Any] = MappingProxyType(broker)
        self.topic_defaults = LogConfig(topic)
        #: The storage options (prefix removed), for the remote storage plugin to parse; the
        #: repr masks secrets.
        self.remote_storage_options: MaskedOptions = MaskedOptions(options)

    def __getitem__(self, name: str) -> Any:  # noqa: ANN401 - its type is the key's (int...)
        if name in self.broker:
            return self.broker[name]
        return self.topic_defaults[name]
