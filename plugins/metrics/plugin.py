"""The ``metrics`` plugin: counts lifecycle events the engine does not count itself.

Registered through the ``tierlog`` entry point ``metrics``. Its event hooks count local segment
deletions by reason (retention, truncation, log start offset, ...), which no engine counter
splits that way, for :class:`EventCollector` (per topic and reason). The hooks only add to
counters under a short lock; like every event hook they run after the log's lock is released, and a
failure in them is logged and skipped by the engine's event delivery.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import TYPE_CHECKING

from prometheus_client.core import CounterMetricFamily, Metric
from prometheus_client.registry import Collector

from tierlog.events import SegmentDeleted
from tierlog.hookspecs import hookimpl
from tierlog.plugins.metrics.names import export

if TYPE_CHECKING:
    from tierlog.manager.log_manager import LogManager

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


def _family(mbean: str) -> str:
    """The counter family of a meter tagged topic and reason (named by the rules, which
    take at most two tags: the partitions of a topic are summed)."""
    exported = export(f"{mbean},topic=t,reason=r", "Count")
    assert exported is not None, mbean
    return exported.name.removesuffix("_total")


class EventCollector(Collector):
    """The event counts of one LogManager's topics, labelled topic and reason."""

    def __init__(self, manager: LogManager, counts: EventCounts = EVENTS) -> None:
        self.manager = manager
        self.counts = counts

    def collect(self) -> Iterator[Metric]:
        ours = {(lg.topic_id, topic, partition)
                for (topic, partition), lg in self.manager.logs().items()}
        totals: dict[tuple[str, str], list[int]] = {}
        for (topic_id, topic, partition, reason), (count, nbytes) in \
                self.counts.deleted().items():
            if (topic_id, topic, partition) in ours:
                total = totals.setdefault((topic, reason), [0, 0])
                total[0] += count
                total[1] += nbytes
        labels = ["topic", "reason"]
        segments = CounterMetricFamily(
            _family(DELETED_SEGMENTS), "Local segments that left the log, by reason.",
            labels=labels)
        size = CounterMetricFamily(
            _family(DELETED_BYTES), "Bytes of the local segments that left the log, by reason.",
            labels=labels)
        for (topic, reason), (count, nbytes) in sorted(totals.items()):
            segments.add_metric([topic, reason], count)
            size.add_metric([topic, reason], nbytes)
        yield segments
        yield size
