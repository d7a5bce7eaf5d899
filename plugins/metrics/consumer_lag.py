"""Consumer-group lag as kafka-exporter (github.com/danielqsj/kafka_exporter) names it.

Kafka's broker has no MBean for a group's lag (consumers report their own ``records-lag``),
so dashboards take it from kafka-exporter, whose names are used here: per group and
partition ``kafka_consumergroup_current_offset`` (the committed offset) and
``kafka_consumergroup_lag`` (the partition's high watermark minus it), per group and topic
``kafka_consumergroup_lag_sum``, per group ``kafka_consumergroup_members``. Read from the
server's group coordinator when scraped; a partition the manager no longer has is left out.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from tierlog.errors import UnknownTopicOrPartitionError

if TYPE_CHECKING:
    from tierlog.manager.log_manager import LogManager
    from tierlog.server.server import Server

__all__ = ["ConsumerLagCollector"]

_PARTITION = ["consumergroup", "topic", "partition"]


class ConsumerLagCollector(Collector):
    """The committed offsets and lag of every consumer group of ``server`` (a running
    :class:`tierlog.server.server.Server` over ``manager``)."""

    def __init__(self, manager: LogManager, server: Server) -> None:
        self.manager = manager
        self.server = server

    def collect(self) -> Iterator[Metric]:
        current = GaugeMetricFamily("kafka_consumergroup_current_offset",
                                    "The group's committed offset of the partition.",
                                    labels=_PARTITION)
        lag = GaugeMetricFamily("kafka_consumergroup_lag",
                                "The partition's high watermark minus the group's committed "
                                "offset.", labels=_PARTITION)
        lag_sum = GaugeMetricFamily("kafka_consumergroup_lag_sum",
                                    "The group's lag summed over the topic's partitions.",
                                    labels=["consumergroup", "topic"])
        members = GaugeMetricFamily("kafka_consumergroup_members", "The group's members.",
                                    labels=["consumergroup"])
        coordinators = self.server.coordinators
        groups = coordinators.groups.groups.copy() if coordinators is not None else {}
        for group_id, group in sorted(groups.items()):
            members.add_metric([group_id], len(group.members))
            sums: dict[str, int] = {}
            for (topic, partition), committed in sorted(group.offsets.copy().items()):
                try:
                    end = self.manager.log(topic, partition).high_watermark
                except UnknownTopicOrPartitionError:
                    continue
                behind = max(end - committed.offset, 0)
                labels = [group_id, topic, str(partition)]
                current.add_metric(labels, committed.offset)
                lag.add_metric(labels, behind)
                sums[topic] = sums.get(topic, 0) + behind
            for topic, total in sorted(sums.items()):
                lag_sum.add_metric([group_id, topic], total)
        yield from (current, lag, lag_sum, members)
