"""Every storage metric tierlog exports: its Kafka name, kind, meaning and how it is read.

The one list the collector, ``tierlog metrics`` and the README's table come from. Readers run
on scrape only: counters from the engine's counter path (``log.stats``, the index cache's
``stats``, the RemoteLogManager's quotas), levels (sizes, segment counts, offsets, copy and
delete lag) straight from the logs and the tier's metadata. The ``scope`` says which samples
a metric has: one per partition (labels ``topic``, ``partition``), one per tiered partition,
or one for the whole LogManager (no labels).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from tierlog.plugins.metrics.names import Kind, prometheus_name
from tierlog.remote.api import RemoteLogSegmentState

if TYPE_CHECKING:
    from tierlog.log import Log
    from tierlog.manager import LogManager
    from tierlog.remote.api import RemoteLogSegmentMetadata
    from tierlog.remote.rlm import RemoteLogManager

__all__ = ["METRICS", "Metric", "Scrape", "Value"]

Scope = Literal["partition", "tiered", "manager"]
#: A gauge's or counter's value, or a timer's (count, total seconds).
Value = float | tuple[int, float]

_NS = 1e-9
_FINISHED = RemoteLogSegmentState.COPY_SEGMENT_FINISHED
_DELETE_STARTED = RemoteLogSegmentState.DELETE_SEGMENT_STARTED


class Scrape:
    """What one scrape reads, each at most once: the manager's logs, its RemoteLogManager and
    each tiered log's remote segments."""

    def __init__(self, manager: LogManager) -> None:
        self.manager = manager
        self.logs: list[Log] = [lg for _, lg in sorted(manager.logs().items())
                                if not lg.closed]
        self.rlm: RemoteLogManager | None = manager.remote_log_manager
        tiered = manager.tiered_logs() if self.rlm is not None else []
        self.tiered: list[Log] = sorted(tiered, key=lambda lg: (lg.topic, lg.partition))
        self._remote: dict[str, list[RemoteLogSegmentMetadata]] = {}

    def remote_segments(self, log_: Log) -> list[RemoteLogSegmentMetadata]:
        """The tier's segments of ``log_`` in every state but DELETE_SEGMENT_FINISHED."""
        name = log_.directory.name
        if name not in self._remote:
            assert self.rlm is not None
            from tierlog.remote.remote_reader import topic_id_partition
            tip = topic_id_partition(log_)
            self._remote[name] = list(self.rlm.rlmm.list_remote_log_segments(tip))
        return self._remote[name]

    def samples(self, scope: Scope) -> Iterator[tuple[tuple[str, ...], Log | None]]:
        """(label values, log) of each sample a metric of ``scope`` has."""
        if scope == "manager":
            yield (), None
            return
        for log_ in self.logs if scope == "partition" else self.tiered:
            yield (log_.topic, str(log_.partition)), log_


@dataclass(frozen=True, slots=True)
class Metric:
    """One exported metric. ``read(scrape, log)`` returns its value (``log`` is None for a
    manager-wide metric); ``mbean`` is Kafka's name (tierlog's own under ``tierlog.*``)."""

    mbean: str
    kind: Kind
    scope: Scope
    help: str
    read: Callable[[Scrape, Any], Value]
    prometheus: str = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "prometheus", prometheus_name(self.mbean, self.kind))

    @property
    def labels(self) -> tuple[str, ...]:
        return () if self.scope == "manager" else ("topic", "partition")

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


def _m(mbean: str, kind: Kind, scope: Scope, help: str,
       read: Callable[[Scrape, Any], Value]) -> Metric:
    return Metric(mbean, kind, scope, help, read)


_BT = "kafka.server:type=BrokerTopicMetrics,name="

