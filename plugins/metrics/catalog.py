"""Every metric tierlog exports: its Kafka MBean name, kind, meaning and how it is read.

The one list the collector, ``tierlog metrics`` and docs/metrics.md's table come from. Readers
run on scrape only: counters from the engine's counter path (``log.stats``, the index cache's
``stats``, the RemoteLogManager's quotas, the server's ``request_stats``), levels (sizes,
segment counts, offsets, copy and delete lag) straight from the logs and the tier's metadata.

The ``kind`` says which JMX attributes a metric has, as Kafka's: a meter its ``Count``, a
gauge its ``Value``, a histogram its ``Count`` and percentiles (milliseconds), an
``attribute`` metric (Kafka's own metrics library) one named attribute. The ``scope`` says
which samples it has (:data:`SCOPE_TAGS`): one per partition (tags ``topic``,
``partition``), one per topic plus one for all topics (Kafka's BrokerTopicMetrics), one per
request type, per listener, or one; the ``broker*``, ``request`` and ``listener`` scopes are
the server's and are exported only when a server is given. Internal topics' partitions that
never held a record are left out unless asked for (50 empty ``__consumer_offsets``
partitions would outnumber everything else).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from tierlog.common.stats import Histogram
from tierlog.remote.api import RemoteLogSegmentState

if TYPE_CHECKING:
    from tierlog.log.log import Log
    from tierlog.manager.log_manager import LogManager
    from tierlog.remote.api import RemoteLogSegmentMetadata
    from tierlog.remote.rlm.rlm import RemoteLogManager
    from tierlog.server.request_stats import RequestStats, TopicCounts
    from tierlog.server.server import Server

__all__ = ["METRICS", "RETIRED_STATS", "SCOPE_TAGS", "Kind", "Metric", "Retired", "Scope",
           "Scrape", "TopicLogs", "Value"]

Kind = Literal["meter", "gauge", "histogram", "attribute"]
Scope = Literal["partition", "topic", "tiered_topic", "manager", "broker", "broker_topic",
                "request", "listener"]
#: A meter's, gauge's or attribute's value, or a histogram's histograms (merged).
Value = float | list[Histogram]

#: The tags of each scope's samples (the per-topic scopes also have one sample without).
SCOPE_TAGS: dict[Scope, tuple[str, ...]] = {
    "partition": ("topic", "partition"), "topic": ("topic",), "tiered_topic": ("topic",),
    "manager": (), "broker": (), "broker_topic": ("topic",), "request": ("request",),
    "listener": ("listener", "networkProcessor"),
}
_SERVER_SCOPES = frozenset({"broker", "broker_topic", "request", "listener"})

#: The ``log.stats`` counters the all-topics samples sum: a deleted topic's last counts stay in
#: them (:class:`Retired`), so they never go down (a drop reads as a counter reset).
RETIRED_STATS = ("append_messages", "append_bytes", "remote_copy_bytes",
                 "remote_copy_requests", "remote_copy_errors", "remote_fetch_bytes",
                 "remote_fetch_requests", "remote_fetch_errors", "remote_delete_requests",
                 "remote_delete_errors")

_FINISHED = RemoteLogSegmentState.COPY_SEGMENT_FINISHED


class Retired:
    """The counts of the partitions that are gone (their topic deleted), for the all-topics
    samples: each scrape :meth:`update` s it with the logs it sees, and a partition seen
    before but not now adds its last counts. Thread-safe (two scrapes may run at once)."""

    def __init__(self) -> None:
        self.counts: dict[str, float] = dict.fromkeys(RETIRED_STATS, 0.0)
        #: The flushes of the partitions that are gone (their count and total only).
        self.flush_time = Histogram()
        self._last: dict[tuple[str | None, str, int], tuple[int, ...]] = {}
        self._lock = threading.Lock()

    def update(self, logs: list[Log]) -> None:
        seen: dict[tuple[str | None, str, int], tuple[int, ...]] = {
            (lg.topic_id, lg.topic, lg.partition): (
                *(getattr(lg.stats, name) for name in RETIRED_STATS),
                lg.stats.flush_time.count, lg.stats.flush_time.total_ns) for lg in logs}
        with self._lock:
            for key, last in self._last.items():
                if key not in seen:
                    for name, value in zip(RETIRED_STATS, last, strict=False):
                        self.counts[name] += value
                    self.flush_time.count += last[-2]
                    self.flush_time.total_ns += last[-1]
            self._last = seen
_DELETE_STARTED = RemoteLogSegmentState.DELETE_SEGMENT_STARTED


@dataclass(frozen=True, slots=True)
class TopicLogs:
    """A per-topic sample's subject: the topic (None: all topics) and its logs."""

    topic: str | None
    logs: list[Log]


