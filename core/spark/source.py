"""``spark.read.format("tierlog")``: a PySpark data source reading Kafka topics straight from
tierlog's remote tier, one Spark partition per read split (a remote segment, or a part of one
larger than ``splitBytes``), with Spark's Kafka schema.

```python
import tierlog.spark
tierlog.spark.register(spark)
df = (spark.read.format("tierlog").option("path", "s3://bucket/tier")
      .option("subscribe", "orders").option("storage.endpoint_url", "http://minio:9000")
      .load())
```
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    EqualNullSafe,
    EqualTo,
    Filter,
    GreaterThan,
    GreaterThanOrEqual,
    In,
    InputPartition,
    LessThan,
    LessThanOrEqual,
)

from tierlog.errors import ConfigError
from tierlog.reader import (
    DEFAULT_BATCH_ROWS,
    DEFAULT_SPLIT_BYTES,
    ISOLATION_LEVELS,
    READ_UNCOMMITTED,
    RemoteTopicReader,
    read_split,
)
from tierlog.remote.api import TopicIdPartition
from tierlog.remote.options import (
    SPARK_PREFIXES,
    backend_for_url,
    filesystem_kwargs,
    options_under,
    parse_options,
)

log = logging.getLogger(__name__)

NAME = "tierlog"
#: Spark's Kafka source schema with headers (``includeHeaders=true``).
SCHEMA_DDL = ("key binary, value binary, topic string, partition int, offset long, "
              "timestamp timestamp, timestampType int, "
              "headers array<struct<key: string, value: binary>>")
#: ``storage.<name>`` (``fsspec.<name>`` is an alias): the remote storage options.
STORAGE_PREFIXES = SPARK_PREFIXES
_KNOWN = frozenset({
    "path", "subscribe", "subscribepattern", "assign", "startingoffsets", "endingoffsets",
    "startingtimestamp", "endingtimestamp", "startingoffsetsbytimestamp",
    "endingoffsetsbytimestamp", "isolation.level", "kafka.isolation.level", "failondataloss",
    "splitbytes", "batchrows", "filterpushdown", "topicid",
})
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MILLISECOND = timedelta(milliseconds=1)
#: Filters whose values a row must equal (a null-safe one pushed with a value is the same).
_EQUALITIES = (EqualTo, EqualNullSafe, In)
_TOPIC_OPTIONS = ("subscribe", "subscribepattern", "assign")

PerTopic = dict[str, dict[int, int]]


def _json(key: str, text: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise ConfigError(key, f"is not valid JSON: {e}") from e


def _int(key: str, text: str, minimum: int | None = None) -> int:
    try:
        value = int(text)
    except ValueError:
        raise ConfigError(key, f"must be an integer, got {text!r}") from None
    if minimum is not None and value < minimum:
        raise ConfigError(key, f"must be at least {minimum}, got {value}")
    return value


def _bool(key: str, text: str) -> bool:
    if text.strip().lower() not in ("true", "false"):
        raise ConfigError(key, f"must be true or false, got {text!r}")
    return text.strip().lower() == "true"


def _per_topic(key: str, text: str) -> PerTopic:
    """``{"topic": {"0": 23}}`` -> ``{"topic": {0: 23}}``."""
    data = _json(key, text)
    if not isinstance(data, dict) or not all(isinstance(v, dict) for v in data.values()):
        raise ConfigError(key, 'must be a JSON object like {"topic": {"0": 23}}')
    try:
        return {t: {int(p): int(o) for p, o in parts.items()} for t, parts in data.items()}
    except (TypeError, ValueError) as e:
        raise ConfigError(key, f"partitions and values must be integers: {e}") from e


def _topic_ids(key: str, text: str) -> str | dict[str, str]:
    """``<id>`` or ``{"topic": "<id>"}``, each a Kafka topic id (22 base64url characters)."""
    stripped = text.strip()
    ids = _json(key, stripped) if stripped.startswith("{") else stripped
    pairs = ids.items() if isinstance(ids, dict) else [("topic", ids)]
    for topic, topic_id in pairs:
        try:
            TopicIdPartition(topic_id, str(topic), 0)
        except (TypeError, ValueError) as e:
            raise ConfigError(key, f"{topic_id!r} is not a topic id: {e}") from None
    return ids


def _offsets(key: str, text: str, *, ending: bool) -> str | PerTopic:
    word = text.strip().lower()
    if word == "latest" or (word == "earliest" and not ending):
        return word
    if word == "earliest":
        raise ConfigError(key, "an ending offset cannot be 'earliest'")
    offsets = _per_topic(key, text)
    if ending and any(o == -2 for parts in offsets.values() for o in parts.values()):
        raise ConfigError(key, "an ending offset cannot be -2 (earliest)")
    return offsets


@dataclass(frozen=True)
class TierlogOptions:
    """The data source's options, parsed and validated (ConfigError names a bad key). The
    storage options stay out of the repr: they may hold credentials."""

    url: str
    storage_options: dict[str, Any] = field(default_factory=dict, repr=False)
    subscribe: tuple[str, ...] = ()
    subscribe_pattern: str | None = None
    assign: dict[str, tuple[int, ...]] | None = None
    starting_offsets: str | PerTopic = "earliest"
    ending_offsets: str | PerTopic = "latest"
    starting_timestamp: int | None = None
    ending_timestamp: int | None = None
    starting_by_timestamp: PerTopic | None = None
    ending_by_timestamp: PerTopic | None = None
    isolation_level: str = READ_UNCOMMITTED
    fail_on_data_loss: bool = True
    split_bytes: int = DEFAULT_SPLIT_BYTES
    batch_rows: int = DEFAULT_BATCH_ROWS
    filter_pushdown: bool = False
    topic_ids: str | dict[str, str] | None = None
    """``topicId``: the incarnation to read (one id, or JSON ``{"orders": "<id>"}`` per
    topic); without it the newest incarnation of a re-created topic is read."""

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> TierlogOptions:
        opts = {k.lower(): str(v) for k, v in options.items()}
        raw_storage = options_under(STORAGE_PREFIXES, opts)
        for key in list(opts):
            if key.startswith(STORAGE_PREFIXES):
                del opts[key]
            elif key not in _KNOWN:
                raise ConfigError(key, f"unknown option of the {NAME} data source; known: "
                                       f"{', '.join(sorted(_KNOWN))}, storage.<name>")
        if "path" not in opts:
            raise ConfigError("path", "the URL of the remote tier is required")
        # The writer's option names and checks (tierlog.remote.options), under storage.
        storage = parse_options(backend_for_url(opts["path"]), raw_storage,
                                prefix=STORAGE_PREFIXES[0])
        filesystem_kwargs(opts["path"], storage, prefix=STORAGE_PREFIXES[0])
        chosen = [k for k in _TOPIC_OPTIONS if k in opts]
        if len(chosen) != 1:
            raise ConfigError("subscribe", "exactly one of subscribe, subscribePattern and "
                                           "assign is required")
        values: dict[str, Any] = {"url": opts["path"], "storage_options": storage}
        if "subscribe" in opts:
            values["subscribe"] = tuple(t.strip() for t in opts["subscribe"].split(",")
                                        if t.strip())
        if "subscribepattern" in opts:
            values["subscribe_pattern"] = opts["subscribepattern"]
        if "assign" in opts:
            data = _json("assign", opts["assign"])
            if not isinstance(data, dict):
                raise ConfigError("assign", 'must be a JSON object like {"orders": [0, 1]}')
            values["assign"] = {t: tuple(int(p) for p in ps) for t, ps in data.items()}
        if "startingoffsets" in opts:
            values["starting_offsets"] = _offsets("startingoffsets", opts["startingoffsets"],
                                                  ending=False)
        if "endingoffsets" in opts:
            values["ending_offsets"] = _offsets("endingoffsets", opts["endingoffsets"],
                                                ending=True)
        for key, name in (("startingtimestamp", "starting_timestamp"),
                          ("endingtimestamp", "ending_timestamp")):
            if key in opts:
                values[name] = _int(key, opts[key], minimum=0)
        for key, name in (("startingoffsetsbytimestamp", "starting_by_timestamp"),
                          ("endingoffsetsbytimestamp", "ending_by_timestamp")):
            if key in opts:
                values[name] = _per_topic(key, opts[key])
        isolation = opts.get("isolation.level", opts.get("kafka.isolation.level"))
        if isolation is not None:
            if isolation not in ISOLATION_LEVELS:
                raise ConfigError("isolation.level", f"must be one of "
                                                     f"{', '.join(ISOLATION_LEVELS)}")
            values["isolation_level"] = isolation
        if "failondataloss" in opts:
            values["fail_on_data_loss"] = _bool("failondataloss", opts["failondataloss"])
        if "splitbytes" in opts:
            values["split_bytes"] = _int("splitbytes", opts["splitbytes"], minimum=1)
        if "batchrows" in opts:
            values["batch_rows"] = _int("batchrows", opts["batchrows"], minimum=1)
        if "filterpushdown" in opts:
            values["filter_pushdown"] = _bool("filterpushdown", opts["filterpushdown"])
        if "topicid" in opts:
            values["topic_ids"] = _topic_ids("topicid", opts["topicid"])
        return cls(**values)

    def topic_id(self, topic: str) -> str | None:
        """The incarnation of ``topic`` the ``topicId`` option chooses (None: the newest)."""
        if isinstance(self.topic_ids, dict):
            return self.topic_ids.get(topic)
        return self.topic_ids

    def topics(self, reader: RemoteTopicReader) -> list[str]:
        """The topics to read: subscribed, matching the pattern, or assigned."""
        if self.subscribe:
            return list(self.subscribe)
        if self.assign is not None:
            return sorted(self.assign)
        pattern = re.compile(self.subscribe_pattern or "")
        return [t for t in reader.list_topics() if pattern.fullmatch(t)]


@dataclass(frozen=True)
class PushedBounds:
    """What pushed filters allow (their AND): a superset of the matching rows, never less."""

    topics: frozenset[str] | None = None
    partitions: frozenset[int] | None = None
    min_partition: int | None = None
    max_partition: int | None = None
    min_offset: int | None = None
    max_offset: int | None = None
    min_timestamp: int | None = None

    def allows_partition(self, partition: int) -> bool:
        return ((self.partitions is None or partition in self.partitions)
                and (self.min_partition is None or partition >= self.min_partition)
                and (self.max_partition is None or partition <= self.max_partition))

    def with_filter(self, f: Filter) -> PushedBounds:
        """These bounds narrowed by ``f``; unchanged when ``f`` cannot prune."""
        attribute = getattr(f, "attribute", None)
        if attribute == ("topic",):
            names = _values(f, str, _EQUALITIES)
            if names is None:
                return self
            topics = frozenset(names) if self.topics is None else self.topics & set(names)
            return replace(self, topics=topics)
        if attribute == ("timestamp",):
            # Only lower bounds prune: CreateTime timestamps need not grow with offsets.
            stamps = _values(f, datetime, (*_EQUALITIES, GreaterThan, GreaterThanOrEqual))
            if stamps is None:
                return self
            floor_ms = min((s if s.tzinfo else s.replace(tzinfo=UTC)) - _EPOCH
                           for s in stamps) // _MILLISECOND
            return replace(self, min_timestamp=_tighter(self.min_timestamp, floor_ms, max))
        if attribute not in (("partition",), ("offset",)):
            return self
        numbers = _values(f, int, (*_EQUALITIES, GreaterThan, GreaterThanOrEqual, LessThan,
                                   LessThanOrEqual))
        if numbers is None:
            return self
        lo, hi = min(numbers), max(numbers)
        if isinstance(f, GreaterThan):
            lo, hi = lo + 1, None
        elif isinstance(f, GreaterThanOrEqual):
            hi = None
        elif isinstance(f, LessThan):
            lo, hi = None, hi - 1
        elif isinstance(f, LessThanOrEqual):
            lo = None
        if attribute == ("offset",):
            return replace(self, min_offset=_tighter(self.min_offset, lo, max),
                           max_offset=_tighter(self.max_offset, hi, min))
        narrowed = replace(self, min_partition=_tighter(self.min_partition, lo, max),
                           max_partition=_tighter(self.max_partition, hi, min))
        if isinstance(f, _EQUALITIES):
            kept = frozenset(numbers) if self.partitions is None else self.partitions & set(numbers)
            narrowed = replace(narrowed, partitions=kept)
        return narrowed


def _tighter(current: int | None, new: int | None, pick: Any) -> int | None:
    if current is None or new is None:
        return new if current is None else current
    return int(pick(current, new))


def _values(f: Filter, kind: type, kinds: tuple[type, ...]) -> list[Any] | None:
    """The filter's literal values when it is one of ``kinds`` and they are all ``kind``."""
    if not isinstance(f, kinds):
        return None
    values = list(f.value) if isinstance(f, In) else [f.value]  # type: ignore[attr-defined]
    if not values or not all(isinstance(v, kind) and not isinstance(v, bool) for v in values):
        return None
    return values


