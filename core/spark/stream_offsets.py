"""A stream's offsets: per partition, the next offset to read, written as Spark's Kafka source
writes them in its checkpoint (``{"orders": {"0": 123, "1": 40}}``), and the admission control
of ``maxOffsetsPerTrigger`` (a micro-batch's offsets shared among partitions in proportion to
their backlog, as Spark's Kafka source shares them). Pure functions, no pyspark import.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from tierlog.errors import ConfigError

#: ``(topic, partition) -> offset``: the next offset to read of each partition.
Offsets = dict[tuple[str, int], int]


def to_json(offsets: Mapping[tuple[str, int], int]) -> dict[str, dict[str, int]]:
    """``{("orders", 0): 123}`` -> ``{"orders": {"0": 123}}`` (Spark's Kafka offset JSON),
    topics and partitions in order so that equal offsets give equal JSON."""
    out: dict[str, dict[str, int]] = {}
    for (topic, partition), offset in sorted(offsets.items()):
        out.setdefault(topic, {})[str(partition)] = int(offset)
    return out


def from_json(data: object, what: str = "offset") -> Offsets:
    """Spark's Kafka offset JSON (already decoded) -> ``{(topic, partition): offset}``;
    ConfigError naming ``what`` when it is not that form (e.g. a checkpoint of another
    source)."""
    if not isinstance(data, Mapping):
        raise ConfigError(what, f'must be a JSON object like {{"topic": {{"0": 23}}}}, '
                                f'got {data!r:.200}')
    out: Offsets = {}
    for topic, parts in data.items():
        if not isinstance(parts, Mapping):
            raise ConfigError(what, f"topic {topic!r}: expected an object of partition to "
                                    f"offset, got {parts!r:.200}")
        for partition, offset in parts.items():
            try:
                p, o = int(partition), int(offset)
            except (TypeError, ValueError):
                raise ConfigError(what, f"topic {topic!r}: partition {partition!r} and offset "
                                        f"{offset!r} must be integers") from None
            if p < 0 or o < 0 or isinstance(offset, bool):
                raise ConfigError(what, f"{topic}-{partition}: offset {offset!r} is not an "
                                        f"offset of the log")
            out[(str(topic), p)] = o
    return out


def rate_limit(limit: int, start: Mapping[tuple[str, int], int],
               latest: Mapping[tuple[str, int], int],
               new_start: Mapping[tuple[str, int], int]) -> Offsets:
    """The end of a micro-batch reading at most about ``limit`` offsets from ``start`` towards
    ``latest``: each partition with a backlog gets ``limit * backlog / total`` of them (rounded
    down, but at least one: a small partition is never starved), never past its latest.
    Partitions not in ``start`` begin at ``new_start`` (their earliest). Spark's Kafka source
    shares ``maxOffsetsPerTrigger`` this way."""
    if limit < 1:
        raise ValueError(f"limit must be at least 1, got {limit}")
    sizes: dict[tuple[str, int], int] = {}
    for tp, end in latest.items():
        begin = start.get(tp, new_start.get(tp))
        if begin is not None and end > begin:
            sizes[tp] = end - begin
    total = sum(sizes.values())
    if total < 1:
        return dict(latest)
    out: Offsets = {}
    for tp, end in latest.items():
        if tp not in sizes:
            out[tp] = end
            continue
        begin = start.get(tp, new_start.get(tp, end))
        share = limit * (sizes[tp] / total)
        taken = math.ceil(share) if share < 1 else math.floor(share)
        out[tp] = min(end, begin + taken)
    return out