class Scrape:
    """What one scrape reads, each at most once: the manager's logs, its RemoteLogManager,
    each tiered log's remote segments, and the server (if any)."""

    def __init__(self, manager: LogManager, server: Server | None = None,
                 idle_internal: bool = False, retired: Retired | None = None) -> None:
        from tierlog.server.coordinator.internal_topics import is_internal

        self.manager = manager
        self.server = server
        self.request_stats: RequestStats | None = (
            server.services.request_stats if server is not None else None)
        self.all_logs: list[Log] = [lg for _, lg in sorted(manager.logs().items())
                                    if not lg.closed]
        self.retired = retired or Retired()
        self.retired.update(self.all_logs)
        self.logs = self.all_logs if idle_internal else [
            lg for lg in self.all_logs if lg.log_end_offset > 0 or not is_internal(lg.topic)]
        self.rlm: RemoteLogManager | None = manager.remote_log_manager
        shown = {id(lg) for lg in self.logs}
        tiered = manager.tiered_logs() if self.rlm is not None else []
        self.tiered: list[Log] = sorted((lg for lg in tiered if id(lg) in shown),
                                        key=lambda lg: (lg.topic, lg.partition))
        self._remote: dict[str, list[RemoteLogSegmentMetadata]] = {}

    def remote_segments(self, log_: Log) -> list[RemoteLogSegmentMetadata]:
        """The tier's segments of ``log_`` in every state but DELETE_SEGMENT_FINISHED."""
        name = log_.directory.name
        if name not in self._remote:
            assert self.rlm is not None
            from tierlog.remote.rlm.remote_reader import topic_id_partition
            tip = topic_id_partition(log_)
            self._remote[name] = list(self.rlm.rlmm.list_remote_log_segments(tip))
        return self._remote[name]

    def samples(self, scope: Scope) -> Iterator[tuple[tuple[str, ...], tuple[str, ...], Any]]:
        """(tag keys, tag values, subject) of each sample a metric of ``scope`` has."""
        if scope in _SERVER_SCOPES and self.server is None:
            return
        keys = SCOPE_TAGS[scope]
        if scope in ("manager", "broker"):
            yield (), (), None
        elif scope == "partition":
            for lg in self.logs:
                yield keys, (lg.topic, str(lg.partition)), lg
        elif scope == "topic" or (scope == "tiered_topic" and self.rlm is not None):
            logs = self.logs if scope == "topic" else self.tiered
            by_topic: dict[str, list[Log]] = {}
            for lg in logs:
                by_topic.setdefault(lg.topic, []).append(lg)
            for topic, topic_logs in by_topic.items():
                yield keys, (topic,), TopicLogs(topic, topic_logs)
            yield (), (), TopicLogs(None, logs)
        elif scope == "broker_topic":
            assert self.request_stats is not None
            shown = {lg.topic for lg in self.logs}
            for topic, counts in sorted(self.request_stats.topics().items()):
                if topic in shown:
                    yield keys, (topic,), counts
            yield (), (), self.request_stats.all_topics
        elif scope == "request":
            assert self.request_stats is not None
            for name, times in self.request_stats.request_times().items():
                yield keys, (name,), [times]
        elif scope == "listener":
            assert self.server is not None
            listener = self.server.config.listener.name
            yield keys, (listener, "0"), None


@dataclass(frozen=True, slots=True)
class Metric:
    """One exported metric. ``read(scrape, subject)`` returns its value for one sample (the
    subject is what :meth:`Scrape.samples` yields: a Log, a TopicLogs, ...); ``mbean`` is
    Kafka's MBean name without tags (tierlog's own under ``tierlog.*``); ``attribute`` names
    the one attribute of an ``attribute`` metric."""

    mbean: str
    kind: Kind
    scope: Scope
    help: str
    read: Callable[[Scrape, Any], Value]
    attribute: str = ""

    @property
    def kafka_name(self) -> bool:
        """Whether the name is Kafka's own (else tierlog's, for what Kafka does not export)."""
        return not self.mbean.startswith("tierlog.")