#: Every metric, in the order they are exported and documented.
METRICS: tuple[Metric, ...] = (
    # -- the local log ------------------------------------------------------------------
    _m("kafka.log:type=Log,name=Size", "gauge", "partition",
       "Bytes of the partition's local segments.", lambda s, lg: lg.size_in_bytes),
    _m("kafka.log:type=Log,name=NumLogSegments", "gauge", "partition",
       "Local segments of the partition.", lambda s, lg: len(lg.segments)),
    _m("kafka.log:type=Log,name=LogStartOffset", "gauge", "partition",
       "The partition's log start offset.", lambda s, lg: lg.log_start_offset),
    _m("kafka.log:type=Log,name=LogEndOffset", "gauge", "partition",
       "The partition's log end offset.", lambda s, lg: lg.log_end_offset),
    _m(_BT + "MessagesInPerSec", "counter", "partition",
       "Records appended to the partition (every origin).",
       lambda s, lg: lg.stats.append_messages),
    _m(_BT + "BytesInPerSec", "counter", "partition",
       "Bytes of record batches appended to the partition (every origin).",
       lambda s, lg: lg.stats.append_bytes),
    _m("tierlog.log:type=LogAppendStats,name=GeneralAppendRateAndTimeMs", "timer", "partition",
       "Appends that took the general path (producer ids, compression, control batches, "
       "rolls) and their time; the plain producer hot path is counted in MessagesIn/BytesIn "
       "but not timed.",
       lambda s, lg: (lg.stats.general_appends, lg.stats.general_append_time_ns * _NS)),
    _m("kafka.log:type=LogFlushStats,name=LogFlushRateAndTimeMs", "timer", "partition",
       "Flushes (fsync up to a new recovery point) and their time.",
       lambda s, lg: (lg.stats.flushes, lg.stats.flush_time_ns * _NS)),
    _m("tierlog.log:type=Log,name=RollsPerSec", "counter", "partition",
       "Times the active segment was rolled.", lambda s, lg: lg.stats.rolls),
    # -- cleanup (retention and compaction) ----------------------------------------------
    _m("tierlog.log:type=LogCleaner,name=CleanupRateAndTimeMs", "timer", "partition",
       "Runs of the partition's cleanup policies (delete, compact) and their time.",
       lambda s, lg: (lg.stats.cleaner_runs, lg.stats.cleaner_time_ns * _NS)),
    _m("tierlog.log:type=LogCleaner,name=CompactedBytesReadPerSec", "counter", "partition",
       "Bytes of the segments compaction rewrote, before cleaning.",
       lambda s, lg: lg.stats.cleaner_bytes_before),
    _m("tierlog.log:type=LogCleaner,name=CompactedBytesWrittenPerSec", "counter", "partition",
       "Bytes of the segments compaction rewrote, after cleaning.",
       lambda s, lg: lg.stats.cleaner_bytes_after),
    _m("tierlog.log:type=LogCleaner,name=DeletedSegmentsPerSec", "counter", "partition",
       "Local segments deleted by retention (and the log start offset).",
       lambda s, lg: lg.stats.cleaner_segments_deleted),
    _m("tierlog.log:type=LogCleaner,name=DeletedBytesPerSec", "counter", "partition",
       "Bytes of the local segments deleted by retention.",
       lambda s, lg: lg.stats.cleaner_bytes_deleted),
    # -- the remote tier, per partition ----------------------------------------------------
    _m(_BT + "RemoteCopyBytesPerSec", "counter", "tiered",
       "Bytes of segments copied to the remote tier.", lambda s, lg: lg.stats.remote_copy_bytes),
    _m(_BT + "RemoteCopyRequestsPerSec", "counter", "tiered",
       "Segment copies to the remote tier started.",
       lambda s, lg: lg.stats.remote_copy_requests),
    _m(_BT + "RemoteCopyErrorsPerSec", "counter", "tiered",
       "Segment copies to the remote tier that failed.",
       lambda s, lg: lg.stats.remote_copy_errors),
    _m(_BT + "RemoteFetchBytesPerSec", "counter", "tiered",
       "Bytes of segment data read back from the remote tier.",
       lambda s, lg: lg.stats.remote_fetch_bytes),
    _m(_BT + "RemoteFetchRequestsPerSec", "counter", "tiered",
       "Reads served from the remote tier (below the local log start offset).",
       lambda s, lg: lg.stats.remote_fetch_requests),
    _m(_BT + "RemoteFetchErrorsPerSec", "counter", "tiered",
       "Reads from the remote tier that failed.", lambda s, lg: lg.stats.remote_fetch_errors),
    _m(_BT + "RemoteDeleteRequestsPerSec", "counter", "tiered",
       "Remote segment deletes started.", lambda s, lg: lg.stats.remote_delete_requests),
    _m(_BT + "RemoteDeleteErrorsPerSec", "counter", "tiered",
       "Remote segment deletes that failed.", lambda s, lg: lg.stats.remote_delete_errors),
    _m(_BT + "RemoteCopyLagBytes", "gauge", "tiered",
       "Bytes of closed segments below the last stable offset not yet copied to the tier.",
       lambda s, lg: _copy_lag(s, lg)[1]),
    _m(_BT + "RemoteCopyLagSegments", "gauge", "tiered",
       "Closed segments below the last stable offset not yet copied to the tier.",
       lambda s, lg: _copy_lag(s, lg)[0]),
    _m(_BT + "RemoteDeleteLagBytes", "gauge", "tiered",
       "Bytes of remote segments due for deletion or being deleted.",
       lambda s, lg: _delete_lag(s, lg)[1]),
    _m(_BT + "RemoteDeleteLagSegments", "gauge", "tiered",
       "Remote segments due for deletion or being deleted.",
       lambda s, lg: _delete_lag(s, lg)[0]),
    _m(_BT + "RemoteLogSizeBytes", "gauge", "tiered",
       "Bytes of the partition's committed remote segments.", _remote_size),
    _m(_BT + "RemoteLogMetadataCount", "gauge", "tiered",
       "Remote segment metadata entries of the partition (every state but deleted).",
       lambda s, lg: len(s.remote_segments(lg))),
    # -- the remote tier, whole manager -----------------------------------------------------
    _m("org.apache.kafka.storage.internals.log:type=RemoteStorageThreadPool,"
       "name=RemoteLogReaderTaskQueueSize", "gauge", "manager",
       "Remote reads waiting for a reader thread.", lambda s, _: _reader_queue(s)),
    _m("tierlog.log.remote:type=RemoteIndexCache,name=HitsPerSec", "counter", "manager",
       "Remote index lookups served by the local index cache.",
       lambda s, _: _cache_stat(s, "hits")),
    _m("tierlog.log.remote:type=RemoteIndexCache,name=MissesPerSec", "counter", "manager",
       "Remote index lookups that fetched the index from the tier.",
       lambda s, _: _cache_stat(s, "misses")),
    _m("tierlog.log.remote:type=RemoteIndexCache,name=EvictionsPerSec", "counter", "manager",
       "Remote segments' indexes evicted from the local index cache.",
       lambda s, _: _cache_stat(s, "evictions")),
    _m("tierlog.log.remote:type=RemoteIndexCache,name=SizeBytes", "gauge", "manager",
       "Bytes of the local remote-index cache.", lambda s, _: _cache_bytes(s)),
    _m("tierlog.log.remote:type=RemoteLogManager,name=CopyThrottleTimeMs", "counter",
       "manager", "Time copies waited for the copy quota "
       "(remote.log.manager.copy.max.bytes.per.second).",
       lambda s, _: _quota_throttle_ms(s, "copy_quota") / 1000),
)
