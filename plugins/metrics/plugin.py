"""The ``metrics`` plugin: counts lifecycle events the engine does not count itself.

Registered through the ``tierlog`` entry point ``metrics``. Its event hooks count local segment
deletions by reason (retention, truncation, log start offset, ...), which no engine counter
splits that way, for :class:`EventCollector`. The hooks only add to counters under a short
lock; like every event hook they run after the log's lock is released, and a failure in them
is logged and skipped by the engine's event delivery.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import TYPE_CHECKING

from prometheus_client.core import CounterMetricFamily, Metric
from prometheus_client.registry import Collector

from tierlog.events import SegmentDeleted
from tierlog.hookspecs import hookimpl
from tierlog.plugins.metrics.names import prometheus_name

if TYPE_CHECKING:
    from tierlog.manager import LogManager

__all__ = ["DELETED_BYTES", "DELETED_SEGMENTS", "EVENTS", "EventCollector", "EventCounts"]

#: Kafka-shaped names of the event metrics (tierlog's own: Kafka has no such split).
DELETED_SEGMENTS = "tierlog.log:type=Log,name=SegmentsDeletedPerSec"
DELETED_BYTES = "tierlog.log:type=Log,name=SegmentBytesDeletedPerSec"


#: (topic id, topic, partition, reason): the topic id tells apart two managers' topics of the
#: same name in one process, and a topic deleted and created again.
EventKey = tuple[str | None, str, int, str]


class EventCounts:
    """Local segment deletions by (topic id, topic, partition, reason): [segments, bytes].
    Process-wide (events carry no manager); collectors keep the partitions of their own
    manager, by topic id."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._deleted: dict[EventKey, list[int]] = {}

    def segment_deleted(self, event: SegmentDeleted) -> None:
        key = (event.topic_id, event.topic, event.partition, event.reason)
        with self._lock:
            counts = self._deleted.setdefault(key, [0, 0])
            counts[0] += 1
            counts[1] += event.size_in_bytes

    def deleted(self) -> dict[EventKey, tuple[int, int]]:
        with self._lock:
            return {key: (c[0], c[1]) for key, c in self._deleted.items()}


#: The counts of this process's events.
EVENTS = EventCounts()


@hookimpl
def tierlog_segment_deleted(event: SegmentDeleted) -> None:
    EVENTS.segment_deleted(event)


class EventCollector(Collector):
    """The event counts of one LogManager's partitions, labelled topic, partition, reason."""

    def __init__(self, manager: LogManager, counts: EventCounts = EVENTS) -> None:
        self.manager = manager
        self.counts = counts

    def collect(self) -> Iterator[Metric]:
        ours = {(lg.topic_id, topic, partition)
                for (topic, partition), lg in self.manager.logs().items()}
        labels = ["topic", "partition", "reason"]
        segments = CounterMetricFamily(
            prometheus_name(DELETED_SEGMENTS, "counter").removesuffix("_total"),
            "Local segments that left the log, by reason.", labels=labels)
        size = CounterMetricFamily(
            prometheus_name(DELETED_BYTES, "counter").removesuffix("_total"),
            "Bytes of the local segments that left the log, by reason.", labels=labels)
        for (topic_id, topic, partition, reason), (count, nbytes) in sorted(
                self.counts.deleted().items(), key=lambda item: item[0][1:]):
            if (topic_id, topic, partition) in ours:
                segments.add_metric([topic, str(partition), reason], count)
                size.add_metric([topic, str(partition), reason], nbytes)
        yield segments
        yield size