def _copy_lag(s: Scrape, lg: Log) -> tuple[int, int]:
    """(segments, bytes) closed, below the last stable offset and not yet in the tier: what
    the next tiering run would copy (Kafka's RemoteCopyLag*)."""
    assert s.rlm is not None
    with lg.lock:
        candidates = s.rlm.copy_candidates(lg)
        return len(candidates), sum(segment.size for segment, _ in candidates)


def _delete_lag(s: Scrape, lg: Log) -> tuple[int, int]:
    """(segments, bytes) in the tier whose deletion is due or under way: DELETE_STARTED, or
    committed but wholly below the log start offset (Kafka's RemoteDeleteLag*)."""
    doomed = [m for m in s.remote_segments(lg)
              if m.state is _DELETE_STARTED
              or (m.state is _FINISHED and m.end_offset < lg.log_start_offset)]
    return len(doomed), sum(m.segment_size_in_bytes for m in doomed)


def _remote_size(s: Scrape, lg: Log) -> int:
    return sum(m.segment_size_in_bytes for m in s.remote_segments(lg) if m.state is _FINISHED)


def _quota_throttle_ms(s: Scrape, name: str) -> float:
    quota = getattr(s.rlm, name, None)
    return float(getattr(quota, "throttle_time_ms_total", 0.0))


def _reader_queue(s: Scrape) -> float:
    size = getattr(s.rlm, "reader_queue_size", None)
    return float(size()) if callable(size) else 0.0


def _cache_stat(s: Scrape, name: str) -> float:
    stats = getattr(getattr(s.rlm, "index_cache", None), "stats", None)
    return float(getattr(stats, name, 0))


def _cache_bytes(s: Scrape) -> float:
    cache = getattr(s.rlm, "index_cache", None)
    return float(cache.size_in_bytes) if cache is not None else 0.0


def _per_topic(read: Callable[[Scrape, Log], float]) -> Callable[[Scrape, TopicLogs], float]:
    """A per-partition reading summed over a topic's (or every topic's) logs."""
    return lambda s, t: float(sum(read(s, lg) for lg in t.logs))


def _stat(name: str) -> Callable[[Scrape, TopicLogs], float]:
    """A ``log.stats`` counter summed over a topic's logs (all topics': and the gone ones')."""
    def read(s: Scrape, t: TopicLogs) -> float:
        gone = s.retired.counts[name] if t.topic is None else 0.0
        return float(sum(getattr(lg.stats, name) for lg in t.logs)) + gone
    return read


def _counts(name: str) -> Callable[[Scrape, TopicCounts], float]:
    """A server counter of a topic (or of all topics)."""
    return lambda s, counts: float(getattr(counts, name))


_BT = "kafka.server:type=BrokerTopicMetrics,name="
_CLEANER = "tierlog.log:type=LogCleaner,name="
_CACHE = "tierlog.remote:type=RemoteIndexCache,name="