class TierlogReader(DataSourceReader):
    """Plans one InputPartition per ReadSplit (each remote segment, or a byte range of a
    large one) and reads each with ``tierlog.reader.read_split`` from the options alone."""

    def __init__(self, options: TierlogOptions) -> None:
        self.options = options
        self.bounds = PushedBounds()

    def partitions(self) -> list[InputPartition]:
        o, b = self.options, self.bounds
        reader = RemoteTopicReader(o.url, o.storage_options, split_bytes=o.split_bytes,
                                   fail_on_data_loss=o.fail_on_data_loss)
        splits = []
        for topic in o.topics(reader):
            if b.topics is not None and topic not in b.topics:
                continue
            topic_id = o.topic_id(topic)
            found = reader.list_partitions(topic, topic_id=topic_id)
            assigned = found if o.assign is None else [p for p in o.assign[topic] if p in found]
            partitions = [p for p in assigned if b.allows_partition(p)]
            starting: Any = o.starting_offsets if isinstance(o.starting_offsets, str) \
                else o.starting_offsets.get(topic, {})
            ending: Any = o.ending_offsets if isinstance(o.ending_offsets, str) \
                else o.ending_offsets.get(topic, {})
            splits += reader.plan(
                topic, partitions, starting_offsets=starting, ending_offsets=ending,
                starting_timestamp=_timestamps(o.starting_timestamp, o.starting_by_timestamp,
                                               topic),
                ending_timestamp=_timestamps(o.ending_timestamp, o.ending_by_timestamp, topic),
                min_offset=b.min_offset, max_offset=b.max_offset, min_timestamp=b.min_timestamp,
                isolation_level=o.isolation_level, batch_rows=o.batch_rows, topic_id=topic_id)
        log.info("%s: %d input partitions, %d bytes of segments to read", o.url, len(splits),
                 sum(s.size_in_bytes for s in splits))
        return [InputPartition(split) for split in splits]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if partition.value is None:  # Spark's stand-in when there is nothing to read
            return iter(())
        return read_split(partition.value)


