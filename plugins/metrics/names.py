"""The one mapping from Kafka's metric names (JMX MBean names) to Prometheus names.

Kafka names a metric ``<group>:type=<Type>,name=<Name>`` plus tags (``topic``, ``partition``);
tierlog's own metrics use the same shape under the ``tierlog.*`` groups. The Prometheus name is
the group (dots as underscores), the type and the name, each in snake case, joined by ``_``;
the tags become labels. By the metric's kind:

- a meter (Kafka's ``...PerSec``) is a counter: ``PerSec`` is dropped and ``_total`` added
  (``kafka.server:type=BrokerTopicMetrics,name=RemoteCopyBytesPerSec`` ->
  ``kafka_server_broker_topic_metrics_remote_copy_bytes_total``); a counted time in
  milliseconds (``...TimeMs``) is exported in seconds (``..._time_seconds_total``);
- a timer (Kafka's ``...RateAndTimeMs``) is a summary in seconds: ``RateAndTimeMs`` becomes
  ``_seconds``, with ``_count`` and ``_sum`` (``kafka.log:type=LogFlushStats,
  name=LogFlushRateAndTimeMs`` -> ``kafka_log_log_flush_stats_log_flush_seconds``);
- a gauge keeps its name (``kafka.log:type=Log,name=NumLogSegments`` ->
  ``kafka_log_log_num_log_segments``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

__all__ = ["Kind", "MBean", "parse_mbean", "prometheus_name", "snake"]

Kind = Literal["counter", "gauge", "timer"]

_MBEAN = re.compile(r"^(?P<group>[A-Za-z][\w.]*):type=(?P<type>\w+),name=(?P<name>[\w-]+)$")
_CAMEL_BOUNDARY = re.compile(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])")


@dataclass(frozen=True, slots=True)
class MBean:
    """A Kafka metric name without its tags: ``group:type=Type,name=Name``."""

    group: str
    type: str
    name: str

    def __str__(self) -> str:
        return f"{self.group}:type={self.type},name={self.name}"


def parse_mbean(text: str) -> MBean:
    """``"kafka.log:type=Log,name=Size"`` -> MBean; ValueError naming the text otherwise."""
    match = _MBEAN.match(text)
    if match is None:
        raise ValueError(f"not a metric name of the form group:type=Type,name=Name: {text!r}")
    return MBean(match["group"], match["type"], match["name"])


def snake(text: str) -> str:
    """CamelCase, dotted or hyphenated -> snake_case (``RemoteLogSizeBytes`` ->
    ``remote_log_size_bytes``, ``max-clean-time-secs`` -> ``max_clean_time_secs``)."""
    spaced = _CAMEL_BOUNDARY.sub("_", text)
    return re.sub(r"[^0-9a-zA-Z]+", "_", spaced).strip("_").lower()


def prometheus_name(mbean: MBean | str, kind: Kind) -> str:
    """The Prometheus name of a Kafka metric of ``kind`` (see the module docstring). For a
    counter this is the name with ``_total`` (prometheus_client's families take it without:
    strip it there)."""
    bean = parse_mbean(mbean) if isinstance(mbean, str) else mbean
    stem, suffix = bean.name, ""
    if kind == "counter":
        stem = stem.removesuffix("PerSec")
        if stem.endswith("TimeMs"):
            stem, suffix = stem[: -len("Ms")], "_seconds"
        suffix += "_total"
    elif kind == "timer":
        if not stem.endswith("RateAndTimeMs"):
            raise ValueError(f"a timer's name ends in RateAndTimeMs: {bean}")
        stem, suffix = stem[: -len("RateAndTimeMs")], "_seconds"
    return "_".join(snake(part) for part in (bean.group, bean.type, stem)) + suffix