#: Every metric, in the order they are exported and documented.
METRICS: tuple[Metric, ...] = (
    # -- the local log ------------------------------------------------------------------
    Metric("kafka.log:type=Log,name=Size", "gauge", "partition",
           "Bytes of the partition's local segments.", lambda s, lg: lg.size_in_bytes),
    Metric("kafka.log:type=Log,name=NumLogSegments", "gauge", "partition",
           "Local segments of the partition.", lambda s, lg: len(lg.segments)),
    Metric("kafka.log:type=Log,name=LogStartOffset", "gauge", "partition",
           "The partition's log start offset.", lambda s, lg: lg.log_start_offset),
    Metric("kafka.log:type=Log,name=LogEndOffset", "gauge", "partition",
           "The partition's log end offset.", lambda s, lg: lg.log_end_offset),
    Metric(_BT + "MessagesInPerSec", "meter", "topic",
           "Records appended (every origin: clients, coordinators, the CLI).",
           _stat("append_messages")),
    Metric(_BT + "BytesInPerSec", "meter", "topic",
           "Bytes of record batches appended (every origin).", _stat("append_bytes")),
    Metric("kafka.log:type=LogFlushStats,name=LogFlushRateAndTimeMs", "histogram", "manager",
           "Flushes (fsync up to a new recovery point) of every log and their time (ms).",
           lambda s, _: [*(lg.stats.flush_time for lg in s.all_logs), s.retired.flush_time]),
    Metric("tierlog.log:type=LogAppendStats,name=GeneralAppendRateAndTimeMs", "histogram",
           "topic", "Appends that took the general path (producer ids, compression, "
           "control batches, rolls) and their time (ms); the plain producer hot path is "
           "counted in MessagesIn/BytesIn but not timed.",
           lambda s, t: [lg.stats.general_append_time for lg in t.logs]),
    Metric("tierlog.log:type=Log,name=RollsPerSec", "meter", "partition",
           "Times the active segment was rolled.", lambda s, lg: lg.stats.rolls),
    # -- cleanup (retention and compaction) ----------------------------------------------
    Metric(_CLEANER + "CleanupRateAndTimeMs", "histogram", "topic",
           "Runs of the cleanup policies (delete, compact) over the topic's partitions and "
           "their time (ms).", lambda s, t: [lg.stats.cleanup_time for lg in t.logs]),
    Metric(_CLEANER + "CompactedBytesReadPerSec", "meter", "partition",
           "Bytes of the segments compaction rewrote, before cleaning.",
           lambda s, lg: lg.stats.cleaner_bytes_before),
    Metric(_CLEANER + "CompactedBytesWrittenPerSec", "meter", "partition",
           "Bytes of the segments compaction rewrote, after cleaning.",
           lambda s, lg: lg.stats.cleaner_bytes_after),
    Metric(_CLEANER + "DeletedSegmentsPerSec", "meter", "partition",
           "Local segments deleted by retention (and the log start offset).",
           lambda s, lg: lg.stats.cleaner_segments_deleted),
    Metric(_CLEANER + "DeletedBytesPerSec", "meter", "partition",
           "Bytes of the local segments deleted by retention.",
           lambda s, lg: lg.stats.cleaner_bytes_deleted),
    # -- the broker: requests per topic, partitions, controller, connections -------------
    Metric(_BT + "BytesOutPerSec", "meter", "broker_topic",
           "Bytes of records sent to consumers in Fetch responses.", _counts("bytes_out")),
    Metric(_BT + "TotalProduceRequestsPerSec", "meter", "broker_topic",
           "Partitions produced to (one per partition of each Produce request).",
           _counts("total_produce")),
    Metric(_BT + "FailedProduceRequestsPerSec", "meter", "broker_topic",
           "Partitions whose produce failed on the broker's side (not for the client's "
           "own errors: an unknown partition, a too large or corrupt batch).",
           _counts("failed_produce")),
    Metric(_BT + "TotalFetchRequestsPerSec", "meter", "broker_topic",
           "Partitions fetched from (one per partition of each Fetch response).",
           _counts("total_fetch")),
    Metric(_BT + "FailedFetchRequestsPerSec", "meter", "broker_topic",
           "Partitions whose fetch failed on the broker's side (not for the client's own "
           "errors: an unknown partition, an offset out of range).", _counts("failed_fetch")),
    Metric("kafka.network:type=RequestMetrics,name=TotalTimeMs", "histogram", "request",
           "Requests answered, by type, and their total time (ms) from being taken off the "
           "connection to the response being written.", lambda s, times: times),
    Metric("kafka.server:type=socket-server-metrics", "attribute", "listener",
           "Connections open on the listener.",
           lambda s, _: float(s.request_stats.connections) if s.request_stats else 0.0,
           attribute="connection-count"),
    Metric("kafka.server:type=ReplicaManager,name=PartitionCount", "gauge", "manager",
           "Partitions of every topic (internal ones included).",
           lambda s, _: len(s.all_logs)),
    Metric("kafka.server:type=ReplicaManager,name=LeaderCount", "gauge", "manager",
           "Partitions this node leads (all of them: a single node).",
           lambda s, _: len(s.all_logs)),
    Metric("kafka.server:type=ReplicaManager,name=UnderReplicatedPartitions", "gauge",
           "manager", "Partitions with fewer in-sync replicas than replicas (always 0: one "
           "node is every partition's only replica).", lambda s, _: 0),
    Metric("kafka.controller:type=KafkaController,name=ActiveControllerCount", "gauge",
           "broker", "Whether this node is the active controller (1: a single node is).",
           lambda s, _: 1),
    Metric("kafka.controller:type=KafkaController,name=OfflinePartitionsCount", "gauge",
           "broker", "Partitions without a leader (always 0 on a single node).",
           lambda s, _: 0),
    # -- the remote tier, per topic ---------------------------------------------------------
    Metric(_BT + "RemoteCopyBytesPerSec", "meter", "tiered_topic",
           "Bytes of segments copied to the remote tier.", _stat("remote_copy_bytes")),
    Metric(_BT + "RemoteCopyRequestsPerSec", "meter", "tiered_topic",
           "Segment copies to the remote tier started.", _stat("remote_copy_requests")),
    Metric(_BT + "RemoteCopyErrorsPerSec", "meter", "tiered_topic",
           "Segment copies to the remote tier that failed.", _stat("remote_copy_errors")),
    Metric(_BT + "RemoteFetchBytesPerSec", "meter", "tiered_topic",
           "Bytes of segment data read back from the remote tier.",
           _stat("remote_fetch_bytes")),
    Metric(_BT + "RemoteFetchRequestsPerSec", "meter", "tiered_topic",
           "Reads served from the remote tier (below the local log start offset).",
           _stat("remote_fetch_requests")),
    Metric(_BT + "RemoteFetchErrorsPerSec", "meter", "tiered_topic",
           "Reads from the remote tier that failed.", _stat("remote_fetch_errors")),
    Metric(_BT + "RemoteDeleteRequestsPerSec", "meter", "tiered_topic",
           "Remote segment deletes started.", _stat("remote_delete_requests")),
    Metric(_BT + "RemoteDeleteErrorsPerSec", "meter", "tiered_topic",
           "Remote segment deletes that failed.", _stat("remote_delete_errors")),
    Metric(_BT + "RemoteCopyLagBytes", "gauge", "tiered_topic",
           "Bytes of closed segments below the last stable offset not yet copied to the tier.",
           _per_topic(lambda s, lg: _copy_lag(s, lg)[1])),
    Metric(_BT + "RemoteCopyLagSegments", "gauge", "tiered_topic",
           "Closed segments below the last stable offset not yet copied to the tier.",
           _per_topic(lambda s, lg: _copy_lag(s, lg)[0])),
    Metric(_BT + "RemoteDeleteLagBytes", "gauge", "tiered_topic",
           "Bytes of remote segments due for deletion or being deleted.",
           _per_topic(lambda s, lg: _delete_lag(s, lg)[1])),
    Metric(_BT + "RemoteDeleteLagSegments", "gauge", "tiered_topic",
           "Remote segments due for deletion or being deleted.",
           _per_topic(lambda s, lg: _delete_lag(s, lg)[0])),
    Metric(_BT + "RemoteLogSizeBytes", "gauge", "tiered_topic",
           "Bytes of the committed remote segments.", _per_topic(_remote_size)),
    Metric(_BT + "RemoteLogMetadataCount", "gauge", "tiered_topic",
           "Remote segment metadata entries (every state but deleted).",
           _per_topic(lambda s, lg: len(s.remote_segments(lg)))),
    # -- the remote tier, whole manager -----------------------------------------------------
    Metric("tierlog.remote:type=RemoteStorageThreadPool,name=RemoteLogReaderTaskQueueSize",
           "gauge", "manager", "Remote reads waiting for a reader thread (Kafka's "
           "org.apache.kafka.storage.internals.log domain, which the rules do not export).",
           lambda s, _: _reader_queue(s)),
    Metric(_CACHE + "HitsPerSec", "meter", "manager",
           "Remote index lookups served by the local index cache.",
           lambda s, _: _cache_stat(s, "hits")),
    Metric(_CACHE + "MissesPerSec", "meter", "manager",
           "Remote index lookups that fetched the index from the tier.",
           lambda s, _: _cache_stat(s, "misses")),
    Metric(_CACHE + "EvictionsPerSec", "meter", "manager",
           "Remote segments' indexes evicted from the local index cache.",
           lambda s, _: _cache_stat(s, "evictions")),
    Metric(_CACHE + "SizeBytes", "gauge", "manager",
           "Bytes of the local remote-index cache.", lambda s, _: _cache_bytes(s)),
    Metric("tierlog.remote:type=RemoteLogManager,name=CopyThrottleMsPerSec", "meter",
           "manager", "Milliseconds copies waited for the copy quota "
           "(remote.log.manager.copy.max.bytes.per.second).",
           lambda s, _: _quota_throttle_ms(s, "copy_quota")),
)