class TierlogPushdownReader(TierlogReader):
    """A TierlogReader that also prunes with the filters Spark pushes (option
    ``filterPushdown=true``; the session needs ``spark.sql.python.filterPushdown.enabled``).

    ``topic``, ``partition``, ``offset`` and lower ``timestamp`` bounds prune segments and
    byte ranges; Spark still applies every filter. Off by default: Spark 4.3.0 keeps the read
    plan made for one query's pushed filters on the DataFrame and reuses it for later queries
    of that DataFrame (or temp view) that push no filter, which would then miss the pruned
    rows. Both the planned partitions and the pickled reader are reused, so no reader-side
    scheme can tell those queries apart. Enable it for DataFrames that every query filters;
    bounds given as options belong to the DataFrame and prune the same way, always safely.
    """

    def pushFilters(self, filters: list[Filter]) -> Sequence[Filter]:
        bounds = PushedBounds()
        for f in filters:
            bounds = bounds.with_filter(f)
        self.bounds = bounds
        # Pruning is conservative (segments, byte ranges): Spark applies every filter itself.
        return list(filters)


def _timestamps(every: int | None, per_topic: PerTopic | None, topic: str
                ) -> int | dict[int, int] | None:
    if every is not None:
        return every
    if per_topic is not None and topic in per_topic:
        return per_topic[topic]
    return None


class TierlogDataSource(DataSource):
    """The ``tierlog`` data source: options are parsed (and checked) when the DataFrame is
    loaded; readers plan and read with nothing but them.

    Options (Spark lower-cases the keys): ``path`` (the tier's URL); one of ``subscribe``
    (comma list), ``subscribePattern`` (regex) or ``assign`` (JSON ``{"orders": [0, 1]}``);
    ``startingOffsets``/``endingOffsets`` (``earliest``/``latest`` or JSON
    ``{"orders": {"0": 23, "1": -2}}``, -2 earliest, -1 latest, ends exclusive, partitions left
    out from earliest to latest); ``startingTimestamp``/``endingTimestamp`` (epoch ms) and
    ``startingOffsetsByTimestamp``/``endingOffsetsByTimestamp`` (JSON), which take precedence
    over offsets as in Spark's Kafka source; ``isolation.level`` (or
    ``kafka.isolation.level``): ``read_uncommitted`` (default) or ``read_committed``;
    ``failOnDataLoss`` (default true); ``splitBytes`` (default 128 MiB: larger segments are
    read by several tasks); ``batchRows``; ``filterPushdown`` (see TierlogPushdownReader);
    ``topicId`` (a topic id, or JSON ``{"orders": "<id>"}``: the incarnation of a re-created
    topic to read; by default the newest, by the latest event time in its metadata);
    the remote storage options as ``storage.<name>`` (or ``fsspec.<name>``), with the names
    and values of the writer's ``remote.storage.options.<name>`` (tierlog.remote.options:
    ``endpoint_url``, ``key``, ``secret``, ``region``, ``client_kwargs``, ``config_kwargs``,
    ``verify``, ...).
    """

    def __init__(self, options: dict[str, str]) -> None:
        super().__init__(options)
        self.parsed = TierlogOptions.parse(options)

    @classmethod
    def name(cls) -> str:
        return NAME

    def schema(self) -> str:
        return SCHEMA_DDL

    def reader(self, schema: Any) -> DataSourceReader:
        if self.parsed.filter_pushdown:
            return TierlogPushdownReader(self.parsed)
        return TierlogReader(self.parsed)


def register(spark: Any) -> None:
    """Make ``spark.read.format("tierlog")`` available in ``spark``'s session."""
    spark.dataSource.register(TierlogDataSource)
